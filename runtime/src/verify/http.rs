//! HTTP endpoints: one POST of the request object per request, the response body is the
//! response object. Plain `http://` over std's `TcpStream` (no TLS: put a local proxy in front
//! of an `https://` server); every read and write has the request's deadline.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::protocol::snippet;
use super::worker::MAX_LINE;

/// Where to POST: `http://host[:port][/path]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl HttpTarget {
    pub fn parse(url: &str) -> Result<HttpTarget, String> {
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(format!(
                    "`{url}`: https is not supported (rlc speaks plain HTTP to verifier servers; \
                     run the server on http://, or put a local proxy in front of it)"
                ));
            }
            _ => return Err(format!("`{url}` is not an http:// URL")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            // An IPv6 literal's colons are inside brackets.
            Some((host, port)) if !port.contains(']') => {
                let port = port
                    .parse()
                    .map_err(|_| format!("`{url}`: `{port}` is not a port"))?;
                (host, port)
            }
            _ => (authority, 80),
        };
        if host.is_empty() {
            return Err(format!("`{url}` names no host"));
        }
        Ok(HttpTarget {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            path: path.to_string(),
        })
    }

    /// POSTs `body` (JSON) and returns the response body; everything within `timeout`.
    pub fn post(&self, body: &str, timeout: Duration) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        let left = || {
            deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("no answer within {}", super::worker::seconds(timeout)))
        };
        let address = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve `{}`: {e}", self.host))?
            .next()
            .ok_or_else(|| format!("`{}` resolves to no address", self.host))?;
        let mut stream = TcpStream::connect_timeout(&address, left()?)
            .map_err(|e| format!("cannot connect to {address}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let host = if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        };
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Accept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.path,
            body.len()
        );
        stream
            .set_write_timeout(Some(left()?))
            .and_then(|()| stream.write_all(head.as_bytes()))
            .and_then(|()| stream.write_all(body.as_bytes()))
            .map_err(|e| timed_out(e, "sending the request", timeout))?;
        let mut response = Vec::new();
        let mut buf = [0u8; 16 << 10];
        loop {
            stream
                .set_read_timeout(Some(left()?))
                .map_err(|e| format!("{e}"))?;
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    response.extend_from_slice(&buf[..n]);
                    if response.len() > MAX_LINE {
                        return Err(format!("answered more than {} MiB", MAX_LINE >> 20));
                    }
                    // Stop as soon as the body is whole (a server may keep the connection).
                    if complete(&response) {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(timed_out(e, "reading the response", timeout)),
            }
        }
        parse_response(&response)
    }
}

fn timed_out(e: std::io::Error, doing: &str, timeout: Duration) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "no answer within {} ({doing})",
            super::worker::seconds(timeout)
        ),
        _ => format!("{doing}: {e}"),
    }
}

/// The head and the body of a raw response, where the head is whole.
fn split(raw: &[u8]) -> Option<(&str, &[u8])> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    Some((head, &raw[end + 4..]))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Whether `raw` holds the whole response (by Content-Length or the chunked terminator).
fn complete(raw: &[u8]) -> bool {
    let Some((head, body)) = split(raw) else {
        return false;
    };
    if let Some(length) = header(head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
        return body.len() >= length;
    }
    if header(head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        return dechunk(body).is_some();
    }
    false
}

fn parse_response(raw: &[u8]) -> Result<String, String> {
    let (head, body) = split(raw).ok_or_else(|| {
        format!(
            "the server's answer is not HTTP: {}",
            snippet(&String::from_utf8_lossy(raw))
        )
    })?;
    let status = head.lines().next().unwrap_or_default();
    let code: u16 = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line `{}`", snippet(status)))?;
    let body =
        if header(head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            dechunk(body).ok_or("a chunked body that ends early")?
        } else {
            match header(head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
                Some(n) if n <= body.len() => body[..n].to_vec(),
                Some(n) => return Err(format!("a body of {} bytes, {n} announced", body.len())),
                None => body.to_vec(),
            }
        };
    let text = String::from_utf8(body).map_err(|_| "a body that is not UTF-8".to_string())?;
    if !(200..300).contains(&code) {
        return Err(format!("HTTP status {code}: {}", snippet(&text)));
    }
    Ok(text)
}

/// A chunked body's data, or `None` while it is incomplete.
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&body[..line_end]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        if body.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = HttpTarget::parse("http://127.0.0.1:8000/score").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 8000, "/score")
        );
        let t = HttpTarget::parse("http://example.org").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("example.org", 80, "/")
        );
        let t = HttpTarget::parse("http://[::1]:9/x").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 9));
        let e = HttpTarget::parse("https://example.org/score").unwrap_err();
        assert!(e.contains("https is not supported"), "{e}");
        assert!(HttpTarget::parse("ftp://x").is_err());
        assert!(HttpTarget::parse("http://:80/").is_err());
        assert!(HttpTarget::parse("http://h:port/").is_err());
    }

    #[test]
    fn responses() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        assert!(complete(raw));
        assert_eq!(parse_response(raw).unwrap(), "{}");
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
        assert!(complete(chunked));
        assert_eq!(parse_response(chunked).unwrap(), "{}");
        assert!(!complete(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{}"));
        let e = parse_response(b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nboom").unwrap_err();
        assert!(e.contains("500") && e.contains("boom"), "{e}");
    }
}

//! The language server's wire: JSON-RPC messages behind `Content-Length` headers (the LSP base
//! protocol) over standard input and output, read so that no client can stop the server.
//!
//! lsp-server's own stdio transport ends the connection at the first malformed message and
//! allocates whatever `Content-Length` says before reading a byte of the body. Here:
//!
//! - [`FrameReader`] cuts the input into bodies. A header it cannot use (a line without `:`, a
//!   line over [`MAX_HEADER_LINE`] bytes, a missing, unreadable or conflicting
//!   `Content-Length`, or a length over [`MAX_MESSAGE`]) is reported as [`Frame::Skipped`], and
//!   reading resumes at the next `Content-Length:` in the input, whatever lies between. A body
//!   is read as it arrives, never allocated from the header's figure, so memory follows the
//!   bytes actually sent and stays under [`MAX_MESSAGE`] per message.
//! - [`decode`] turns a body into a message, or into the JSON-RPC error it must be answered
//!   with: `ParseError` (-32700) for a body that is not JSON, `InvalidRequest` (-32600) for JSON
//!   that is not a message, with the request's `id` where one can be read and `null` otherwise,
//!   as JSON-RPC 2.0 asks. A malformed response from the client is not answered.
//! - [`stdio`] joins the two to the server's [`Connection`]: a reader thread sends each message
//!   on (through a rendezvous channel, so a client that writes faster than the server works
//!   queues nothing), logs each skipped frame on standard error, and writes the error answers
//!   itself; a writer thread writes the server's messages. Both write whole frames under one
//!   lock, so frames never interleave.

use lsp_server::{Connection, ErrorCode, Message};
use serde_json::{Value, json};
use std::io::{self, BufRead, Write};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The largest body accepted: 64 MiB (an rlc program is kilobytes; a document this large is
/// still read, though not checked as you type; anything larger is refused unread).
pub const MAX_MESSAGE: u64 = 64 << 20;

/// The longest header line kept: longer ones are not headers.
pub const MAX_HEADER_LINE: usize = 1024;

/// The header that starts every message, and where reading resumes after a bad frame (compared
/// ignoring ASCII case; its first byte occurs nowhere else in it, which the scan relies on).
const CONTENT_LENGTH: &[u8] = b"content-length:";

/// One unit of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A message body, exactly as long as its `Content-Length`.
    Body(Vec<u8>),
    /// Input that is not a usable frame: why (for the log). Reading goes on at the next
    /// `Content-Length:`.
    Skipped(String),
}

/// Cuts a byte stream into [`Frame`]s.
pub struct FrameReader<R> {
    input: R,
    /// Bytes to read again before the input (from `at` on): the header lines of a skipped
    /// frame other than its `Content-Length` ones, where a `Content-Length:` glued onto junk
    /// may hide.
    pending: Vec<u8>,
    at: usize,
    /// After a skipped frame: the bytes up to the next `Content-Length:` are to be dropped.
    resync: bool,
    /// Bytes already read that start the next header line (the `Content-Length:` that ended a
    /// resynchronisation).
    carry: Vec<u8>,
}

/// A header line as read: its bytes (without the line end), or that it was too long.
enum Line {
    Text(Vec<u8>),
    TooLong,
    /// The input ended; `true` when some bytes of the line had been read.
    Eof(bool),
}

/// The most header lines one message may have.
const MAX_HEADERS: usize = 32;

impl<R: BufRead> FrameReader<R> {
    pub fn new(input: R) -> Self {
        FrameReader {
            input,
            pending: Vec::new(),
            at: 0,
            resync: false,
            carry: Vec::new(),
        }
    }

    /// The next frame, or `None` at the end of the input.
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        if self.resync {
            if !self.skip_to_header()? {
                return Ok(None);
            }
            self.resync = false;
        }
        let mut seen = Vec::new();
        let frame = self.frame(&mut seen)?;
        if let Some(Frame::Skipped(_)) = frame {
            self.resync = true;
            // Search the skipped header lines again. Each pass moves on: a `Content-Length:`
            // found in them starts a `Content-Length` line, which is not searched again.
            if !seen.is_empty() {
                seen.extend_from_slice(&self.pending[self.at..]);
                self.pending = seen;
                self.at = 0;
            }
        }
        Ok(frame)
    }

    /// One frame; `seen` receives its header lines as read but the `Content-Length` ones, each
    /// ended by `\n`.
    fn frame(&mut self, seen: &mut Vec<u8>) -> io::Result<Option<Frame>> {
        let mut length: Option<u64> = None;
        for n in 0.. {
            if n == MAX_HEADERS {
                return Ok(Some(skipped(format!(
                    "a message with more than {MAX_HEADERS} header lines"
                ))));
            }
            let line = match self.line()? {
                Line::Eof(false) if n == 0 => return Ok(None),
                Line::Eof(_) => return Ok(Some(skipped("the input ended inside a header"))),
                Line::TooLong => {
                    return Ok(Some(skipped(format!(
                        "a header line longer than {MAX_HEADER_LINE} bytes"
                    ))));
                }
                Line::Text(line) => line,
            };
            if line.is_empty() {
                seen.push(b'\n');
                break;
            }
            let colon = line.iter().position(|&b| b == b':');
            let name = &line[..colon.unwrap_or(0)];
            if !name.eq_ignore_ascii_case(&CONTENT_LENGTH[..CONTENT_LENGTH.len() - 1]) {
                seen.extend_from_slice(&line);
                seen.push(b'\n');
            }
            let Some(colon) = colon else {
                return Ok(Some(skipped(format!(
                    "a header line without `:`: {}",
                    shown(&line)
                ))));
            };
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            if !name.eq_ignore_ascii_case(&CONTENT_LENGTH[..CONTENT_LENGTH.len() - 1]) {
                // Content-Type, or any other header: nothing the server needs.
                continue;
            }
            let value = value.trim_ascii();
            let Some(n) = parse_length(value) else {
                return Ok(Some(skipped(format!(
                    "a Content-Length that is not a byte count: {}",
                    shown(value)
                ))));
            };
            if length.is_some_and(|l| l != n) {
                return Ok(Some(skipped("two different Content-Length headers")));
            }
            length = Some(n);
        }
        let Some(length) = length else {
            return Ok(Some(skipped("a message without a Content-Length header")));
        };
        if length > MAX_MESSAGE {
            return Ok(Some(skipped(format!(
                "a message of {length} bytes, over the limit of {MAX_MESSAGE} bytes (64 MiB)"
            ))));
        }
        // Read as the bytes arrive: never allocated from the header's figure.
        let mut body = Vec::new();
        while (body.len() as u64) < length {
            let buf = self.fill()?;
            if buf.is_empty() {
                seen.clear();
                return Ok(Some(skipped(format!(
                    "the input ended {} bytes into a body of {length} bytes",
                    body.len()
                ))));
            }
            let take = buf.len().min((length - body.len() as u64) as usize);
            body.extend_from_slice(&buf[..take]);
            self.consume(take);
        }
        Ok(Some(Frame::Body(body)))
    }

    /// The bytes to read next: pending ones first, then the input's (none at its end).
    fn fill(&mut self) -> io::Result<&[u8]> {
        if self.at < self.pending.len() {
            return Ok(&self.pending[self.at..]);
        }
        loop {
            match self.input.fill_buf() {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.input.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        if self.at < self.pending.len() {
            self.at += n;
            if self.at == self.pending.len() {
                self.pending.clear();
                self.at = 0;
            }
        } else {
            self.input.consume(n);
        }
    }

    /// Reads one line (up to `\n`, which is dropped with a `\r` before it), keeping at most
    /// [`MAX_HEADER_LINE`] bytes of it.
    fn line(&mut self) -> io::Result<Line> {
        let mut line = std::mem::take(&mut self.carry);
        let mut too_long = false;
        let mut any = !line.is_empty();
        loop {
            let buf = self.fill()?;
            if buf.is_empty() {
                return Ok(Line::Eof(any));
            }
            any = true;
            let (chunk, end) = match buf.iter().position(|&b| b == b'\n') {
                Some(at) => (&buf[..at], Some(at + 1)),
                None => (buf, None),
            };
            if !too_long {
                if line.len() + chunk.len() > MAX_HEADER_LINE {
                    too_long = true;
                    line = Vec::new();
                } else {
                    line.extend_from_slice(chunk);
                }
            }
            let used = end.unwrap_or(buf.len());
            self.consume(used);
            if end.is_some() {
                if too_long {
                    return Ok(Line::TooLong);
                }
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Line::Text(line));
            }
        }
    }

    /// Drops bytes up to and including the next `Content-Length:` (which becomes the start of
    /// the next header line); `false` if the input ends first.
    fn skip_to_header(&mut self) -> io::Result<bool> {
        let mut matched = 0;
        loop {
            let buf = self.fill()?;
            if buf.is_empty() {
                return Ok(false);
            }
            let mut used = buf.len();
            for (i, &b) in buf.iter().enumerate() {
                // The needle's first byte occurs once in it, so a mismatch can only restart
                // a match at this very byte.
                matched = if b.eq_ignore_ascii_case(&CONTENT_LENGTH[matched]) {
                    matched + 1
                } else {
                    usize::from(b.eq_ignore_ascii_case(&CONTENT_LENGTH[0]))
                };
                if matched == CONTENT_LENGTH.len() {
                    used = i + 1;
                    break;
                }
            }
            self.consume(used);
            if matched == CONTENT_LENGTH.len() {
                self.carry = b"Content-Length:".to_vec();
                return Ok(true);
            }
        }
    }
}

fn skipped(why: impl Into<String>) -> Frame {
    Frame::Skipped(why.into())
}

/// A byte count in decimal digits; one too large for `u64` counts as `u64::MAX` (over any limit).
fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    }))
    .map(|n| n.unwrap_or(u64::MAX))
}

/// Bytes from the input for a log line: at most 80 characters of them.
fn shown(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]);
    let more = if bytes.len() > 80 { "…" } else { "" };
    format!("{:?}{more}", text)
}

/// What a body is.
#[derive(Debug)]
pub enum Decoded {
    Message(Message),
    /// To be answered with this error; `id` is the request's, or `null` where none can be read.
    Invalid {
        id: Value,
        code: ErrorCode,
        message: String,
    },
    /// Not answered (a malformed response from the client): why, for the log.
    Ignored(String),
}

/// Reads a body as a JSON-RPC message (see the module docs for what is answered how).
pub fn decode(body: &[u8]) -> Decoded {
    let invalid = |id: Value, code, message: String| Decoded::Invalid { id, code, message };
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return invalid(
                Value::Null,
                ErrorCode::ParseError,
                format!("the message is not JSON: {e}"),
            );
        }
    };
    let Value::Object(object) = &value else {
        return invalid(
            Value::Null,
            ErrorCode::InvalidRequest,
            "a message must be a JSON object (batches are not part of LSP)".into(),
        );
    };
    let id = object.get("id");
    // The id to answer with: JSON-RPC ids are numbers or strings, anything else is answered
    // with `null`.
    let answer_id = match id {
        Some(v @ (Value::Number(_) | Value::String(_))) => v.clone(),
        _ => Value::Null,
    };
    if let Some(method) = object.get("method") {
        if !method.is_string() {
            return invalid(
                answer_id,
                ErrorCode::InvalidRequest,
                "`method` must be a string".into(),
            );
        }
        if let Some(id) = id {
            let usable = match id {
                Value::String(_) => true,
                Value::Number(n) => n.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
                _ => false,
            };
            if !usable {
                return invalid(
                    answer_id,
                    ErrorCode::InvalidRequest,
                    format!("a request id must be a string or a 32-bit integer, not {id}"),
                );
            }
        }
        if let Some(params) = object.get("params")
            && !matches!(params, Value::Object(_) | Value::Array(_) | Value::Null)
        {
            if id.is_none() {
                return Decoded::Ignored(format!(
                    "a notification whose `params` is neither an object nor an array: {params}"
                ));
            }
            return invalid(
                answer_id,
                ErrorCode::InvalidRequest,
                "`params` must be an object or an array".into(),
            );
        }
    } else if !(object.contains_key("result") || object.contains_key("error")) {
        return invalid(
            answer_id,
            ErrorCode::InvalidRequest,
            "a message needs a `method` (a request or a notification) or a `result` or an \
             `error` (a response)"
                .into(),
        );
    }
    let is_response = !object.contains_key("method");
    match serde_json::from_value::<Message>(value) {
        Ok(message) => Decoded::Message(message),
        Err(e) if is_response => Decoded::Ignored(format!("a malformed response: {e}")),
        Err(e) => invalid(answer_id, ErrorCode::InvalidRequest, e.to_string()),
    }
}

/// Where frames are written: shared by the reader thread (error answers) and the writer thread.
type Output = Arc<Mutex<Box<dyn Write + Send>>>;

/// Writes one whole frame (made before the lock is taken, so the lock is held only to write).
fn write_frame(output: &Output, frame: &[u8]) -> io::Result<()> {
    let mut out = output.lock().unwrap_or_else(|e| e.into_inner());
    out.write_all(frame)?;
    out.flush()
}

/// The threads behind a connection from [`stdio`] or [`spawn`].
pub struct Transport {
    writer: JoinHandle<io::Result<()>>,
}

impl Transport {
    /// Waits until every message the server sent is written: call after dropping the
    /// server's [`Connection`]. The reader thread is left alone: it may be waiting for input
    /// that will never come, and ends with the process.
    pub fn join(self) -> io::Result<()> {
        match self.writer.join() {
            Ok(result) => result,
            Err(_) => Err(io::Error::other("the writer thread panicked")),
        }
    }
}

/// The server's connection over standard input and output.
pub fn stdio() -> (Connection, Transport) {
    spawn(io::BufReader::new(io::stdin()), io::stdout(), |line| {
        eprintln!("rlc lsp: {line}")
    })
}

/// The server's connection over `input` and `output`; `log` receives one line per skipped
/// frame or ignored message.
pub fn spawn(
    input: impl BufRead + Send + 'static,
    output: impl Write + Send + 'static,
    log: impl Fn(&str) + Send + 'static,
) -> (Connection, Transport) {
    let (to_server, from_client) = crossbeam_channel::bounded::<Message>(0);
    let (to_client, from_server) = crossbeam_channel::bounded::<Message>(0);
    let output: Output = Arc::new(Mutex::new(Box::new(output)));
    let out = output.clone();
    std::thread::Builder::new()
        .name("lsp-reader".into())
        .spawn(move || {
            let mut frames = FrameReader::new(input);
            loop {
                let frame = match frames.next_frame() {
                    Ok(Some(frame)) => frame,
                    Ok(None) => return,
                    Err(e) => {
                        log(&format!("reading the input: {e}"));
                        return;
                    }
                };
                let body = match frame {
                    Frame::Body(body) => body,
                    Frame::Skipped(why) => {
                        log(&format!("skipped: {why}"));
                        continue;
                    }
                };
                match decode(&body) {
                    Decoded::Message(msg) => {
                        let exit = matches!(&msg, Message::Notification(n) if n.method == "exit");
                        if to_server.send(msg).is_err() || exit {
                            return;
                        }
                    }
                    Decoded::Invalid { id, code, message } => {
                        log(&format!("answered with an error: {message}"));
                        let answer = json!({
                            "jsonrpc": "2.0",
                            "id": id,
                            "error": { "code": code as i32, "message": message },
                        });
                        let body = answer.to_string();
                        let frame = format!("Content-Length: {}\r\n\r\n{body}", body.len());
                        if write_frame(&out, frame.as_bytes()).is_err() {
                            return;
                        }
                    }
                    Decoded::Ignored(why) => log(&format!("ignored: {why}")),
                }
            }
        })
        .expect("spawn the language server's reader thread");
    let writer = std::thread::Builder::new()
        .name("lsp-writer".into())
        .spawn(move || {
            for msg in from_server {
                // lsp-server's own framing and JSON (with `"jsonrpc": "2.0"`).
                let mut frame = Vec::new();
                msg.write(&mut frame)?;
                write_frame(&output, &frame)?;
            }
            Ok(())
        })
        .expect("spawn the language server's writer thread");
    let conn = Connection {
        sender: to_client,
        receiver: from_client,
    };
    (conn, Transport { writer })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8]) -> Vec<Frame> {
        let mut reader = FrameReader::new(input);
        let mut out = Vec::new();
        while let Some(frame) = reader.next_frame().unwrap() {
            out.push(frame);
        }
        out
    }

    fn msg(body: &str) -> String {
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    }

    fn body(text: &str) -> Frame {
        Frame::Body(text.as_bytes().to_vec())
    }

    fn is_skipped(frame: &Frame, why: &str) -> bool {
        matches!(frame, Frame::Skipped(w) if w.contains(why))
    }

    #[test]
    fn frames_well_formed_messages_with_any_headers() {
        let input = format!(
            "{}Content-Type: application/vscode-jsonrpc; charset=utf-8\r\ncontent-length:2\r\n\r\n{{}}{}",
            msg("[1]"),
            msg("{\"a\":\"é\"}")
        );
        assert_eq!(
            frames(input.as_bytes()),
            [body("[1]"), body("{}"), body("{\"a\":\"é\"}")]
        );
        // Bare `\n` line ends are accepted too.
        assert_eq!(frames(b"Content-Length: 1\n\nx"), [body("x")]);
        assert_eq!(frames(b""), []);
    }

    #[test]
    fn bad_headers_are_skipped_to_the_next_content_length() {
        let good = msg("{}");
        let cases: &[(String, &str)] = &[
            (format!("garbage\r\n{good}"), "without `:`"),
            (
                format!("Content-Type: x\r\n\r\n{{\"id\":1}}{good}"),
                "without a Content-Length",
            ),
            (
                format!("Content-Length: 1000000000000000\r\n\r\n{good}"),
                "over the limit",
            ),
            (
                format!("Content-Length: 99999999999999999999999999\r\n\r\n{good}"),
                "over the limit",
            ),
            (
                format!("Content-Length: -3\r\n\r\n{good}"),
                "not a byte count",
            ),
            (
                format!("Content-Length: 2\r\nContent-Length: 3\r\n\r\n{good}"),
                "two different",
            ),
            (
                format!("X-Long: {}\r\n{good}", "y".repeat(5000)),
                "longer than",
            ),
            // A body shorter than announced eats into the next frame: the rest of that frame
            // is skipped too, up to the next header.
            (
                format!("{}junk{good}", "Content-Length: 1\r\n\r\n{"),
                "without a Content-Length",
            ),
        ];
        for (input, why) in cases {
            let got = frames(input.as_bytes());
            let (last, before) = got.split_last().unwrap();
            assert_eq!(last, &body("{}"), "{input:?}: {got:?}");
            assert!(
                before.iter().any(|f| is_skipped(f, why)),
                "{input:?}: {got:?}"
            );
        }
    }

    #[test]
    fn a_truncated_input_ends_with_a_skipped_frame() {
        let got = frames(b"Content-Length: 100\r\n\r\n{\"jsonrpc\"");
        assert!(
            is_skipped(&got[0], "ended 10 bytes into a body of 100"),
            "{got:?}"
        );
        assert_eq!(got.len(), 1);
        let got = frames(b"Content-Length: 10\r\nContent-Ty");
        assert!(is_skipped(&got[0], "inside a header"), "{got:?}");
        let got = frames(b"Content-Length: 10");
        assert!(is_skipped(&got[0], "inside a header"), "{got:?}");
    }

    #[test]
    fn the_resynchronisation_finds_a_header_split_across_reads() {
        // A reader that hands out one byte at a time.
        let input: &[u8] = b"zz\r\nxcontent-lengthContent-Length: 2\r\n\r\n[]";
        let reader = io::BufReader::with_capacity(1, input);
        let mut frames = FrameReader::new(reader);
        assert!(matches!(
            frames.next_frame().unwrap(),
            Some(Frame::Skipped(_))
        ));
        assert_eq!(frames.next_frame().unwrap(), Some(body("[]")));
        assert_eq!(frames.next_frame().unwrap(), None);
    }

    #[test]
    fn a_length_at_the_limit_reads_only_the_bytes_sent() {
        // The body is read as it arrives: a length at the limit with a few bytes behind it
        // reads (and holds) those bytes, then reports how far it got.
        let input = format!("Content-Length: {MAX_MESSAGE}\r\n\r\nabc");
        let got = frames(input.as_bytes());
        assert!(is_skipped(&got[0], "ended 3 bytes into"), "{got:?}");
    }

    proptest::proptest! {
        /// Any input, however damaged, is read to its end (no endless resynchronisation), and
        /// the bodies read are made of its bytes.
        #[test]
        fn any_input_is_read_to_its_end(parts in proptest::collection::vec(0usize..9, 0..60)) {
            const PIECES: [&str; 9] = [
                "Content-Length: ", "content-length:", "2", "3", "\r\n", "\n", ":", "x", "{}",
            ];
            let input: String = parts.iter().map(|&i| PIECES[i]).collect();
            let mut reader = FrameReader::new(input.as_bytes());
            let mut read = 0;
            for _ in 0..10 * (input.len() + 1) {
                match reader.next_frame().unwrap() {
                    Some(Frame::Body(b)) => read += b.len(),
                    Some(Frame::Skipped(_)) => {}
                    None => break,
                }
            }
            proptest::prop_assert_eq!(reader.next_frame().unwrap(), None, "{:?}", input);
            proptest::prop_assert!(read <= input.len());
        }
    }

    /// A writer whose bytes the test can read afterwards.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_connection_answers_errors_and_passes_messages_on() {
        let input = [
            msg("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"),
            msg("{not json"),
            "Content-Length: 10000000000000000\r\n\r\n".to_string(),
            msg("{\"jsonrpc\":\"2.0\",\"method\":\"b\"}"),
        ]
        .concat();
        let out = Shared::default();
        let logged = Arc::new(Mutex::new(Vec::new()));
        let lines = logged.clone();
        let (conn, transport) = spawn(io::Cursor::new(input), out.clone(), move |line| {
            lines.lock().unwrap().push(line.to_string())
        });
        let mut methods = Vec::new();
        // Until the end of input closes the channel.
        while let Ok(m) = conn.receiver.recv() {
            match m {
                Message::Request(r) => {
                    methods.push(r.method);
                    let answer = lsp_server::Response::new_ok(r.id, 5);
                    conn.sender.send(answer.into()).unwrap();
                }
                Message::Notification(n) => methods.push(n.method),
                Message::Response(_) => panic!("no responses were sent"),
            }
        }
        assert_eq!(methods, ["a", "b"]);
        drop(conn);
        transport.join().unwrap();
        let written = out.0.lock().unwrap().clone();
        let mut frames = FrameReader::new(&written[..]);
        let mut answers = Vec::new();
        while let Some(Frame::Body(body)) = frames.next_frame().unwrap() {
            answers.push(serde_json::from_slice::<Value>(&body).unwrap());
        }
        answers.sort_by_key(|a| a["id"].to_string());
        assert_eq!(
            answers,
            [
                json!({ "jsonrpc": "2.0", "id": 1, "result": 5 }),
                json!({ "jsonrpc": "2.0", "id": null, "error": {
                    "code": -32700,
                    "message": "the message is not JSON: key must be a string at line 1 column 2",
                } }),
            ]
        );
        let logged = logged.lock().unwrap();
        assert!(
            logged
                .iter()
                .any(|l| l.starts_with("skipped: a message of 10000000000000000 bytes")),
            "{logged:?}"
        );
    }

    fn invalid(body: &str) -> (Value, i32) {
        match decode(body.as_bytes()) {
            Decoded::Invalid { id, code, .. } => (id, code as i32),
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn bodies_that_are_not_messages_get_json_rpc_errors() {
        assert_eq!(invalid("{\"jsonrpc\":"), (Value::Null, -32700));
        assert_eq!(invalid("\u{feff}{}"), (Value::Null, -32700));
        assert_eq!(invalid("[1, 2]"), (Value::Null, -32600));
        assert_eq!(invalid("42"), (Value::Null, -32600));
        assert_eq!(invalid("{\"id\": 7}"), (json!(7), -32600));
        assert_eq!(invalid("{\"id\": 7, \"method\": 3}"), (json!(7), -32600));
        assert_eq!(
            invalid("{\"id\": \"a\", \"method\": \"m\", \"params\": 3}"),
            (json!("a"), -32600)
        );
        assert_eq!(
            invalid("{\"id\": 3000000000, \"method\": \"m\"}"),
            (json!(3000000000u64), -32600)
        );
        assert_eq!(
            invalid("{\"id\": 1.5, \"method\": \"m\"}"),
            (json!(1.5), -32600)
        );
        assert_eq!(
            invalid("{\"id\": null, \"method\": \"m\"}"),
            (Value::Null, -32600)
        );
        assert_eq!(
            invalid("{\"id\": [1], \"method\": \"m\"}"),
            (Value::Null, -32600)
        );
        assert!(matches!(
            decode(b"{\"id\": 1, \"result\": 3, \"error\": 4}"),
            Decoded::Ignored(_)
        ));
        assert!(matches!(
            decode(b"{\"method\": \"m\", \"params\": 3}"),
            Decoded::Ignored(_)
        ));
    }

    #[test]
    fn messages_decode() {
        let ok = |body: &str| match decode(body.as_bytes()) {
            Decoded::Message(m) => m,
            other => panic!("{body}: {other:?}"),
        };
        assert!(matches!(
            ok("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"shutdown\"}"),
            Message::Request(r) if r.method == "shutdown"
        ));
        assert!(matches!(
            ok("{\"jsonrpc\":\"2.0\",\"method\":\"exit\",\"params\":null}"),
            Message::Notification(n) if n.method == "exit"
        ));
        assert!(matches!(
            ok("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":null}"),
            Message::Response(_)
        ));
    }
}

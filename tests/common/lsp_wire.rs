//! The language server's wire as a client sees it: JSON-RPC messages behind `Content-Length`
//! headers. Shared by `tests/lsp.rs` and `benches/lsp.rs` (which include this file by path).
//! Written apart from the server's own reader (`src/cli/lsp/transport.rs`), which forgives bad
//! frames: this one is strict, so a frame the server writes wrong fails the test.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc::{Receiver, channel};

/// `body` behind a correct `Content-Length` header: one frame.
pub fn frame(body: &str) -> String {
    format!("Content-Length: {}\r\n\r\n{body}", body.len())
}

/// The messages framed in `output`, as they arrive: a thread reads each frame and sends its
/// body, parsed as JSON, on. The channel closes when `output` ends or the receiver is dropped;
/// a frame without a `Content-Length` or a body that is not JSON panics that thread, which
/// closes it too.
pub fn messages(output: impl Read + Send + 'static) -> Receiver<Value> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(output);
        loop {
            let mut length = None;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some(v) = line.strip_prefix("Content-Length: ") {
                    length = v.parse::<usize>().ok();
                }
            }
            let mut body = vec![0; length.expect("Content-Length header")];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            let value: Value = serde_json::from_slice(&body).expect("JSON body");
            if tx.send(value).is_err() {
                return;
            }
        }
    });
    rx
}

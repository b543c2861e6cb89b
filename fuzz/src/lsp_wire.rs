//! `rlc lsp`'s wire reader, compiled in from the binary's source so the campaign runs the very
//! code the server runs: a byte stream is cut into frames (`FrameReader`) and each body decoded
//! into a message or the JSON-RPC error it is answered with (`decode`). The stdio threads of the
//! module are not used here.

#[allow(dead_code)]
#[path = "../../src/cli/lsp/transport.rs"]
mod transport;

use std::hash::{Hash, Hasher};

/// Reads `stream` to its end as the server's reader thread does, hashing what each frame was.
pub fn read_all(stream: &[u8], h: &mut impl Hasher) {
    let mut reader = transport::FrameReader::new(stream);
    loop {
        match reader.next_frame() {
            Ok(Some(transport::Frame::Body(body))) => {
                "body".hash(h);
                match transport::decode(&body) {
                    transport::Decoded::Message(_) => "message".hash(h),
                    transport::Decoded::Invalid { code, .. } => (code as i32).hash(h),
                    transport::Decoded::Ignored(_) => "ignored".hash(h),
                }
            }
            Ok(Some(transport::Frame::Skipped(_))) => "skipped".hash(h),
            Ok(None) => break,
            Err(e) => {
                e.kind().hash(h);
                break;
            }
        }
    }
}

/// A session as a client writes it, framed: the seed of the campaign's LSP inputs (`text` is a
/// corpus program, sent as the opened document and then changed).
pub fn session(text: &str) -> String {
    let uri = "file:///fuzz/main.rl";
    let messages = [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {"uri": uri, "languageId": "rl", "version": 1, "text": text}}}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "textDocument/hover", "params": {"textDocument": {"uri": uri}, "position": {"line": 3, "character": 7}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": text}]}}),
        serde_json::json!({"jsonrpc": "2.0", "id": 3, "result": null}),
        serde_json::json!({"jsonrpc": "2.0", "id": 4, "method": "shutdown"}),
        serde_json::json!({"jsonrpc": "2.0", "method": "exit"}),
    ];
    messages
        .iter()
        .map(|m| {
            let body = m.to_string();
            format!("Content-Length: {}\r\n\r\n{body}", body.len())
        })
        .collect()
}

#[cfg(test)]
mod wire_tests {
    use super::*;

    #[test]
    fn a_session_reads_as_its_messages() {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        read_all(session("fn f() -> f32 { 1.0 }").as_bytes(), &mut h);
        let stream = session("x");
        let mut reader = transport::FrameReader::new(stream.as_bytes());
        let mut bodies = 0;
        while let Some(frame) = reader.next_frame().unwrap() {
            assert!(matches!(frame, transport::Frame::Body(_)), "{frame:?}");
            bodies += 1;
        }
        assert_eq!(bodies, 8);
    }
}

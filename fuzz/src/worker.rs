//! The worker: a child process that runs inputs sent by the supervisor, one at a time, and
//! answers with how each went. A panic is caught (`catch_unwind`) and answered; anything that
//! ends the process (the memory limit, a stack overflow, an abort) is seen by the supervisor as
//! the worker's death while that input was in flight.
//!
//! Messages on stdin: kind (u8), path length (u32), text length (u32), path, text. Answers on
//! stdout: status (u8: 0 ran, 1 panicked), peak heap bytes (u64), outcome signature (u64),
//! message length (u32), message.

use crate::alloc;
use crate::target::{self, Kind};
use std::collections::BTreeMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

static PANIC: Mutex<String> = Mutex::new(String::new());

fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

/// The frames of a backtrace that are the compiler's own (`rlc_*` crates, not this harness).
fn frames_summary(bt: &std::backtrace::Backtrace) -> String {
    let text = bt.to_string();
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let l = line.trim();
        if let Some((_, name)) = l.split_once(": ")
            && (name.starts_with("rlc_") && !name.starts_with("rlc_fuzz"))
        {
            let at = lines
                .peek()
                .map(|n| n.trim().trim_start_matches("at ").to_string())
                .unwrap_or_default();
            out.push(format!("  {name}\n    at {at}"));
            if out.len() == 8 {
                break;
            }
        }
    }
    out.join("\n")
}

fn install_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(non-string panic)".into());
        let at = info
            .location()
            .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
            .unwrap_or_default();
        let bt = std::backtrace::Backtrace::force_capture();
        let text = format!("panicked at {at}: {msg}\n{}", frames_summary(&bt));
        *PANIC.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }));
}

/// Runs the worker loop until stdin closes.
pub fn serve(files: BTreeMap<String, String>, memory_cap: usize) -> std::io::Result<()> {
    install_hook();
    let stdin = std::io::stdin();
    let mut input = BufReader::new(stdin.lock());
    let stdout = std::io::stdout();
    let mut output = BufWriter::new(stdout.lock());
    alloc::set_cap(memory_cap);
    loop {
        let mut kind = [0u8; 1];
        if input.read_exact(&mut kind).is_err() {
            return Ok(());
        }
        let kind = Kind::from_u8(kind[0]).unwrap_or(Kind::Program);
        let path_len = read_u32(&mut input)? as usize;
        let text_len = read_u32(&mut input)? as usize;
        let mut path = vec![0; path_len];
        input.read_exact(&mut path)?;
        let mut text = vec![0; text_len];
        input.read_exact(&mut text)?;
        let path = String::from_utf8_lossy(&path).into_owned();
        let text = String::from_utf8(text)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        alloc::reset_peak();
        let result =
            std::panic::catch_unwind(AssertUnwindSafe(|| target::run(kind, &path, &text, &files)));
        drop(text);
        let peak = alloc::peak() as u64;
        let (status, sig, msg) = match result {
            Ok(sig) => (0u8, sig, String::new()),
            Err(_) => (
                1u8,
                0,
                std::mem::take(&mut *PANIC.lock().unwrap_or_else(|e| e.into_inner())),
            ),
        };
        output.write_all(&[status])?;
        output.write_all(&peak.to_le_bytes())?;
        output.write_all(&sig.to_le_bytes())?;
        output.write_all(&(msg.len() as u32).to_le_bytes())?;
        output.write_all(msg.as_bytes())?;
        output.flush()?;
    }
}

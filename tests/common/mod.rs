//! What the `rlc plan` tests share: running the binary from the project's root.

use std::process::{Command, Output};

/// `rlc ARGS…` run in the project's root.
pub fn rlc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

/// Standard output then standard error.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

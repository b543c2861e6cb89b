//! What the CLI tests share: running the binary from the project's root, its output as text,
//! scratch folders.
// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// An empty folder for `name` under the system's temporary folder, unique to this test
/// binary (its crate name) and process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rlc-{}-{}-{name}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `rlc ARGS…` run in the project's root.
pub fn rlc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

/// The standard output of `rlc ARGS…`, which must succeed (else the test fails with all of
/// its output).
pub fn rlc_stdout(args: &[&str]) -> String {
    let out = rlc(args);
    assert!(
        out.status.success(),
        "rlc {}: {}",
        args.join(" "),
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What follows `predicted step: ` in `rlc plan`'s output (`12.34 ms`).
pub fn predicted_step(stdout: &str) -> &str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("predicted step: "))
        .unwrap_or_else(|| panic!("no prediction in {stdout}"))
}

/// The text of a run that must end with exit status `code` and not in a panic (else the test
/// fails with all of its output).
pub fn refused(out: &Output, code: i32) -> String {
    let t = text(out);
    assert_eq!(out.status.code(), Some(code), "{t}");
    assert!(!t.contains("panicked"), "{t}");
    t
}

/// Standard output then standard error.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Each step's line of a run's `metrics.jsonl`, without the fields that time the step (the only
/// ones that may differ between runs of one job).
pub fn metric_records(run: &Path) -> Vec<serde_json::Map<String, serde_json::Value>> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let mut record: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(line).unwrap();
            record.retain(|key, _| {
                !(key == "seconds" || key == "tokens_per_s" || key.starts_with("time/"))
            });
            record
        })
        .collect()
}

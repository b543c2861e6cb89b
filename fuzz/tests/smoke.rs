//! The campaign in small: CI runs a short one (it must find nothing), and the harness must
//! catch and classify each kind of failure.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn fuzz(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rlc-fuzz"))
        .args(args)
        .current_dir(workspace())
        .output()
        .expect("run rlc-fuzz");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_short_campaign_finds_nothing() {
    let findings = Path::new(env!("CARGO_TARGET_TMPDIR")).join("smoke-findings");
    let _ = std::fs::remove_dir_all(&findings);
    let (ok, out) = fuzz(&[
        "--runs",
        "2000",
        "--seed",
        "7",
        "--jobs",
        "2",
        // A limit for an unoptimised build on a busy machine: a safety net, not a measurement.
        "--timeout-ms",
        "30000",
        "--findings",
        findings.to_str().unwrap(),
    ]);
    assert!(ok, "{out}");
    assert!(out.contains("rlc-fuzz: 2000 executions"), "{out}");
    assert!(out.contains(" 0 failing inputs"), "{out}");
}

#[test]
fn each_kind_of_failure_is_caught_and_classified() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("probes");
    std::fs::create_dir_all(&dir).unwrap();
    let mut args = vec![
        "--timeout-ms".to_string(),
        "3000".into(),
        "--memory-mb".into(),
        "256".into(),
        "--replay".into(),
    ];
    for what in ["fine", "panic", "hang", "memory", "stack"] {
        let path = dir.join(format!("{what}.probe"));
        std::fs::write(&path, what).unwrap();
        args.push(path.to_string_lossy().into_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out) = fuzz(&args);
    assert!(!ok, "{out}");
    for (what, class) in [
        ("fine", "ok"),
        ("panic", "panic"),
        ("hang", "timeout"),
        ("memory", "memory"),
        ("stack", "stack-overflow"),
    ] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("{what}.probe: {class}"))),
            "{what} should be {class}:\n{out}"
        );
    }
    assert!(out.contains("probe: a panic"), "{out}");
}

/// The campaign's findings, minimized (`fuzz/regressions/`), each run once as a program: none
/// may fail. `build_huge_cluster.rl`: `rlc build` of a 10 000 000-node cluster (lowering did work
/// per device; it now works per run of alike ranks).
#[test]
fn regressions_run_cleanly() {
    let dir = workspace().join("fuzz/regressions");
    let mut args = vec![
        "--timeout-ms".to_string(),
        "30000".into(),
        "--replay".into(),
    ];
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    args.extend(files.iter().map(|p| p.to_string_lossy().into_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out) = fuzz(&args);
    assert!(ok, "{out}");
}

#[test]
fn an_empty_corpus_is_a_clear_error() {
    let empty = Path::new(env!("CARGO_TARGET_TMPDIR")).join("empty-corpus");
    std::fs::create_dir_all(&empty).unwrap();
    let findings = Path::new(env!("CARGO_TARGET_TMPDIR")).join("empty-corpus-findings");
    let (ok, out) = fuzz(&[
        "--runs",
        "10",
        "--corpus",
        empty.to_str().unwrap(),
        "--findings",
        findings.to_str().unwrap(),
    ]);
    assert!(!ok, "{out}");
    assert!(out.contains("holds 0 programs and 0 plans"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}

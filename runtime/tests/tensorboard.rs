//! The run report's TensorBoard event file, read back by TensorBoard's own reader (the
//! `tensorboard` package from PyPI, through `tensorboard_read.py`): every tag, step and value of
//! `metrics.jsonl`, over a run with a resume, a torn line, a non-finite value and per-op times.
//!
//! TensorBoard comes from `RLC_TENSORBOARD_PYTHONPATH` (`scripts/setup-tensorboard.sh` prints
//! it; CI sets it, and then a TensorBoard that cannot be imported is a failure), else from
//! `.deps/tensorboard` or the Python installation; when none has it the test says so and skips.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use rlc_runtime::report::{EVENTS_FILE, METRICS_FILE, Report, ReportOptions, StepRecord};

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// A Python command that can import TensorBoard, or why there is none (then `required` says
/// whether that fails the test).
fn python() -> Result<Command, (String, bool)> {
    let (pythonpath, required) = match std::env::var_os("RLC_TENSORBOARD_PYTHONPATH") {
        Some(path) => (Some(path), true),
        None => {
            let deps = repo_root().join(".deps/tensorboard");
            (deps.is_dir().then(|| OsString::from(deps)), false)
        }
    };
    let command = || {
        let mut command = Command::new("python3");
        if let Some(path) = &pythonpath {
            command.env("PYTHONPATH", path);
        }
        command
    };
    match command().args(["-c", "import tensorboard"]).output() {
        Ok(out) if out.status.success() => Ok(command()),
        Ok(out) => Err((
            format!(
                "python3 cannot import tensorboard (PYTHONPATH {pythonpath:?}; \
                 scripts/setup-tensorboard.sh installs it): {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ),
            required,
        )),
        Err(error) => Err((format!("no python3: {error}"), required)),
    }
}

fn run_dir() -> PathBuf {
    let dir = std::env::temp_dir()
        .join("rlc-tensorboard-read-back")
        .join(std::process::id().to_string());
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn step(step: u64) -> StepRecord {
    let reward = if step == 3 {
        f64::NAN // written as null
    } else {
        0.1 + step as f64 / 7.0
    };
    StepRecord {
        step,
        metrics: vec![
            ("reward".into(), reward),
            ("kl".into(), step as f64 * 1.3e-4),
            ("time/generate".into(), 0.01 * (step + 1) as f64),
        ],
        tokens: 96 + step,
        seconds: 0.1 + (step % 3) as f64 * 0.017,
    }
}

fn record(dir: &Path, steps: std::ops::Range<u64>, resume: Option<u64>) {
    let options = ReportOptions {
        total_steps: 8,
        progress: false,
        title: "tensorboard".into(),
    };
    let mut report = Report::create(dir, options, resume).unwrap();
    for s in steps {
        report.record(&step(s)).unwrap();
    }
    report.finish().unwrap();
}

#[test]
fn tensorboard_reads_back_every_metric_of_every_step() {
    let python = match python() {
        Ok(python) => python,
        Err((why, true)) => panic!("RLC_TENSORBOARD_PYTHONPATH is set but {why}"),
        Err((why, false)) => {
            eprintln!("tensorboard_reads_back_every_metric_of_every_step: skipped ({why})");
            return;
        }
    };
    // Six steps, a crash in the seventh (torn lines in both files), a resume from step 4.
    let dir = run_dir();
    record(&dir, 0..6, None);
    for (file, torn) in [
        (METRICS_FILE, &br#"{"step":6,"rew"#[..]),
        (EVENTS_FILE, &[9, 0]),
    ] {
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(dir.join(file))
            .unwrap();
        file.write_all(torn).unwrap();
    }
    record(&dir, 4..8, Some(4));
    assert_eq!(
        fs::read_to_string(dir.join(METRICS_FILE))
            .unwrap()
            .lines()
            .count(),
        8
    );

    let mut python = python;
    let out = python
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tensorboard_read.py"))
        .arg(&dir)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("ok: 8 steps, 6 tags"), "{said}");
    fs::remove_dir_all(&dir).unwrap();
}

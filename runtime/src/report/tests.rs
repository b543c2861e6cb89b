//! End-to-end tests of [`Report`] on a temporary run folder.

use std::path::PathBuf;

use serde_json::Value;

use super::*;

/// A fresh folder per test (and per process, so parallel `cargo test` runs do not collide).
fn run_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join("rlc-report-tests")
        .join(format!("{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn options(total_steps: u64) -> ReportOptions {
    ReportOptions {
        total_steps,
        progress: false,
        title: "GRPO digits".into(),
    }
}

/// A noisy rising reward and a small growing KL, like a real run.
fn step(step: u64) -> StepRecord {
    let wiggle = if step.is_multiple_of(2) { 0.05 } else { -0.05 };
    StepRecord {
        step,
        metrics: vec![
            ("reward".into(), step as f64 / 100.0 + wiggle),
            ("kl".into(), step as f64 * 1e-4),
        ],
        tokens: 1024,
        seconds: 0.15 + (step % 3) as f64 * 0.01,
    }
}

fn run(dir: &Path, steps: std::ops::Range<u64>, resume: Option<u64>) -> String {
    let mut report = Report::create(dir, options(steps.end), resume).unwrap();
    for s in steps {
        report.record(&step(s)).unwrap();
    }
    report.finish().unwrap()
}

fn metrics_lines(dir: &Path) -> Vec<String> {
    let text = fs::read_to_string(dir.join(METRICS_FILE)).unwrap();
    text.lines().map(String::from).collect()
}

/// Decodes `curves.png` into (width, height, RGB bytes).
fn decode_curves(dir: &Path) -> (u32, u32, Vec<u8>) {
    let file = File::open(dir.join(CURVES_FILE)).unwrap();
    let mut reader = png::Decoder::new(io::BufReader::new(file))
        .read_info()
        .unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    pixels.truncate(info.buffer_size());
    (info.width, info.height, pixels)
}

#[test]
fn metrics_lines_are_json_objects_with_keys_in_order() {
    let dir = run_dir("keys");
    run(&dir, 0..3, None);
    let lines = metrics_lines(&dir);
    assert_eq!(lines.len(), 3);
    for (index, line) in lines.iter().enumerate() {
        let value: Value = serde_json::from_str(line).unwrap();
        assert_eq!(value["step"], index as u64);
        assert_eq!(
            metrics::keys(line),
            ["step", "reward", "kl", "tokens", "seconds", "tokens_per_s"]
        );
    }
    assert_eq!(
        strip_timing(&lines[1]),
        r#"{"step":1,"reward":-0.04,"kl":0.0001,"tokens":1024}"#
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn resume_keeps_only_earlier_steps_then_continues() {
    let dir = run_dir("resume-truncate");
    run(&dir, 0..8, None);
    let report = Report::create(&dir, options(8), Some(5)).unwrap();
    drop(report);
    let steps: Vec<u64> = metrics_lines(&dir)
        .iter()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(steps, [0, 1, 2, 3, 4]);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn resumed_run_matches_an_uninterrupted_one_apart_from_timing() {
    let whole = run_dir("resume-whole");
    let whole_summary = run(&whole, 0..30, None);

    // Crash after step 20 with a torn line, then resume from a checkpoint at step 15.
    let resumed = run_dir("resume-split");
    run(&resumed, 0..21, None);
    let mut torn = fs::OpenOptions::new()
        .append(true)
        .open(resumed.join(METRICS_FILE))
        .unwrap();
    io::Write::write_all(&mut torn, br#"{"step":21,"rew"#).unwrap();
    let mut torn = fs::OpenOptions::new()
        .append(true)
        .open(resumed.join(EVENTS_FILE))
        .unwrap();
    io::Write::write_all(&mut torn, &[0x1c, 0, 0, 0]).unwrap();
    drop(torn);
    let resumed_summary = run(&resumed, 15..30, Some(15));

    let strip = |dir: &Path| -> Vec<String> {
        metrics_lines(dir).iter().map(|l| strip_timing(l)).collect()
    };
    assert_eq!(strip(&whole), strip(&resumed));
    assert_eq!(decode_curves(&whole), decode_curves(&resumed));
    // The per-step times are equal here, so the event files are too, byte for byte.
    let events = |dir: &Path| fs::read(dir.join(EVENTS_FILE)).unwrap();
    assert_eq!(events(&whole), events(&resumed));
    // Per-step times are equal too, so only the (unused) wall clock could differ.
    assert_eq!(whole_summary, resumed_summary);
    fs::remove_dir_all(&whole).unwrap();
    fs::remove_dir_all(&resumed).unwrap();
}

#[test]
fn fresh_run_empties_an_old_metrics_file() {
    let dir = run_dir("fresh");
    run(&dir, 0..5, None);
    run(&dir, 0..2, None);
    assert_eq!(metrics_lines(&dir).len(), 2);
    let only_two = run_dir("fresh-two");
    run(&only_two, 0..2, None);
    let events = |dir: &Path| fs::read(dir.join(EVENTS_FILE)).unwrap();
    assert_eq!(events(&dir), events(&only_two));
    fs::remove_dir_all(&dir).unwrap();
    fs::remove_dir_all(&only_two).unwrap();
}

#[test]
fn curves_png_has_the_expected_size_and_follows_the_data() {
    let dir = run_dir("png");
    run(&dir, 0..40, None);
    let (width, height, pixels) = decode_curves(&dir);
    assert_eq!((width, height), plot::image_size(2));
    assert!(pixels.iter().any(|&byte| byte != 255), "all white");
    // Same input, same bytes.
    let first_bytes = fs::read(dir.join(CURVES_FILE)).unwrap();
    Report::create(&dir, options(40), Some(40))
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(fs::read(dir.join(CURVES_FILE)).unwrap(), first_bytes);

    // Different data, different picture.
    let mut report = Report::create(&dir, options(40), None).unwrap();
    for s in 0..40 {
        let mut record = step(s);
        record.metrics[0].1 = -record.metrics[0].1;
        report.record(&record).unwrap();
    }
    report.finish().unwrap();
    let (_, _, changed) = decode_curves(&dir);
    assert_ne!(changed, pixels);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn summary_reports_first_and_last_ten_means_and_totals() {
    let dir = run_dir("summary");
    let mut report = Report::create(&dir, options(30), None).unwrap();
    for s in 0..30 {
        report
            .record(&StepRecord {
                step: s,
                metrics: vec![("reward".into(), s as f64)],
                tokens: 500,
                seconds: 0.5,
            })
            .unwrap();
    }
    let text = report.finish().unwrap();
    let expected = "GRPO digits\n\n\
                    metric  first 10  last 10  min  max\n\
                    reward       4.5     24.5    0   29\n\
                    \n\
                    steps 30 | total time 0:15 | 1.0k tok/s\n";
    assert_eq!(text, expected);
    assert_eq!(fs::read_to_string(dir.join(SUMMARY_FILE)).unwrap(), text);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nan_metric_is_written_as_null_and_still_plots() {
    let dir = run_dir("nan");
    let mut report = Report::create(&dir, options(12), None).unwrap();
    for s in 0..12 {
        let mut record = step(s);
        if s == 4 {
            record.metrics[0].1 = f64::NAN;
        }
        // A metric that is never finite.
        record.metrics.push(("loss".into(), f64::INFINITY));
        report.record(&record).unwrap();
    }
    let text = report.finish().unwrap();
    let line: Value = serde_json::from_str(&metrics_lines(&dir)[4]).unwrap();
    assert!(line["reward"].is_null());
    assert!(line["loss"].is_null());
    let (width, height, _) = decode_curves(&dir);
    assert_eq!((width, height), plot::image_size(3));
    let loss_row = text.lines().find(|l| l.starts_with("loss")).unwrap();
    assert_eq!(
        loss_row.split_whitespace().collect::<Vec<_>>(),
        ["loss", "-", "-", "-", "-"]
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zero_or_one_step_does_not_panic() {
    let dir = run_dir("empty");
    let text = run(&dir, 0..0, None);
    assert!(text.contains("steps 0"), "{text}");
    assert_eq!(decode_curves(&dir).0, plot::WIDTH);
    let text = run(&dir, 0..1, None);
    assert!(text.contains("steps 1"), "{text}");
    let (width, height, pixels) = decode_curves(&dir);
    assert_eq!((width, height), plot::image_size(2));
    assert!(pixels.iter().any(|&byte| byte != 255));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_metrics_file_on_resume_starts_one() {
    let dir = run_dir("resume-missing").join("nested");
    let text = run(&dir, 3..5, Some(3));
    assert!(text.contains("steps 2"), "{text}");
    fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

//! Calibration end to end: a few steps of the CPU example run with `rlc run`, `rlc plan
//! --calibrate` fits the cost model to its step time, and the fitted model predicts the step
//! time of a second run of the example and of a variant with a larger policy, which runs then
//! measure. (The other CPU example, `ppo_critic.rl`, moves values between layouts, which the
//! CPU runtime does not run yet.)

#![cfg(feature = "runtime")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rlc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlc-plan-calibrate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `example` for `steps` steps into `dir` and returns the median step time without the
/// first (warm-up) step, as `--calibrate` reads it.
fn measured(example: &str, dir: &Path, steps: u64) -> f64 {
    let out = rlc(&[
        "run",
        example,
        "--out",
        dir.to_str().unwrap(),
        "--stop-after",
        &steps.to_string(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let metrics = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let mut seconds: Vec<f64> = metrics
        .lines()
        .skip(1)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["seconds"].as_f64().unwrap()
        })
        .collect();
    seconds.sort_by(f64::total_cmp);
    let n = seconds.len();
    assert!(n >= 2, "{metrics}");
    if n % 2 == 1 {
        seconds[n / 2]
    } else {
        (seconds[n / 2 - 1] + seconds[n / 2]) / 2.0
    }
}

/// The `predicted step:` line of `rlc plan`, in seconds.
fn predicted(out: &Output) -> f64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("predicted step: "))
        .unwrap_or_else(|| panic!("no prediction in {}", text(out)));
    let mut words = line.split_whitespace();
    let value: f64 = words.next().unwrap().parse().unwrap();
    match words.next().unwrap() {
        "s" => value,
        "ms" => value / 1e3,
        "µs" => value / 1e6,
        "h" => value * 3600.0,
        unit => panic!("unit {unit}"),
    }
}

/// The example with a policy twice as deep and twice as wide, and half the prompts per step:
/// another balance of compute and fixed costs than the run the model is calibrated on.
fn wider_variant(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/grpo_digits.rl"),
    )
    .unwrap();
    let variant = text
        .replace("layers: 2, hidden: 64", "layers: 4, hidden: 128")
        .replace("prompts_per_step = 16", "prompts_per_step = 8");
    assert_ne!(variant, text, "the example changed: update the variant");
    let path = dir.join("wider.rl");
    std::fs::write(&path, variant).unwrap();
    path
}

#[test]
fn calibrated_on_a_cpu_run_the_model_predicts_other_runs_within_25_percent() {
    let dir = scratch();
    let example = "examples/grpo_digits.rl";
    let wider = wider_variant(&dir);
    let wider = wider.to_str().unwrap();
    let steps = 6;
    // The run the model is fitted to, then two it must predict: the same program again (run to
    // run), and the wider variant (another program).
    // The wider run sits between the two of the example, so load that drifts (the machine may
    // be shared) affects both comparisons alike.
    measured(example, &dir.join("fit"), steps);
    let wider_time = measured(wider, &dir.join("wider"), steps);
    let again = measured(example, &dir.join("again"), steps);
    let cost = dir.join("cost.json");
    let metrics = dir.join("fit/metrics.jsonl");
    let out = rlc(&[
        "plan",
        example,
        "--calibrate",
        metrics.to_str().unwrap(),
        "--save-cost",
        cost.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    for (program, measured) in [(example, again), (wider, wider_time)] {
        let out = rlc(&["plan", program, "--cost", cost.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out));
        let predicted = predicted(&out);
        let error = predicted / measured - 1.0;
        println!(
            "{program}: predicted {predicted:.4} s, measured {measured:.4} s ({:+.1} %)",
            error * 100.0
        );
        assert!(
            error.abs() < 0.25,
            "{program}: predicted {predicted} s, measured {measured} s"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

//! `precision = bf16` under `rlc run`: mixed precision on whole models (`dp`) — weights,
//! activations and gradients in bfloat16, the optimizer's master weights and moments in float32.
//! The main job learns in it; a run resumes bit for bit (a checkpoint holds the float32 master
//! weights); what `rlc run` does not do in a lower precision is refused before the run.
#![cfg(feature = "runtime")]

use std::path::{Path, PathBuf};

use common::{metric_records, refused, rlc, scratch, text};

mod common;

/// `examples/NAME` with its policy in `precision` and `edit` applied, written into `dir`.
fn example(dir: &Path, name: &str, precision: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("examples").join(name)).unwrap();
    let init = "  init  = random(seed: 7)\n";
    assert!(
        text.contains(init),
        "{name} no longer says `{}`",
        init.trim()
    );
    let source = edit(&text.replace(init, &format!("{init}  precision = {precision}\n")));
    let path = dir.join(format!("{precision}.rl"));
    std::fs::write(&path, source).unwrap();
    path
}

/// `rlc run SOURCE --out RUN EXTRA…`, which must succeed; the run's metrics lines.
fn run(
    source: &Path,
    run: &Path,
    extra: &[&str],
) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let mut args = vec![
        "run",
        source.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = rlc(&args);
    assert!(out.status.success(), "{}", text(&out));
    metric_records(run)
}

fn field(records: &[serde_json::Map<String, serde_json::Value>], name: &str) -> Vec<f64> {
    records.iter().map(|r| r[name].as_f64().unwrap()).collect()
}

/// The main job in bfloat16 reaches the rolling-10 mean reward of 0.8 that float32 reaches in
/// 38–43 steps (seeds 0–4), within 60.
#[test]
fn the_main_job_learns_in_bfloat16() {
    let dir = scratch("learns");
    let source = example(&dir, "grpo_digits.rl", "bf16", str::to_string);
    let records = run(&source, &dir.join("run"), &["--stop-after", "60"]);
    let reward = field(&records, "reward");
    assert_eq!(reward.len(), 60);
    let first = reward[..10].iter().sum::<f64>() / 10.0;
    assert!(first <= 0.3, "the first ten steps already average {first}");
    let reached = reward
        .windows(10)
        .position(|w| w.iter().sum::<f64>() / 10.0 >= 0.8);
    assert!(
        reached.is_some(),
        "no rolling mean of 0.8 in 60 steps: {reward:?}"
    );
}

/// Stopped after two steps and resumed, a bfloat16 run logs the steps of a run that went
/// straight through and ends with its weights, bit for bit: its checkpoint holds the optimizer's float32 master weights,
/// not the bfloat16 ones the model computes with (those would lose every update below half a
/// bfloat16 ulp). The same job in float32 logs other numbers: the setting changed the run.
#[test]
fn a_bfloat16_run_resumes_bit_exactly_from_float32_master_weights() {
    let dir = scratch("resume");
    let every_step = |text: &str| text.replace("every 100 steps", "every 1 steps");
    let source = example(&dir, "grpo_digits_by_hand.rl", "bf16", every_step);
    let straight = dir.join("straight");
    let straight_records = run(&source, &straight, &["--stop-after", "4"]);
    let resumed = dir.join("resumed");
    run(&source, &resumed, &["--stop-after", "2"]);
    let records = run(&source, &resumed, &["--stop-after", "4", "--resume"]);
    assert_eq!(records, straight_records);
    let weights = |run: &Path| run.join("checkpoints/policy/step-000004/model.safetensors");
    assert!(
        std::fs::read(weights(&resumed)).unwrap() == std::fs::read(weights(&straight)).unwrap(),
        "the resumed run's weights differ after two more steps"
    );

    let dtypes = safetensors_dtypes(&weights(&resumed));
    assert!(
        !dtypes.is_empty() && dtypes.iter().all(|d| d == "F32"),
        "{}: {dtypes:?}",
        weights(&resumed).display()
    );

    let float = example(&dir, "grpo_digits_by_hand.rl", "f32", every_step);
    let float = run(&float, &dir.join("float"), &["--stop-after", "4"]);
    assert_ne!(field(&float, "kl"), field(&straight_records, "kl"));
}

/// The `dtype` of every tensor in a safetensors file's header.
fn safetensors_dtypes(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    header
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .map(|(_, t)| t["dtype"].as_str().unwrap().to_string())
        .collect()
}

/// float16 (which needs loss scaling) and bfloat16 on a sharded layout are refused before the
/// run starts, naming the role and the reason.
#[test]
fn what_rlc_run_does_not_do_in_lower_precision_is_refused() {
    let dir = scratch("refused");
    let half = example(&dir, "grpo_digits.rl", "f16", str::to_string);
    let sharded = example(&dir, "grpo_digits.rl", "bf16", |text| {
        text.replace(
            "place policy.train    on local[0..2] with dp(2)",
            "place policy.train    on local[0..2] with fsdp(2)",
        )
    });
    for (source, says) in [(half, "loss scaling"), (sharded, "whole models")] {
        let out = rlc(&[
            "run",
            source.to_str().unwrap(),
            "--out",
            dir.join("run").to_str().unwrap(),
        ]);
        let said = refused(&out, 1);
        assert!(said.contains("`policy`") && said.contains(says), "{said}");
        assert!(!dir.join("run/metrics.jsonl").exists(), "{said}");
    }
}

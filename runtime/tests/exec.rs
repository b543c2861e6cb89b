//! Plans executed end to end on thread ranks: data parallelism computes what one rank does,
//! a seed fixes the metrics, and a resumed run continues bit-exactly.

mod common;

use std::path::{Path, PathBuf};

use rlc_runtime::device::DeviceRequest;
use rlc_runtime::exec::{self, RunError, RunOptions};
use tch::Tensor;

/// A small GRPO job on the reversal task; `{layout}` and `{steps}` are filled in per test.
const PROGRAM: &str = r#"
import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.models { tiny_gpt }

dataset reverse = task(kind: "reverse_digits", digits: 3)
cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 1, hidden: 32, heads: 2, vocab: 16, max_len: 16)
  init  = random(seed: 3)
  optim = adamw(lr: 1e-2, warmup: 1)
}
model reference: CausalLM = frozen(policy)

place policy    on local[RANKS] with LAYOUT
place reference on local[RANKS] with LAYOUT

fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(f32(resp == target), over: T, mask: mask)
}

pipeline train(steps = STEPS, prompts = 4, group = 4) {
  loop step in 0..steps {
    let rollout  = policy.generate(reverse.sample(prompts), n: group, max_new: 4, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let reward   = exact(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 8) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2) + 0.01 * kl_k3(logp, ref_logp), rollout.mask)
    }
    log { reward: mean(reward), kl: token_mean(kl_k3(old_logp, ref_logp), rollout.mask) }
    every EVERY steps { checkpoint policy }
  }
}
"#;

fn program(ranks: &str, layout: &str, steps: u64, every: u64) -> String {
    PROGRAM
        .replace("RANKS", ranks)
        .replace("LAYOUT", layout)
        .replace("STEPS", &steps.to_string())
        .replace("EVERY", &every.to_string())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlc-exec-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn run(source: &str, dir: &Path, resume: bool, stop_after: Option<u64>) -> Result<(), RunError> {
    run_on(source, dir, resume, stop_after, DeviceRequest::Auto)
}

fn run_on(
    source: &str,
    dir: &Path,
    resume: bool,
    stop_after: Option<u64>,
    device: DeviceRequest,
) -> Result<(), RunError> {
    let checked = common::checked("job.rl", source);
    let plan = rlc_plan::lower::lower(&checked).expect("the test program lowers");
    let options = RunOptions {
        run_dir: dir.to_path_buf(),
        source_dir: PathBuf::from("."),
        seed: 11,
        resume,
        progress: false,
        stop_after,
        threads: Some(2),
        device,
        trace: false,
        verify_in_place: false,
    };
    exec::run(&plan, &options).map(|_| ())
}

/// The policy's weights in the checkpoint of `step`.
fn weights(dir: &Path, step: u64) -> Vec<(String, Tensor)> {
    let ckpt = rlc_runtime::checkpoint::step_dir(&dir.join("checkpoints/policy"), step);
    rlc_runtime::checkpoint::load(&ckpt)
        .expect("checkpoint")
        .weights
}

/// metrics.jsonl without its timing fields.
fn metrics(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .expect("metrics")
        .lines()
        .map(rlc_runtime::report::strip_timing)
        .collect()
}

fn max_difference(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|((na, ta), (nb, tb))| {
            assert_eq!(na, nb);
            (ta - tb).abs().max().double_value(&[])
        })
        .fold(0.0, f64::max)
}

#[test]
fn two_data_ranks_train_as_one_rank_does() {
    let (one, two) = (scratch("dp1"), scratch("dp2"));
    // One rank accumulates two micro-batches of 4 where two ranks take one each.
    run(&program("0..1", "dp(1), micro(4)", 3, 3), &one, false, None).unwrap();
    run(&program("0..2", "dp(2)", 3, 3), &two, false, None).unwrap();
    assert_eq!(metrics(&one).len(), 3);
    let (w1, w2) = (weights(&one, 3), weights(&two, 3));
    let diff = max_difference(&w1, &w2);
    assert!(diff < 1e-5, "dp(2) differs from dp(1) by {diff}");
    // The metrics agree too (rewards are exact fractions; KL within float noise).
    for (a, b) in metrics(&one).iter().zip(metrics(&two)) {
        let (a, b): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(a).unwrap(),
            serde_json::from_str(&b).unwrap(),
        );
        assert_eq!(a["reward"], b["reward"]);
        let (ka, kb) = (a["kl"].as_f64().unwrap(), b["kl"].as_f64().unwrap());
        assert!((ka - kb).abs() < 1e-5, "kl {ka} vs {kb}");
    }
}

#[test]
fn training_moves_the_weights_and_a_seed_fixes_the_metrics() {
    let (a, b) = (scratch("seed-a"), scratch("seed-b"));
    let source = program("0..2", "dp(2)", 4, 2);
    run(&source, &a, false, None).unwrap();
    run(&source, &b, false, None).unwrap();
    assert_eq!(metrics(&a), metrics(&b));
    let moved = max_difference(&weights(&a, 2), &weights(&a, 4));
    assert!(moved > 1e-4, "the policy did not train ({moved})");
}

/// `--device cuda`: on CUDA devices where libtorch sees them (the policy trains and its
/// weights stay finite); without CUDA, the CPU run, byte for byte.
#[test]
fn cuda_requested_runs_on_cuda_or_falls_back_to_the_cpu() {
    let (cpu, cuda) = (scratch("dev-cpu"), scratch("dev-cuda"));
    let source = program("0..2", "dp(2)", 2, 2);
    run_on(&source, &cpu, false, None, DeviceRequest::Cpu).unwrap();
    run_on(&source, &cuda, false, None, DeviceRequest::Cuda).unwrap();
    match rlc_runtime::device::cuda_devices() {
        Err(_) => assert_eq!(metrics(&cpu), metrics(&cuda)),
        Ok(_) => {
            // The first rollout samples from the same weights with the same random numbers.
            let first = |dir: &Path| -> serde_json::Value {
                serde_json::from_str(&metrics(dir)[0]).unwrap()
            };
            assert_eq!(first(&cpu)["reward"], first(&cuda)["reward"]);
            let diff = max_difference(&weights(&cpu, 2), &weights(&cuda, 2));
            assert!(diff < 1e-3, "CUDA and CPU weights differ by {diff}");
        }
    }
}

#[test]
fn a_resumed_run_continues_bit_exactly() {
    let (whole, cut) = (scratch("whole"), scratch("cut"));
    let source = program("0..2", "dp(2)", 6, 2);
    run(&source, &whole, false, None).unwrap();
    // Killed after step 5 (index 4): the newest checkpoint is step 4; step 5 runs again.
    run(&source, &cut, false, Some(5)).unwrap();
    assert_eq!(metrics(&cut).len(), 5);
    run(&source, &cut, true, None).unwrap();
    assert_eq!(metrics(&cut), metrics(&whole));
    for ((name, a), (_, b)) in weights(&whole, 6).iter().zip(weights(&cut, 6)) {
        assert!(a.equal(&b), "{name} differs after resuming");
    }
}

#[test]
fn a_corrupt_checkpoint_is_refused() {
    let dir = scratch("corrupt");
    let source = program("0..1", "dp(1)", 2, 2);
    run(&source, &dir, false, None).unwrap();
    let file = rlc_runtime::checkpoint::step_dir(&dir.join("checkpoints/policy"), 2)
        .join("model.safetensors");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xFF;
    std::fs::write(&file, bytes).unwrap();
    // The only checkpoint is damaged: nothing to fall back to, so the resume is refused.
    let err = run(&source, &dir, true, None).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, RunError::Resume(_))
            && message.contains("step 2 is damaged")
            && message.contains("model.safetensors has SHA-256"),
        "{message}"
    );
}

#[test]
fn every_std_task_samples_and_scores() {
    for kind in ["reverse_digits", "add_numbers", "sort_digits"] {
        let dir = scratch(kind);
        let source = program("0..2", "dp(2)", 2, 2)
            .replace(
                r#"task(kind: "reverse_digits", digits: 3)"#,
                &format!(r#"task(kind: "{kind}", digits: 2)"#),
            )
            .replace(
                "exact(rollout.response, rollout.target, rollout.mask)",
                "reverse.score(rollout)",
            );
        run(&source, &dir, false, None).unwrap_or_else(|e| panic!("{kind}: {e}"));
        for line in metrics(&dir) {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            let reward = v["reward"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&reward), "{kind}: reward {reward}");
        }
    }
}

/// The metrics of a run by step, as numbers.
fn numbers(dir: &Path) -> Vec<Vec<(String, f64)>> {
    metrics(dir)
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v.as_object()
                .unwrap()
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                .collect()
        })
        .collect()
}

/// The largest difference of any metric of any step between two runs, step by step.
fn metric_diffs(a: &Path, b: &Path) -> Vec<f64> {
    let (a, b) = (numbers(a), numbers(b));
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter()
                .zip(y)
                .map(|((kx, vx), (ky, vy))| {
                    assert_eq!(kx, ky);
                    (vx - vy).abs()
                })
                .fold(0.0, f64::max)
        })
        .collect()
}

/// dp(2) × tp(2) on four ranks trains as one rank accumulating two micro-batches does.
#[test]
fn data_and_tensor_parallel_ranks_train_as_one_rank_does() {
    let (one, four) = (scratch("tp-dp1"), scratch("tp-dp2tp2"));
    run(&program("0..1", "dp(1), micro(4)", 3, 3), &one, false, None).unwrap();
    let source = program("0..4", "dp(2), tp(2)", 3, 3).replace("devices: 2", "devices: 4");
    run(&source, &four, false, None).unwrap();
    let diff = max_difference(&weights(&one, 3), &weights(&four, 3));
    let metrics = metric_diffs(&one, &four);
    eprintln!("dp(2), tp(2): weights within {diff:e}, metrics by step {metrics:?}");
    assert!(diff < 1e-4, "dp(2), tp(2) differs from dp(1) by {diff}");
    assert!(
        metrics[0] < 1e-4,
        "first step's metrics differ by {}",
        metrics[0]
    );
    assert!(metrics.iter().all(|d| *d < 1e-3), "{metrics:?}");
}

/// Runs `layout` on two ranks for 4 steps whole, and stopped after 3 and resumed: the same
/// metrics and weights, bit for bit. Returns the whole run's folder.
fn assert_resumes_bit_exactly(layout: &str, name: &str) -> PathBuf {
    let (whole, cut) = (
        scratch(&format!("{name}-whole")),
        scratch(&format!("{name}-cut")),
    );
    let source = program("0..2", layout, 4, 2);
    run(&source, &whole, false, None).unwrap();
    run(&source, &cut, false, Some(3)).unwrap();
    run(&source, &cut, true, None).unwrap();
    assert_eq!(metrics(&cut), metrics(&whole));
    for ((name, a), (_, b)) in weights(&whole, 4).iter().zip(weights(&cut, 4)) {
        assert!(a.equal(&b), "{name} differs after resuming");
    }
    whole
}

/// A tensor-parallel checkpoint holds the full weights and moments; resuming re-shards them.
#[test]
fn a_tensor_parallel_run_resumes_bit_exactly() {
    let whole = assert_resumes_bit_exactly("tp(2)", "tp");
    // The checkpoint is the whole model, as under dp.
    let one = scratch("tp-one");
    run(&program("0..1", "dp(1)", 2, 2), &one, false, None).unwrap();
    let (w1, w2) = (weights(&one, 2), weights(&whole, 2));
    assert_eq!(
        w1.iter().map(|(n, t)| (n, t.size())).collect::<Vec<_>>(),
        w2.iter().map(|(n, t)| (n, t.size())).collect::<Vec<_>>()
    );
}

/// PPO with a critic (ValueModel), a frozen reward model and a reference, every role under
/// tp(2), computes what one device does.
#[test]
fn every_role_kind_runs_tensor_parallel() {
    let example = include_str!("../../examples/ppo_critic.rl").replace("steps = 200", "steps = 3");
    let places = "place policy.train    on local[0..2] with dp(2)
place policy.generate on local[0..2] with dp(2)
place reference       on local[0..1] with dp(1)
place scorer          on local[1..2] with dp(1)
place critic.train    on local[0..2] with dp(2)
place critic.values   on local[0..2] with dp(2)";
    assert!(example.contains(places));
    let one = example.replace("devices: 2", "devices: 1").replace(
        places,
        &places
            .replace("local[0..2] with dp(2)", "local[0..1] with dp(1)")
            .replace("local[1..2]", "local[0..1]"),
    );
    let tp = example.replace(
        places,
        &places
            .replace("dp(2)", "tp(2)")
            .replace("local[0..1] with dp(1)", "local[0..2] with tp(2)")
            .replace("local[1..2] with dp(1)", "local[0..2] with tp(2)"),
    );
    let (a, b) = (scratch("ppo-one"), scratch("ppo-tp"));
    run(&one, &a, false, None).unwrap();
    run(&tp, &b, false, None).unwrap();
    let diffs = metric_diffs(&a, &b);
    eprintln!("PPO under tp(2): metrics by step within {diffs:?} of one device");
    assert!(diffs[0] < 1e-4, "{diffs:?}");
    assert!(diffs.iter().all(|d| *d < 1e-3), "{diffs:?}");
}

/// An FSDP checkpoint holds the full weights and moments (gathered from the flat shards);
/// resuming shards them again, bit-exactly.
#[test]
fn a_sharded_run_resumes_bit_exactly() {
    assert_resumes_bit_exactly("fsdp(2)", "fsdp");
}

/// FSDP shards LM-head models: a critic placed with fsdp is refused with a reason.
#[test]
fn a_sharded_critic_is_refused() {
    let example = include_str!("../../examples/ppo_critic.rl")
        .replace("steps = 200", "steps = 1")
        .replace(
            "place critic.train    on local[0..2] with dp(2)\nplace critic.values   on local[0..2] with dp(2)",
            "place critic.train    on local[0..2] with fsdp(2)\nplace critic.values   on local[0..2] with fsdp(2)",
        );
    assert!(example.contains("critic.values   on local[0..2] with fsdp(2)"));
    let error = run(&example, &scratch("fsdp-critic"), false, None).unwrap_err();
    assert!(
        matches!(&error, RunError::Unsupported(m) if m.contains("LM head")),
        "{error}"
    );
}

//! A step with a slow verifier, overlapped with the forward passes that do not read the reward
//! vs scored in place (#24 item 6, `docs/verifiers.md#overlap`): GRPO with a KL term on one CPU
//! rank, a verifier that answers each request after 50 ms (one request per step), the policy's
//! and the reference's forward passes over the 64-row rollout. Both runs in one process, same
//! seed; it reports the median step time of each over 3 rounds of both (the first step of a run,
//! which starts the worker, left out; one libtorch thread) and checks that their rewards are the same.
//!
//! `cargo bench -p rlc-runtime --bench verify_overlap` (`cargo test --benches` runs 2 steps each).

#[path = "../tests/common/mod.rs"]
mod checking;
mod common;

use std::path::{Path, PathBuf};

use rlc_runtime::device::DeviceRequest;
use rlc_runtime::exec::{self, RunOptions};

/// Answers each request after 50 ms; the reward is the response's length.
const SLOW: &str = r#"
import json, sys, time
for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    time.sleep(0.05)
    results = [{"reward": float(len(item["response"]))} for item in request["items"]]
    sys.stdout.write(json.dumps({"id": request["id"], "results": results}) + "\n")
    sys.stdout.flush()
"#;

fn program(steps: u64) -> String {
    format!(
        r#"
import std.algo {{ grpo_advantage, kl_k3, ppo_clip, token_mean }}
import std.models {{ tiny_gpt }}
import std.task.digits {{ reverse_task }}

dataset reverse = reverse_task(digits: 4)

verifier slow = program("python3", "slow.py", workers: 1, batch: 64, timeout: 20s)

cluster local = cpu(devices: 1)

model policy: CausalLM {{
  arch  = tiny_gpt(layers: 4, hidden: 256, heads: 4, vocab: 16, max_len: 16)
  init  = random(seed: 7)
  optim = adamw(lr: 1e-4)
}}
model reference: CausalLM = frozen(policy)

place policy    on local[0..1] with dp(1)
place reference on local[0..1] with dp(1)

pipeline train(steps = {steps}, prompts_per_step = 16, group = 4) {{
  loop step in 0..steps {{
    let rollout  = policy.generate(reverse.sample(prompts_per_step), n: group, max_new: 4)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let kl       = token_mean(kl_k3(old_logp, ref_logp), rollout.mask)
    let reward   = slow(rollout)
    let adv      = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1) {{ logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2) + 0.05 * kl_k3(logp, ref_logp), rollout.mask)
    }}
    log {{ reward: mean(reward), kl: kl }}
  }}
}}
"#
    )
}

/// Each step's (seconds, reward).
fn run(dir: &Path, steps: u64, in_place: bool) -> Vec<(f64, f64)> {
    let checked = checking::checked("job.rl", &program(steps));
    let plan = rlc_plan::lower::lower(&checked).expect("the bench program lowers");
    let run_dir = dir.join(if in_place { "in-place" } else { "overlapped" });
    let _ = std::fs::remove_dir_all(&run_dir);
    let options = RunOptions {
        run_dir: run_dir.clone(),
        source_dir: dir.to_path_buf(),
        seed: 3,
        resume: false,
        progress: false,
        stop_after: None,
        threads: Some(1),
        device: DeviceRequest::Cpu,
        trace: false,
        verify_in_place: in_place,
    };
    exec::run(&plan, &options).expect("the bench runs");
    std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .expect("metrics")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a metrics line");
            (
                v["seconds"].as_f64().unwrap(),
                v["reward"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let steps = if common::benchmarking() { 11 } else { 2 };
    let dir: PathBuf =
        std::env::temp_dir().join(format!("rlc-bench-verify-overlap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    std::fs::write(dir.join("slow.py"), SLOW).expect("the verifier");
    // Rounds of both, one after the other, so a busy machine slows both alike.
    let rounds = if common::benchmarking() { 3 } else { 1 };
    let (mut overlapped, mut in_place) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let a = run(&dir, steps, false);
        let b = run(&dir, steps, true);
        let rewards = |r: &[(f64, f64)]| r.iter().map(|s| s.1).collect::<Vec<_>>();
        assert_eq!(rewards(&a), rewards(&b), "the same rewards");
        overlapped.extend(a[1..].iter().map(|s| s.0));
        in_place.extend(b[1..].iter().map(|s| s.0));
    }
    let (a, b) = (median(overlapped), median(in_place));
    println!(
        "step with a 50 ms verifier ({rounds} x {} steps each, median over all but each run's \
         first): overlapped {:.1} ms, in place {:.1} ms ({:.1} ms saved)",
        steps - 1,
        a * 1e3,
        b * 1e3,
        (b - a) * 1e3
    );
    let _ = std::fs::remove_dir_all(&dir);
}

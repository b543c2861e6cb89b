//! Multi-turn environments in a run (#24 item 4): `generate(…, env: e, max_turns, max_obs)`
//! plays episodes against the environment's worker pool on each data rank; the advantage reads
//! `rollout.env_reward`, the loss `rollout.mask`. `on_error: zero` counts failed episodes in
//! `environment/<name>/failures`, `on_error: fail` stops the run naming the environment, the
//! sample and the turn; the sampler's log-probs (`from_sampling`) equal a forward pass's over
//! the layout with its holes. Two steps of a tiny policy, so each test runs in a few seconds.

mod common;

use std::path::{Path, PathBuf};

use rlc_plan::model::OpKind;
use rlc_runtime::exec::{self, RunError};

/// An environment that appends each item to `items.jsonl` in its folder: reward 1 and done when
/// the turn's text is the answer, else the observation `=` and the answer's first digit (in
/// `long` mode, episode 1 gets a 5-token observation at turn 0).
const ENV: &str = r#"
import json, os, sys
sys.path.insert(0, sys.argv[1])
import rlc_env
HERE = os.path.dirname(os.path.abspath(__file__))
LONG = "long" in sys.argv[2:]
def step(item):
    with open(os.path.join(HERE, "items.jsonl"), "a") as f:
        f.write(json.dumps(item) + "\n")
    answer = item["fields"]["answer"]
    if item["response"] == answer:
        return {"reward": 1.0, "done": True}
    if LONG and item["episode"] == 1 and item["turn"] == 0:
        return {"observation": "=1234", "reward": 0.5}
    return {"observation": "=" + answer[0], "reward": 0.25}
rlc_env.serve(step)
"#;

fn program(on_error: &str, extra: &str) -> String {
    program_in(on_error, extra, "dp(2)")
}

fn program_in(on_error: &str, extra: &str, layout: &str) -> String {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python");
    format!(
        r#"
import std.algo {{ grpo_advantage, ppo_clip, token_mean }}
import std.models {{ tiny_gpt }}
import std.task.digits {{ reverse_task }}

dataset reverse = reverse_task(digits: 3)

environment hints = program("python3", "env.py", "{python}"{extra},
                            workers: 2, batch: 4, timeout: 20s, on_error: {on_error},
                            fields: ["answer"])

cluster local = cpu(devices: 2)

model policy: CausalLM {{
  arch  = tiny_gpt(layers: 1, hidden: 16, heads: 2, vocab: 16, max_len: 32)
  init  = random(seed: 7)
  optim = adamw(lr: 1e-3)
}}

place policy on local[0..2] with {layout}

pipeline train(steps = 2, prompts_per_step = 4, group = 2) {{
  loop step in 0..steps {{
    let rollout = policy.generate(reverse.sample(prompts_per_step), n: group, max_new: 4,
                                  temperature: 1.0, env: hints, max_turns: 3, max_obs: 3)
    let old_logp = policy.logprobs(rollout)
    let adv = grpo_advantage(rollout.env_reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1) {{ logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask)
    }}
    log {{ reward: mean(rollout.env_reward), turns: mean(f32(rollout.turns)),
          old: token_mean(old_logp, rollout.mask) }}
  }}
}}
"#,
        python = python.to_string_lossy()
    )
}

/// A fresh folder holding `env.py`.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlc-env-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("env.py"), ENV).unwrap();
    dir
}

fn run(source: &str, dir: &Path, forward_logprobs: bool) -> Result<(), RunError> {
    let checked = common::checked("job.rl", source);
    let mut plan = rlc_plan::lower::lower(&checked).expect("the test program lowers");
    if forward_logprobs {
        rlc_plan::lower::forward_logprobs(&mut plan);
    }
    let from_sampling = plan.ops.iter().any(|op| {
        matches!(
            op.kind,
            OpKind::Logprobs {
                from_sampling: Some(_),
                ..
            }
        )
    });
    assert_eq!(from_sampling, !forward_logprobs, "the plan's log-probs op");
    let options = common::run_options(dir);
    exec::run(&plan, &options).map(|_| ())
}

#[test]
fn episodes_run_on_both_data_ranks_and_their_rewards_reach_the_metrics() {
    let dir = scratch("hints");
    run(&program("fail", ""), &dir, false).unwrap();
    let items = common::json_lines(&dir.join("items.jsonl"));
    // Every episode of the 2 steps × 4 prompts × 2 samples plays turn 0.
    let first_turns = items.iter().filter(|i| i["turn"] == 0).count();
    assert_eq!(first_turns, 16);
    for item in &items {
        let turn = item["turn"].as_u64().unwrap();
        assert!(turn < 3);
        let history = item["history"].as_array().unwrap();
        assert_eq!(history.len() as u64, turn, "the episode so far");
        for h in history {
            // The observation `=d`, in the task alphabet's ids (`=` is 11).
            assert_eq!(h["observation_ids"][0], 11);
            assert_eq!(h["observation"].as_str().unwrap().len(), 2);
        }
        assert!(!item["response_ids"].as_array().unwrap().is_empty());
    }
    let metrics = common::json_lines(&dir.join("run/metrics.jsonl"));
    assert_eq!(metrics.len(), 2);
    for m in &metrics {
        let turns = m["turns"].as_f64().unwrap();
        assert!((1.0..=3.0).contains(&turns), "{m}");
        assert!(m["reward"].as_f64().unwrap() >= 0.25, "{m}");
        assert_eq!(m["environment/hints/failures"], 0.0, "{m}");
    }
}

/// `from_sampling`: the sampler's log-probs stand in for `policy.logprobs(rollout)`; a forward
/// pass over the rollout (holes unattended, positions from the mask) gives the same at the
/// policy's tokens, so the logged mean and the first update agree with the plan that runs it.
#[test]
fn the_samplers_log_probs_equal_the_forward_pass_over_the_layout() {
    let sampled = scratch("sampled");
    run(&program("fail", ""), &sampled, false).unwrap();
    let forward = scratch("forward");
    run(&program("fail", ""), &forward, true).unwrap();
    let a = common::json_lines(&sampled.join("run/metrics.jsonl"));
    let b = common::json_lines(&forward.join("run/metrics.jsonl"));
    for (a, b) in a.iter().zip(&b) {
        let (x, y) = (a["old"].as_f64().unwrap(), b["old"].as_f64().unwrap());
        assert!((x - y).abs() <= 1e-5, "sampled {x} vs forward {y}");
        assert_eq!(a["turns"], b["turns"], "the same episodes");
    }
}

#[test]
fn a_long_observation_fails_the_run_or_ends_its_episode_with_zero() {
    let dir = scratch("long-zero");
    run(&program("zero", r#", "long""#), &dir, false).unwrap();
    let metrics = common::json_lines(&dir.join("run/metrics.jsonl"));
    // Episode 1 of each step (on data rank 0) gets 5 tokens where 3 fit.
    for m in &metrics {
        assert_eq!(m["environment/hints/failures"], 1.0, "{m}");
    }
    let dir = scratch("long-fail");
    let e = run(&program("fail", r#", "long""#), &dir, false).unwrap_err();
    let message = e.to_string();
    assert!(
        matches!(
            &e,
            RunError::Environment { environment, step: 0, sample: 1, turn: 0, .. }
                if environment == "hints"
        ),
        "{message}"
    );
    assert!(message.contains("more than max_obs 3"), "{message}");
}

/// The ranks of a tensor-parallel group decode together: a multi-turn generate there is refused
/// before the run starts, naming the op and the environment.
#[test]
fn a_multi_turn_generate_under_tensor_parallelism_is_refused_up_front() {
    let dir = scratch("tp");
    let e = run(&program_in("fail", "", "tp(2)"), &dir, false).unwrap_err();
    let message = e.to_string();
    assert!(matches!(e, RunError::Unsupported(_)), "{message}");
    assert!(message.contains("environment `hints`"), "{message}");
    assert!(message.contains("tp 2"), "{message}");
    assert!(
        !dir.join("items.jsonl").exists(),
        "no episode was played: {message}"
    );
}

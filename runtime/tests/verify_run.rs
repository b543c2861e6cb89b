//! Verifiers in a run (#24): a `verifier` declaration called in a pipeline scores each rollout
//! row through its worker pool. The items carry the decoded prompt and response and the row's
//! fields (a digit task's `answer`, a JSONL dataset's kept fields); `on_error: zero` counts
//! failures in `verifier/<name>/failures`, `on_error: fail` stops the run naming the verifier.
//! Two steps of the main example's small policy, so each test runs in a few seconds.

mod common;

use std::path::{Path, PathBuf};

use rlc_runtime::exec::{self, RunError, RunOptions};

/// A verifier script that appends each item to `items.jsonl` in its folder and rewards exact
/// answers; the response `crash` makes it exit, when `crash` is in its arguments.
const DUMP: &str = r#"
import json, os, sys
sys.path.insert(0, sys.argv[1])
import rlc_verifier
HERE = os.path.dirname(os.path.abspath(__file__))
CRASH = "crash" in sys.argv[2:]
SLOW = "slow" in sys.argv[2:]
def score(item):
    if CRASH:
        sys.exit(5)
    if SLOW:
        import time
        time.sleep(0.1)
    with open(os.path.join(HERE, "items.jsonl"), "a") as f:
        f.write(json.dumps(item) + "\n")
    right = item["response"] == item["fields"]["answer"]
    return {"reward": 1.0 if right else 0.0, "metrics": {"length": float(len(item["response"]))}}
rlc_verifier.serve(score)
"#;

fn program(dataset: &str, on_error: &str, extra: &str, ranks: u32) -> String {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python");
    format!(
        r#"
import std.algo {{ grpo_advantage, ppo_clip, token_mean }}
import std.models {{ tiny_gpt }}
import std.task.digits {{ reverse_task }}

{dataset}

verifier check = program("python3", "dump.py", "{python}"{extra},
                         workers: 2, batch: 4, timeout: 20s, on_error: {on_error},
                         fields: ["answer"], metrics: ["length"])

cluster local = cpu(devices: {ranks})

model policy: CausalLM {{
  arch  = tiny_gpt(layers: 1, hidden: 16, heads: 2, vocab: 16, max_len: 16)
  init  = random(seed: 7)
  optim = adamw(lr: 1e-3)
}}

place policy.train    on local[0..{ranks}] with dp({ranks})
place policy.generate on local[0..{ranks}] with dp({ranks})

pipeline train(steps = 2, prompts_per_step = 4, group = 2) {{
  loop step in 0..steps {{
    let prompts = reverse.sample(prompts_per_step)
    let rollout = policy.generate(prompts, n: group, max_new: 4, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let v = check(rollout)
    let adv = grpo_advantage(v.reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1) {{ logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask)
    }}
    log {{ reward: mean(v.reward), length: mean(v.length) }}
  }}
}}
"#,
        python = python.to_string_lossy()
    )
}

/// A fresh folder holding `dump.py`.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlc-verify-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("dump.py"), DUMP).unwrap();
    dir
}

fn run(source: &str, dir: &Path) -> Result<(), RunError> {
    run_with(source, dir, false, false)
}

fn run_with(source: &str, dir: &Path, in_place: bool, trace: bool) -> Result<(), RunError> {
    let checked = common::checked("job.rl", source);
    let plan = rlc_plan::lower::lower(&checked).expect("the test program lowers");
    // The verifier's `dump.py` and the JSONL file are relative to the root file's folder.
    let options = RunOptions {
        trace,
        verify_in_place: in_place,
        ..common::run_options(dir)
    };
    exec::run(&plan, &options).map(|_| ())
}

#[test]
fn a_verifier_scores_every_row_of_a_digit_task_with_its_answer() {
    let dir = scratch("digits");
    let source = program("dataset reverse = reverse_task(digits: 3)", "fail", "", 2);
    run(&source, &dir).unwrap();
    let items = common::json_lines(&dir.join("items.jsonl"));
    // 2 steps × 4 prompts × 2 samples, over two data ranks.
    assert_eq!(items.len(), 16);
    for item in &items {
        let prompt = item["prompt"].as_str().unwrap();
        // The prompt's text without BOS; the answer is its digits reversed.
        assert_eq!(prompt.len(), 4, "{prompt}");
        let digits: String = prompt[..3].chars().rev().collect();
        assert_eq!(item["fields"]["answer"], digits.as_str());
        assert_eq!(
            item["prompt_ids"].as_array().unwrap().len(),
            5,
            "BOS, 3 digits, ="
        );
        let ids = item["response_ids"].as_array().unwrap();
        assert!(!ids.is_empty() && ids.len() <= 4);
    }
    let metrics = common::json_lines(&dir.join("run/metrics.jsonl"));
    assert_eq!(metrics.len(), 2);
    for m in &metrics {
        assert_eq!(m["verifier/check/failures"], 0.0);
        assert!(
            m["length"].as_f64().unwrap() > 0.0,
            "the metric reaches `log`"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn on_error_zero_counts_failed_samples_and_fail_stops_the_run() {
    let dir = scratch("crash");
    let crash = ", \"crash\"";
    let source = program(
        "dataset reverse = reverse_task(digits: 3)",
        "zero",
        crash,
        1,
    );
    run(&source, &dir).unwrap();
    for m in common::json_lines(&dir.join("run/metrics.jsonl")) {
        assert_eq!(m["verifier/check/failures"], 8.0, "every row of the step");
        assert_eq!(m["reward"], 0.0);
    }
    let source = program(
        "dataset reverse = reverse_task(digits: 3)",
        "fail",
        crash,
        1,
    );
    let e = run(&source, &dir).unwrap_err();
    assert!(
        matches!(
            &e,
            RunError::Verifier {
                step: 0,
                sample: 0,
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("verifier `check` failed on sample 0 at step 0")
            && text.contains("exited with status 5"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_jsonl_dataset_sends_the_fields_it_keeps() {
    let dir = scratch("jsonl");
    let rows: String = (0..6)
        .map(|i| format!("{{\"prompt\": \"{i}{i}1=\", \"answer\": \"1{i}{i}\", \"id\": {i}}}\n"))
        .collect();
    std::fs::write(dir.join("rows.jsonl"), rows).unwrap();
    let dataset = "dataset reverse = jsonl(\"rows.jsonl\", field: \"prompt\", keep: [\"answer\"])";
    let source = program(dataset, "fail", "", 1);
    run(&source, &dir).unwrap();
    let items = common::json_lines(&dir.join("items.jsonl"));
    assert_eq!(items.len(), 16);
    for item in &items {
        let prompt = item["prompt"].as_str().unwrap();
        let answer: String = prompt[..3].chars().rev().collect();
        assert_eq!(
            item["fields"]["answer"],
            answer.as_str(),
            "the row's own answer"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// With a verifier that takes 0.1 s per item, the policy's forward pass over the rollout (which
/// does not read the reward) runs while the pool scores: in the trace its span starts after the
/// verify op's and before the verify op's last result came back. Scoring in place
/// (`verify_in_place`) puts it after; both give the same rewards and metrics.
#[test]
fn an_independent_forward_pass_runs_while_the_verifier_scores() {
    let dir = scratch("overlap");
    let source = program(
        "dataset reverse = reverse_task(digits: 3)",
        "fail",
        ", \"slow\"",
        1,
    );
    let spans = |dir: &Path| {
        let spans = rlc_runtime::report::trace::read(&dir.join("run/trace.json")).unwrap();
        let find = |step: u64, label: &str| {
            spans
                .iter()
                .find(|s| s.step == step && s.label.contains(label))
                .unwrap_or_else(|| panic!("no `{label}` in step {step}: {spans:?}"))
                .clone()
        };
        (0..2)
            .map(|step| (find(step, "check"), find(step, "policy.logprobs")))
            .collect::<Vec<_>>()
    };
    run_with(&source, &dir, false, true).unwrap();
    let overlapped = common::json_lines(&dir.join("run/metrics.jsonl"));
    for (verify, logprobs) in spans(&dir) {
        let verify_end = verify.start_us + verify.duration_us;
        assert!(
            verify.start_us <= logprobs.start_us && logprobs.start_us < verify_end,
            "the forward pass starts while the verifier scores: {verify:?} {logprobs:?}"
        );
    }
    let _ = std::fs::remove_dir_all(dir.join("run"));
    run_with(&source, &dir, true, true).unwrap();
    let in_place = common::json_lines(&dir.join("run/metrics.jsonl"));
    for (verify, logprobs) in spans(&dir) {
        assert!(
            logprobs.start_us >= verify.start_us + verify.duration_us,
            "in place, the forward pass waits: {verify:?} {logprobs:?}"
        );
    }
    assert_eq!(overlapped.len(), 2);
    // Every metric but the clocks: the rewards, the verifier's metric and failures, the tokens.
    let measured = |m: &serde_json::Value| -> Vec<(String, serde_json::Value)> {
        m.as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| {
                !k.starts_with("time/") && !["seconds", "tokens_per_s"].contains(&k.as_str())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    for (a, b) in overlapped.iter().zip(&in_place) {
        assert!(measured(a).iter().any(|(k, _)| k == "reward"), "{a}");
        assert_eq!(measured(a), measured(b), "the same metrics either way");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

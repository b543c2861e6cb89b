//! `std.recipes` through the binary: a job instantiating each recipe checks cleanly and builds to
//! a plan; with the `runtime` feature each runs a few steps of a small digit task on two thread
//! ranks, logs finite metrics every step (the reward for the RL recipes), and the supervised
//! ones (SFT, DPO) bring their loss down.

mod common;

use common::{scratch, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rlc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rlc"))
}

/// A job on 3-digit reversal with one-layer models, whose pipeline is `call`: the policy, its
/// frozen reference and a critic, each placed only when `call` names it (an unused placement
/// is a warning).
fn program(call: &str) -> String {
    let mut src = String::from(
        r#"import std.models { tiny_gpt }
import std.recipes { RECIPE }

dataset reverse = task(kind: "reverse_digits", digits: 3)
cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 1, hidden: 32, heads: 2, vocab: 16, max_len: 16)
  init  = random(seed: 5)
  optim = adamw(lr: 1e-2, warmup: 1)
}
"#,
    );
    let recipe = &call[..call.find('(').unwrap()];
    src = src.replace("RECIPE", recipe);
    let uses =
        |role: &str| call.contains(&format!("({role},")) || call.contains(&format!(" {role},"));
    if uses("reference") {
        src.push_str("model reference: CausalLM = frozen(policy)\n");
    }
    if uses("critic") {
        src.push_str(
            "model critic: ValueModel {\n  \
             arch  = tiny_gpt(layers: 1, hidden: 32, heads: 2, vocab: 16, max_len: 16)\n  \
             init  = random(seed: 6)\n  \
             optim = adamw(lr: 1e-2, warmup: 1)\n}\n",
        );
    }
    src.push_str("\nplace policy on local[0..2] with dp(2)\n");
    for role in ["reference", "critic"] {
        if uses(role) {
            src.push_str(&format!("place {role} on local[0..2] with dp(2)\n"));
        }
    }
    if call.contains("reward: exact") {
        src.push_str(
            "\n/// The fraction of the answer's tokens the response got right.\n\
             fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {\n  \
             mean(f32(resp == target), over: T, mask: mask)\n}\n",
        );
    }
    src.push_str(&format!("\npipeline train {{ {call} }}\n"));
    src
}

/// Each recipe's call with `STEPS` steps, 8 prompts (or pairs, or demonstrations) a step — none
/// takes 8 by default, so the plan shows the argument reached it —, 4 responses a prompt for the
/// group recipes, 3 new tokens (5 for DAPO, whose overlong penalty then falls on a response of
/// 5).
const CALLS: &[(&str, &str)] = &[
    (
        "grpo",
        "grpo(policy, reference, data: reverse, reward: exact, steps: STEPS, prompts_per_step: 8, group: 4, max_new: 3, minibatch: 32)",
    ),
    (
        "dr_grpo",
        "dr_grpo(policy, data: reverse, reward: exact, steps: STEPS, prompts_per_step: 8, group: 4, max_new: 3, minibatch: 32)",
    ),
    (
        "dapo",
        "dapo(policy, data: reverse, reward: exact, steps: STEPS, prompts_per_step: 8, group: 4, max_new: 5, minibatch: 32)",
    ),
    (
        "gspo",
        "gspo(policy, data: reverse, reward: exact, steps: STEPS, prompts_per_step: 8, group: 4, max_new: 3, minibatch: 32)",
    ),
    (
        "rloo",
        "rloo(policy, reference, data: reverse, reward: exact, steps: STEPS, prompts_per_step: 8, group: 4, max_new: 3, minibatch: 32)",
    ),
    (
        "reinforce_pp",
        "reinforce_pp(policy, reference, data: reverse, reward: exact, steps: STEPS, prompts_per_step: 8, max_new: 3, minibatch: 8)",
    ),
    (
        "remax",
        "remax(policy, reference, data: reverse, reward: exact, steps: STEPS, prompts_per_step: 8, max_new: 3, minibatch: 8)",
    ),
    (
        "ppo",
        "ppo(policy, reference, critic, data: reverse, reward: exact, steps: STEPS, prompts_per_step: 8, max_new: 3, minibatch: 8)",
    ),
    (
        "dpo",
        "dpo(policy, reference, data: reverse, steps: STEPS, prompts_per_step: 8, beta: 0.5)",
    ),
    (
        "sft",
        "sft(policy, data: reverse, steps: STEPS, prompts_per_step: 8)",
    ),
];

/// The job of recipe `name` with `steps` steps, written as `job.rl` to a scratch folder of its
/// own for `what` (the tests run at once: each needs its own folder).
fn job(what: &str, name: &str, steps: usize) -> (PathBuf, PathBuf) {
    let call = CALLS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no call for {name}"))
        .1
        .replace("STEPS", &steps.to_string());
    let dir = scratch(&format!("{what}-{name}"));
    let source = dir.join("job.rl");
    std::fs::write(&source, program(&call)).unwrap();
    (dir, source)
}

/// `rlc build SOURCE -o PLAN`.
fn build(source: &Path, plan: &Path) -> Output {
    rlc()
        .arg("build")
        .arg(source)
        .arg("-o")
        .arg(plan)
        .output()
        .unwrap()
}

#[test]
fn every_recipe_checks_cleanly_and_builds_a_plan() {
    let recipes = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("stdlib/std/recipes.rl"),
    )
    .unwrap();
    for (name, _) in CALLS {
        assert!(
            recipes.contains(&format!("pub pipeline {name}(")),
            "std.recipes has no `{name}`"
        );
        let (dir, source) = job("check", name, 3);
        let out = rlc().arg("check").arg(&source).output().unwrap();
        assert!(out.status.success(), "{name}: {}", text(&out));
        let said = text(&out);
        assert!(
            !said.contains("warning"),
            "{name}: warnings in {}:\n{said}",
            std::fs::read_to_string(&source).unwrap()
        );
        let plan = dir.join("job.plan.json");
        let out = build(&source, &plan);
        assert!(out.status.success(), "{name}: {}", text(&out));
        let plan: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
        let ops = plan["ops"].as_array().map_or(0, Vec::len);
        assert!(ops > 0, "{name}: a plan without ops: {plan}");
    }
}

/// Each line of the run's metrics.jsonl, its numbers by name.
#[cfg(feature = "runtime")]
fn metrics(run: &Path) -> Vec<serde_json::Map<String, serde_json::Value>> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v.as_object().unwrap().clone()
        })
        .collect()
}

/// Runs recipe `name` for `steps` steps and returns its metrics, checked: the run succeeds,
/// logs one line per step, each with every name of `logged`, and every number is finite.
#[cfg(feature = "runtime")]
fn runs(
    name: &str,
    steps: usize,
    logged: &[&str],
) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let (dir, source) = job("run", name, steps);
    let run = dir.join("run");
    let out = rlc()
        .arg("run")
        .arg(&source)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(out.status.success(), "{name}: {}", text(&out));
    let lines = metrics(&run);
    assert_eq!(lines.len(), steps, "{name}: {lines:?}");
    for (step, line) in lines.iter().enumerate() {
        for key in logged {
            assert!(
                line.contains_key(*key),
                "{name}: step {step} has no `{key}`: {line:?}"
            );
        }
        // A non-finite value is written as `null`.
        for (key, v) in line {
            assert!(
                !v.is_null(),
                "{name}: step {step}: {key} is not finite: {line:?}"
            );
            if let Some(x) = v.as_f64() {
                assert!(x.is_finite(), "{name}: step {step}: {key} = {x}");
            }
        }
    }
    lines
}

#[cfg(feature = "runtime")]
fn metric(line: &serde_json::Map<String, serde_json::Value>, key: &str) -> f64 {
    line[key].as_f64().unwrap()
}

#[cfg(feature = "runtime")]
#[test]
fn grpo_runs() {
    runs("grpo", 3, &["reward", "kl", "entropy"]);
}

#[cfg(feature = "runtime")]
#[test]
fn dr_grpo_runs() {
    runs("dr_grpo", 3, &["reward", "entropy"]);
}

#[cfg(feature = "runtime")]
#[test]
fn dapo_runs_and_logs_its_penalty_and_informative_groups() {
    let lines = runs("dapo", 3, &["reward", "overlong", "informative", "entropy"]);
    for line in &lines {
        // A penalty is never positive, at most `overlong_factor` = 1 per response; the
        // informative fraction is a fraction. (That the penalty bites a response of 5 is not
        // asserted: the plan takes `max_new`'s default for it, /work/notes/recipe_bugs.md 0b.)
        let overlong = metric(line, "overlong");
        assert!((-1.0..=0.0).contains(&overlong), "{line:?}");
        assert!(
            (0.0..=1.0).contains(&metric(line, "informative")),
            "{line:?}"
        );
    }
}

#[cfg(feature = "runtime")]
#[test]
fn gspo_runs() {
    runs("gspo", 3, &["reward", "entropy"]);
}

#[cfg(feature = "runtime")]
#[test]
fn rloo_runs() {
    runs("rloo", 3, &["reward", "kl", "entropy"]);
}

#[cfg(feature = "runtime")]
#[test]
fn reinforce_pp_runs() {
    runs("reinforce_pp", 3, &["reward", "kl", "entropy"]);
}

#[cfg(feature = "runtime")]
#[test]
fn remax_runs_with_its_greedy_baseline() {
    let lines = runs("remax", 3, &["reward", "greedy", "kl", "entropy"]);
    for line in &lines {
        assert!((0.0..=1.0).contains(&metric(line, "greedy")), "{line:?}");
    }
}

#[cfg(feature = "runtime")]
#[test]
fn ppo_runs_with_its_critic() {
    runs("ppo", 3, &["reward", "kl", "value", "entropy"]);
}

#[cfg(feature = "runtime")]
#[test]
fn dpo_brings_its_loss_down() {
    let lines = runs("dpo", 6, &["loss", "accuracy", "margin"]);
    // The policy starts as its reference: every implicit reward is 0, the loss log 2.
    let first = metric(&lines[0], "loss");
    assert!((first - std::f64::consts::LN_2).abs() < 1e-3, "{lines:?}");
    let last = metric(&lines[lines.len() - 1], "loss");
    assert!(last < first, "{lines:?}");
}

#[cfg(feature = "runtime")]
#[test]
fn sft_brings_its_loss_down() {
    let lines = runs("sft", 6, &["loss"]);
    let (first, last) = (
        metric(&lines[0], "loss"),
        metric(&lines[lines.len() - 1], "loss"),
    );
    assert!(last < first, "{lines:?}");
}

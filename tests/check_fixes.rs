//! The checker's fixes travel with `rlc check --format json` (each edit's file, byte range and
//! text) and SARIF (`fixes[].artifactChanges[]`), so a CI tool can apply them without the
//! editor: each case's one error has one fix; applying its edits by byte range leaves a file
//! that `rlc check` accepts (#29 item 3).

#[path = "common/edits.rs"]
mod edits;

use edits::apply_edits;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const RLC: &str = env!("CARGO_BIN_EXE_rlc");

/// A GRPO job with every setting right; the cases each break one thing.
const PROGRAM: &str = r#"import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
model reference: CausalLM = frozen(policy)

place policy.train    on local[0..2] with dp(2)
place policy.generate on local[0..2] with dp(2)
place reference       on local[0..2] with dp(2)

pipeline train(steps = 100) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(16), n: 8, max_new: 8, temperature: 1.0)
    let adv = grpo_advantage(reverse.score(rollout), rollout.group, rollout.mask)
    let old = policy.logprobs(rollout)
    let ref = reference.logprobs(rollout)
    policy.update(rollout, epochs: 1, minibatch: 64) { logp ->
      token_mean(ppo_clip(logp, old, adv) + 0.01 * kl_k3(logp, ref), rollout.mask)
    }
  }
}
"#;

fn dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlc-check-fixes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `rlc check --format <format> path`: exit status and standard output.
fn check(path: &Path, format: &str) -> (Option<i32>, String) {
    let out = Command::new(RLC)
        .args(["check", "--format", format])
        .arg(path)
        .env("NO_COLOR", "1")
        .output()
        .expect("run rlc");
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// `PROGRAM` with `from` replaced by `to` (once).
fn broken(from: &str, to: &str) -> String {
    assert_eq!(PROGRAM.matches(from).count(), 1, "{from}");
    PROGRAM.replacen(from, to, 1)
}

/// Applies a JSON fix's edits (byte ranges of `path`) to `text`.
fn apply(text: &str, fix: &Value, path: &Path) -> String {
    let edits = fix["edits"].as_array().unwrap().iter().map(|e| {
        assert_eq!(e["file"], path.to_str().unwrap(), "{e}");
        (
            e["range"]["start"].as_u64().unwrap() as usize,
            e["range"]["end"].as_u64().unwrap() as usize,
            e["text"].as_str().unwrap(),
        )
    });
    apply_edits(text, edits)
}

#[test]
fn the_program_checks_clean() {
    let path = dir().join("clean.rl");
    std::fs::write(&path, PROGRAM).unwrap();
    assert_eq!(check(&path, "json"), (Some(0), String::new()));
}

#[test]
fn json_fixes_of_each_kind_apply_to_a_program_that_checks_clean() {
    // (name, the broken program, its code, what the fixed text contains); a micro-batch of 6
    // for a share of 32 is 4 or 8 away by 2: the larger
    let cases = [
        (
            "layout",
            PROGRAM.replace("with dp(2)", "with dp(3)"),
            "E0502",
            "with dp(2)",
        ),
        (
            "minibatch",
            broken("minibatch: 64", "minibatch: 63"),
            "E0601",
            "minibatch: 64",
        ),
        (
            "micro",
            broken(
                "place policy.train    on local[0..2] with dp(2)",
                "place policy.train    on local[0..2] with dp(2), micro(6)",
            ),
            "E0603",
            "micro(8)",
        ),
        (
            "import",
            broken("ppo_clip, kl_k3, token_mean", "ppo_clip, token_mean"),
            "E0201",
            "ppo_clip, token_mean, kl_k3 }",
        ),
        (
            "rename",
            broken("temperature: 1.0", "temprature: 1.0"),
            "E0304",
            "temperature: 1.0",
        ),
    ];
    for (name, src, code, restored) in cases {
        let path = dir().join(format!("{name}.rl"));
        std::fs::write(&path, &src).unwrap();
        let (status, out) = check(&path, "json");
        assert_eq!(status, Some(1), "{name}: {out}");
        let diags = json_lines(&out);
        assert_eq!(diags.len(), 1, "{name}: {out}");
        assert_eq!(diags[0]["code"], code, "{name}: {out}");
        let fixes = diags[0]["fixes"].as_array().unwrap();
        assert_eq!(fixes.len(), 1, "{name}: {out}");
        assert!(fixes[0]["message"].as_str().is_some_and(|m| !m.is_empty()));
        let fixed = apply(&src, &fixes[0], &path);
        assert!(fixed.contains(restored), "{name}: {fixed}");
        std::fs::write(&path, &fixed).unwrap();
        assert_eq!(
            check(&path, "json"),
            (Some(0), String::new()),
            "{name}: {fixed}"
        );
    }
}

#[test]
fn sarif_carries_the_fix_of_a_layout_on_three_lines_as_three_replacements() {
    let path = dir().join("sarif.rl");
    std::fs::write(&path, PROGRAM.replace("with dp(2)", "with dp(3)")).unwrap();
    let (status, out) = check(&path, "sarif");
    assert_eq!(status, Some(1));
    let log: Value = serde_json::from_str(&out).unwrap();
    let results = log["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{out}");
    let change = &results[0]["fixes"][0]["artifactChanges"][0];
    let replacements = change["replacements"].as_array().unwrap();
    assert_eq!(replacements.len(), 3, "{out}");
    for r in replacements {
        assert_eq!(r["insertedContent"]["text"], "dp(2)", "{r}");
        assert_eq!(r["deletedRegion"]["charLength"], 5, "{r}");
    }
}

//! `rlc new NAME [--lib]`: a package folder with its `rl.toml`, a working example and a README
//! that says how to check and run it (docs/packages.md).
//!
//! - a job: `main.rl`, a small GRPO on the reverse-digits task (two CPU ranks, 20 steps) whose
//!   reward function is the package's own module `src/rewards.rl`, imported as
//!   `import <name>.rewards { exact }`;
//! - a library (`--lib`): the module `src/rewards.rl` with a `pub fn`, and a job using it,
//!   `examples/digits.rl`.

use std::path::Path;
use std::process::ExitCode;

/// The package's name: the folder's last segment, `-` read as `_`.
fn package_name(dir: &Path) -> Result<String, String> {
    let last = dir
        .file_name()
        .map(|n| n.to_string_lossy().replace('-', "_"))
        .ok_or_else(|| format!("`{}` does not name a folder", dir.display()))?;
    if !rlc_check::packages::valid_name(&last) {
        return Err(format!(
            "`{last}` is not a package name: use letters, digits and `_` (or `-`), starting with a letter, and not `std`"
        ));
    }
    Ok(last)
}

pub fn run(dir: &Path, lib: bool) -> Result<ExitCode, String> {
    let name = package_name(dir)?;
    if dir.exists() {
        let non_empty = match std::fs::read_dir(dir) {
            Ok(mut entries) => entries.next().is_some(),
            Err(_) => true,
        };
        if non_empty {
            return Err(format!(
                "`{}` already exists and is not empty: `rlc new` makes a new package folder",
                dir.display()
            ));
        }
    }
    let files = if lib {
        vec![
            ("rl.toml", manifest(&name)),
            ("src/rewards.rl", REWARDS.to_string()),
            ("examples/digits.rl", job(&name, JOB_LIB_HEADER)),
            ("README.md", readme(&name, "examples/digits.rl", true)),
        ]
    } else {
        vec![
            ("rl.toml", manifest(&name)),
            ("src/rewards.rl", REWARDS.to_string()),
            ("main.rl", job(&name, JOB_HEADER)),
            ("README.md", readme(&name, "main.rl", false)),
        ]
    };
    for (rel, text) in &files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create `{}`: {e}", parent.display()))?;
        }
        std::fs::write(&path, text)
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    }
    let kind = if lib { "library" } else { "job" };
    eprintln!(
        "created the {kind} package `{name}` in `{}` ({})",
        dir.display(),
        files.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

fn manifest(name: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"

[dependencies]
# A package by path, relative to this folder:
# recipes = {{ path = "../recipes" }}
# A vendored package, in vendor/shaping/:
# shaping = "0.1.0"
"#
    )
}

const REWARDS: &str = r#"//! Rewards for the reverse-digits task.

/// The fraction of the answer's tokens the response got right.
pub fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(f32(resp == target), over: T, mask: mask)
}
"#;

const JOB_HEADER: &str = "//! GRPO on the reverse-digits task (`^1234=` → `4321`): a small policy on two CPU ranks.\n//! `rlc check main.rl` checks it; `rlc run main.rl` runs it.\n";

const JOB_LIB_HEADER: &str = "//! A job using this library: GRPO on the reverse-digits task with the package's reward.\n//! `rlc check examples/digits.rl` checks it; `rlc run examples/digits.rl` runs it.\n";

fn job(name: &str, header: &str) -> String {
    format!(
        r#"{header}
import std.algo {{ grpo_advantage, ppo_clip, kl_k3, token_mean }}
import std.models {{ tiny_gpt_abs }}
import std.task.digits {{ reverse_task }}
import {name}.rewards {{ exact }}

dataset reverse = reverse_task(digits: 4)

cluster local = cpu(devices: 2)

model policy: CausalLM {{
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3, warmup: 10)
}}
model reference: CausalLM = frozen(policy)

place policy.train    on local[0..2] with dp(2)
place policy.generate on local[0..2] with dp(2)
place reference       on local[0..2] with dp(2)

pipeline train(steps = 20, prompts_per_step = 8, group = 8) {{
  loop step in 0..steps {{
    let prompts  = reverse.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: 4, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let reward   = exact(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 64) {{ logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2) + 0.05 * kl_k3(logp, ref_logp), rollout.mask)
    }}
    log {{ reward: mean(reward) }}
  }}
}}
"#
    )
}

fn readme(name: &str, job: &str, lib: bool) -> String {
    let what = if lib {
        format!(
            "A library package: its module `src/rewards.rl` is `{name}.rewards` to the packages that\ndepend on it (`{name} = {{ path = \"../{name}\" }}` in their `rl.toml`); `{job}` is a job using it.\n"
        )
    } else {
        format!(
            "A job package: `{job}` is the job; `src/rewards.rl` is its module `{name}.rewards`.\n"
        )
    };
    format!(
        r#"# {name}

{what}
## Check and run

```sh
rlc check .          # every .rl file of the package: this is its test
rlc fmt --check .
rlc run {job}     # a few GRPO steps on two CPU ranks (needs `rlc run`'s libtorch)
```

Dependencies go in `rl.toml` (see docs/packages.md of rlc).
"#
    )
}

//! Machine-applicable fixes (#29 item 3): each fix a diagnostic carries, applied to the text,
//! leaves a program that checks clean.

use rlc_diagnostics::{Code, Diagnostic, Files};

/// Serves nothing: the programs import only `std`.
struct NoFiles;

impl rlc_check::SourceLoader for NoFiles {
    fn read(&self, _: &str) -> Result<String, String> {
        Err("not found".into())
    }
}

fn check(src: &str) -> Vec<Diagnostic> {
    let mut files = Files::new();
    rlc_check::check(&NoFiles, &mut files, "main.rl", src.to_string()).diagnostics
}

/// The one diagnostic with `code`, its one fix applied to `src` (every edit is in `src`).
fn apply_fix(src: &str, code: Code) -> String {
    let diags = check(src);
    let found: Vec<&Diagnostic> = diags.iter().filter(|d| d.code == code).collect();
    assert_eq!(found.len(), 1, "{diags:#?}");
    assert_eq!(found[0].fixes.len(), 1, "{:#?}", found[0]);
    let mut edits = found[0].fixes[0].edits.clone();
    edits.sort_by_key(|e| std::cmp::Reverse(e.span.start));
    let mut out = src.to_string();
    for e in edits {
        out.replace_range(e.span.start as usize..e.span.end as usize, &e.text);
    }
    out
}

fn assert_clean(src: &str) {
    let errors: Vec<Diagnostic> = check(src).into_iter().filter(|d| d.is_error()).collect();
    assert!(errors.is_empty(), "{src}\n{errors:#?}");
}

const PROGRAM: &str = r#"import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 16)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 32)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3)
}

place policy.train    on local[0..16] with dp(16)
place policy.generate on local[0..16] with GENERATE

fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(where(mask, f32(resp == target), 0.0), over: T)
}

pipeline train(steps = 100, prompts_per_step = 16, group = 8) {
  loop step in 0..steps {
    let prompts  = reverse.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: 8, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let reward   = exact(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 64) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask)
    }
    log { reward: mean(reward) }
  }
}
"#;

#[test]
fn the_program_checks_clean_with_a_valid_layout() {
    assert_clean(&PROGRAM.replace("GENERATE", "dp(4), tp(4)"));
}

#[test]
fn a_tp_degree_that_does_not_divide_the_heads_is_fixed_with_data_parallelism() {
    // tp(16) on 16 devices of a 4-head model: tp(4), and dp(4) for the devices it frees.
    let fixed = apply_fix(&PROGRAM.replace("GENERATE", "tp(16)"), Code::HeadsTp);
    assert!(fixed.contains("with dp(4), tp(4)\n"), "{fixed}");
    assert_clean(&fixed);
    // With a dp factor already written, the fix multiplies it.
    let fixed = apply_fix(&PROGRAM.replace("GENERATE", "dp(2), tp(8)"), Code::HeadsTp);
    assert!(fixed.contains("with dp(4), tp(4)\n"), "{fixed}");
    assert_clean(&fixed);
}

#[test]
fn a_misspelt_name_is_renamed_to_the_suggested_one() {
    let src = PROGRAM
        .replace("GENERATE", "dp(4), tp(4)")
        .replace("where(mask,", "where(msk,");
    let fixed = apply_fix(&src, Code::UndefinedName);
    assert!(fixed.contains("where(mask,"), "{fixed}");
    assert_clean(&fixed);
}

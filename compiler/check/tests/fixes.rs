//! Machine-applicable fixes (#29 item 3): each fix a diagnostic carries, applied to the text,
//! leaves a program that checks clean.

use rlc_diagnostics::{Code, Diagnostic, Files};

#[path = "../../../tests/common/edits.rs"]
mod edits;
use edits::apply_edits;

/// Serves `lib/scores.rl` (a module of the project's own); the programs import `std` besides.
struct Lib;

const SCORES: &str =
    "pub fn exact_match(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(where(mask, f32(resp == target), 0.0), over: T)
}

pub fn length(mask: Mask[B, T]) -> f32[B] {
  sum(where(mask, 1.0, 0.0), over: T)
}
";

impl rlc_check::SourceLoader for Lib {
    fn read(&self, path: &str) -> Result<String, String> {
        match path {
            "lib/scores.rl" => Ok(SCORES.to_string()),
            _ => Err("not found".into()),
        }
    }
}

fn check(src: &str) -> Vec<Diagnostic> {
    let mut files = Files::new();
    rlc_check::check(&Lib, &mut files, "main.rl", src.to_string()).diagnostics
}

/// The one diagnostic with `code`, its one fix applied to `src` (every edit is in `src`).
fn apply_fix(src: &str, code: Code) -> String {
    let diags = check(src);
    let found: Vec<&Diagnostic> = diags.iter().filter(|d| d.code == code).collect();
    assert_eq!(found.len(), 1, "{diags:#?}");
    assert_eq!(found[0].fixes.len(), 1, "{:#?}", found[0]);
    let edits = found[0].fixes[0].edits.clone();
    assert!(
        edits.iter().all(|e| e.file == found[0].primary().file),
        "{edits:#?}"
    );
    apply_edits(
        src,
        edits
            .into_iter()
            .map(|e| (e.span.start as usize, e.span.end as usize, e.text)),
    )
}

/// `src` with `from` (which must occur once) replaced by `to`.
fn with(src: &str, from: &str, to: &str) -> String {
    assert_eq!(src.matches(from).count(), 1, "{from:?} in\n{src}");
    src.replacen(from, to, 1)
}

/// The fix of the one `code` diagnostic of `src`, applied: the diagnostic is gone and the
/// program checks clean. Returns the fixed text.
fn fixes_clean(src: &str, code: Code) -> String {
    let fixed = apply_fix(src, code);
    assert_clean(&fixed);
    fixed
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

/// The program with a valid layout, for the cases below to break.
fn valid() -> String {
    PROGRAM.replace("GENERATE", "dp(4), tp(4)")
}

#[test]
fn a_layout_that_does_not_fill_its_devices_gets_a_data_parallel_degree_that_does() {
    // dp·tp = 2·4 on 16 devices: dp(4).
    let fixed = fixes_clean(
        &PROGRAM.replace("GENERATE", "dp(2), tp(4)"),
        Code::LayoutProduct,
    );
    assert!(fixed.contains("with dp(4), tp(4)\n"), "{fixed}");
    // No dp written: one is inserted before the first factor.
    let fixed = fixes_clean(&PROGRAM.replace("GENERATE", "tp(2)"), Code::LayoutProduct);
    assert!(fixed.contains("with dp(8), tp(2)\n"), "{fixed}");
    // fsdp without dp takes up the devices itself.
    let src = with(&valid(), "with dp(16)", "with fsdp(8)");
    let fixed = fixes_clean(&src, Code::LayoutProduct);
    assert!(fixed.contains("with fsdp(16)\n"), "{fixed}");
}

#[test]
fn a_tp_degree_larger_than_the_devices_shrinks_to_one_that_fits_the_heads() {
    // tp(32) on 16 devices of a 4-head model: tp(4) with dp(4); E0503 is reported beside it.
    // E0503's own fix would keep the product of 32 devices: it has none here.
    let src = PROGRAM.replace("GENERATE", "tp(32)");
    let diags = check(&src);
    let heads = diags.iter().find(|d| d.code == Code::HeadsTp);
    assert!(heads.is_some_and(|d| d.fixes.is_empty()), "{diags:#?}");
    let fixed = fixes_clean(&src, Code::LayoutProduct);
    assert!(fixed.contains("with dp(4), tp(4)\n"), "{fixed}");
}

/// The issue's example: `dp(3)` on two devices written on three `place` lines is one E0502,
/// and its one fix rewrites all three.
const THREE_LINES: &str = r#"import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
model reference: CausalLM = frozen(policy)

place policy.train    on local[0..2] with dp(3)
place policy.generate on local[0..2] with dp(3)
place reference       on local[0..2] with dp(3)

pipeline train(steps = 100) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(16), n: 8, max_new: 8)
    let adv = grpo_advantage(reverse.score(rollout), rollout.group, rollout.mask)
    let old = policy.logprobs(rollout)
    let ref = reference.logprobs(rollout)
    policy.update(rollout, epochs: 1, minibatch: 64) { logp ->
      token_mean(ppo_clip(logp, old, adv) + 0.01 * kl_k3(logp, ref), rollout.mask)
    }
  }
}
"#;

#[test]
fn one_layout_on_three_lines_is_one_diagnostic_with_one_fix_for_all_three() {
    let diags = check(THREE_LINES);
    let errors: Vec<&Diagnostic> = diags.iter().filter(|d| d.is_error()).collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].fixes[0].edits.len(), 3, "{:#?}", errors[0]);
    let fixed = fixes_clean(THREE_LINES, Code::LayoutProduct);
    assert_eq!(fixed.matches("with dp(2)\n").count(), 3, "{fixed}");
}

#[test]
fn a_tp_degree_that_fits_nothing_is_one_error_with_notes() {
    // tp(3) on 3 devices of a 4-head, 16-token model: E0503, with E0504 and E0506 as notes.
    let src = THREE_LINES
        .replace("cpu(devices: 2)", "cpu(devices: 3)")
        .replace("local[0..2] with dp(3)", "local[0..3] with tp(3)");
    let diags = check(&src);
    let errors: Vec<&Diagnostic> = diags.iter().filter(|d| d.is_error()).collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].code, Code::HeadsTp);
    let notes = errors[0].notes.join("\n");
    assert!(
        notes.contains("(E0504)") && notes.contains("(E0506)"),
        "{notes}"
    );
    // tp(1) with dp(3): three data-parallel ranks, which a batch of 128 does not split.
    let fixed = apply_fix(&src, Code::HeadsTp);
    assert_eq!(fixed.matches("with dp(3), tp(1)\n").count(), 3, "{fixed}");
    assert!(check(&fixed).iter().all(|d| d.code != Code::HeadsTp));
}

#[test]
fn a_batch_that_does_not_split_gets_the_nearest_n_that_does() {
    // 16 prompts × 8 on dp(3) everywhere: n 9 (144 sequences, 48 per rank).
    let src = THREE_LINES
        .replace("cpu(devices: 2)", "cpu(devices: 3)")
        .replace("local[0..2] with dp(3)", "local[0..3] with dp(3)")
        .replace("minibatch: 64", "minibatch: 48");
    let diags = check(&src);
    assert_eq!(
        diags.iter().filter(|d| d.is_error()).count(),
        1,
        "{diags:#?}"
    );
    let fixed = fixes_clean(&src, Code::BatchNotDivisible);
    assert!(fixed.contains("reverse.sample(16), n: 9,"), "{fixed}");
}

#[test]
fn a_batch_size_from_a_pipeline_parameter_is_fixed_at_its_default() {
    // `n: group` with `group = 8`: the default becomes 9 (16 × 9 = 144 over dp(3)).
    let src = with(&valid(), "with dp(16)", "with dp(3)");
    let src = with(&src, "local[0..16] with dp(3)", "local[0..3] with dp(3)");
    let src = with(&src, "minibatch: 64", "minibatch: 48");
    let fixed = fixes_clean(&src, Code::BatchNotDivisible);
    assert!(
        fixed.contains("pipeline train(steps = 100, prompts_per_step = 16, group = 9)"),
        "{fixed}"
    );
    // A name a `let` binds (here one that shadows the parameter) is not rewritten: no fix.
    let shadowed = with(
        &src,
        "    let prompts  = reverse.sample",
        "    let group = 8\n    let prompts  = reverse.sample",
    );
    let diags = check(&shadowed);
    let e = diags
        .iter()
        .find(|d| d.code == Code::BatchNotDivisible)
        .unwrap_or_else(|| panic!("{diags:#?}"));
    assert!(e.fixes.is_empty(), "{e:#?}");
}

#[test]
fn a_minibatch_that_does_not_split_gets_the_nearest_multiple_of_the_ranks() {
    // 30 over dp(16): 32 (ties go up); 20: 16.
    let fixed = fixes_clean(
        &with(&valid(), "minibatch: 64", "minibatch: 30"),
        Code::BatchNotDivisible,
    );
    assert!(fixed.contains("minibatch: 32)"), "{fixed}");
    let fixed = fixes_clean(
        &with(&valid(), "minibatch: 64", "minibatch: 20"),
        Code::BatchNotDivisible,
    );
    assert!(fixed.contains("minibatch: 16)"), "{fixed}");
}

#[test]
fn a_minibatch_larger_than_the_batch_becomes_the_batch() {
    let fixed = fixes_clean(
        &with(&valid(), "minibatch: 64", "minibatch: 200"),
        Code::MinibatchTooLarge,
    );
    assert!(fixed.contains("minibatch: 128)"), "{fixed}");
}

#[test]
fn a_micro_batch_gets_the_nearest_size_that_divides_each_ranks_share() {
    // minibatch 64 over dp(16): 4 each; micro(3) → micro(4), micro(8) → micro(4).
    let fixed = fixes_clean(
        &with(&valid(), "with dp(16)", "with dp(16), micro(3)"),
        Code::MinibatchMicro,
    );
    assert!(fixed.contains("dp(16), micro(4)\n"), "{fixed}");
    let fixed = fixes_clean(
        &with(&valid(), "with dp(16)", "with dp(16), micro(8)"),
        Code::ZeroAccumulation,
    );
    assert!(fixed.contains("dp(16), micro(4)\n"), "{fixed}");
}

#[test]
fn a_std_function_used_without_its_import_joins_the_import_list() {
    let src = with(
        &valid(),
        "{ grpo_advantage, ppo_clip, token_mean }",
        "{ grpo_advantage, token_mean }",
    );
    let fixed = fixes_clean(&src, Code::UndefinedName);
    assert!(
        fixed.starts_with("import std.algo { grpo_advantage, token_mean, ppo_clip }\n"),
        "{fixed}"
    );
}

#[test]
fn a_std_item_of_a_module_not_imported_gets_a_new_import_line() {
    let src = with(&valid(), "import std.models { tiny_gpt }\n", "");
    let fixed = fixes_clean(&src, Code::UndefinedName);
    assert!(
        fixed.contains("import std.task.digits { reverse }\nimport std.models { tiny_gpt }\n"),
        "{fixed}"
    );
}

#[test]
fn a_function_of_a_sibling_module_is_imported_from_it() {
    // `lib/scores.rl` is imported for `exact_match`; `length` is used without its import.
    let src = with(
        &valid(),
        "import std.task.digits { reverse }\n",
        "import std.task.digits { reverse }\nimport \"./lib/scores.rl\" { exact_match }\n",
    );
    let src = with(
        &src,
        "let reward   = exact(rollout.response, rollout.target, rollout.mask)",
        "let reward   = exact_match(rollout.response, rollout.target, rollout.mask) + 0.0 * length(rollout.mask)",
    );
    let fixed = fixes_clean(&src, Code::UndefinedName);
    assert!(
        fixed.contains("import \"./lib/scores.rl\" { exact_match, length }\n"),
        "{fixed}"
    );
    // Imported as a whole module, without a list: a new line with the path from the importing
    // file. (A module the program does not import at all is not searched: the checker reads
    // only the files imports name.)
    let src = with(
        &src,
        "\"./lib/scores.rl\" { exact_match }",
        "\"./lib/scores.rl\" as scores",
    );
    let src = with(&src, "exact_match(", "scores.exact_match(");
    let fixed = fixes_clean(&src, Code::UndefinedName);
    assert!(
        fixed.contains("as scores\nimport \"./lib/scores.rl\" { length }\n"),
        "{fixed}"
    );
}

#[test]
fn every_did_you_mean_comes_with_the_rename() {
    let src = valid();
    // (the mistake, its code, the text that must be back after the fix)
    let cases = [
        ("temperature: 1.0", "temprature: 1.0", Code::UnknownArgument),
        (
            "rollout.target, rollout.mask)",
            "rollout.target, rollout.msk)",
            Code::UnknownField,
        ),
        ("optim = adamw", "optm  = adamw", Code::UnknownField),
        (
            "place policy.train ",
            "place policy.trian ",
            Code::UnknownPhase,
        ),
        (
            "policy.logprobs(rollout)",
            "policy.logprob(rollout)",
            Code::UnsupportedOperation,
        ),
        ("resp: Tokens[B, T]", "resp: Tokns[B, T]", Code::UnknownType),
        (
            "policy: CausalLM",
            "policy: CausalLN",
            Code::UnknownRoleKind,
        ),
        (
            "import std.algo {",
            "import std.algp {",
            Code::UnknownModule,
        ),
        (
            "{ grpo_advantage, ppo_clip,",
            "{ grpo_advantage, ppo_clipp,",
            Code::NoSuchItem,
        ),
        (
            "local[0..16] with dp(16)",
            "local[0..16] with dq(16)",
            Code::UnknownLayout,
        ),
        ("\nmodel policy", "\nmodle policy", Code::ExpectedItem),
    ];
    for (right, wrong, code) in cases {
        let broken = with(&src, right, wrong);
        let fixed = apply_fix(&broken, code);
        // The rename restores the text, spacing aside (`optm  =` keeps its two spaces).
        assert!(
            fixed.replace("  ", " ").contains(&right.replace("  ", " ")),
            "{code:?}: {wrong:?} → {fixed}"
        );
        assert_clean(&fixed);
    }
}

#[test]
fn a_pp_degree_that_does_not_divide_the_layers_is_fixed_with_data_parallelism() {
    // pp(4) over 2 layers on 16 devices: pp(2), and dp doubles for the devices it frees.
    let src = with(&valid(), "with dp(16)", "with dp(4), pp(4)");
    let fixed = fixes_clean(&src, Code::LayersPp);
    assert!(fixed.contains("with dp(8), pp(2)\n"), "{fixed}");
}

#[test]
fn a_name_missing_at_several_uses_is_one_error_whose_fix_covers_them_all() {
    // `msk` twice in `exact`: one E0201, the second use a label, the rename editing both.
    let src = with(
        &valid(),
        "mean(where(mask, f32(resp == target), 0.0), over: T)",
        "mean(where(msk, f32(resp == target), 0.0), over: T) + 0.0 * mean(where(msk, 1.0, 0.0), over: T)",
    );
    let diags = check(&src);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].labels.len(), 2, "{:#?}", diags[0]);
    assert_eq!(diags[0].fixes[0].edits.len(), 2, "{:#?}", diags[0]);
    let fixed = fixes_clean(&src, Code::UndefinedName);
    assert!(!fixed.contains("msk"), "{fixed}");
    // `ppo_clip` used twice without its import: one E0201, one import.
    let src = with(
        &valid(),
        "{ grpo_advantage, ppo_clip, token_mean }",
        "{ grpo_advantage, token_mean }",
    );
    let src = with(
        &src,
        "log { reward: mean(reward) }",
        "log { reward: mean(reward), clip: token_mean(ppo_clip(old_logp, old_logp, adv), rollout.mask) }",
    );
    let diags = check(&src);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].fixes[0].edits.len(), 1, "{:#?}", diags[0]);
    fixes_clean(&src, Code::UndefinedName);
}

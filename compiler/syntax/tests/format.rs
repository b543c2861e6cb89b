//! The formatter: the examples and std are fixed points, messy inputs come out canonical, and
//! formatting keeps the syntax tree (spans aside) and every comment, and is idempotent.

mod common;

use rlc_diagnostics::FileId;
use rlc_syntax::format::{format_source, verify};

/// Formats `src` and checks the result: it parses to the same tree with the same comments, and
/// formatting it again changes nothing.
fn fmt(src: &str) -> String {
    let out =
        format_source(FileId(0), src).unwrap_or_else(|d| panic!("does not format: {d:#?}\n{src}"));
    let before = rlc_syntax::parse(FileId(0), src);
    let after = rlc_syntax::parse(FileId(0), &out);
    assert!(
        after.diagnostics.iter().all(|d| !d.is_error()),
        "the output does not parse:\n{out}"
    );
    assert_eq!(
        verify::comment_multiset(&before.comments),
        verify::comment_multiset(&after.comments),
        "comments changed:\n{out}"
    );
    assert_eq!(
        verify::without_spans(&before.module),
        verify::without_spans(&after.module),
        "tree changed:\n{out}"
    );
    let again = format_source(FileId(0), &out).unwrap();
    assert_eq!(again, out, "not idempotent");
    assert!(
        out.ends_with('\n') && !out.ends_with("\n\n"),
        "one final new line"
    );
    assert!(!out.contains("\n\n\n"), "two blank lines in a row");
    assert!(
        out.lines().all(|l| l == l.trim_end()),
        "trailing white space"
    );
    out
}

/// Formats `src` (checked as by [`fmt`]) and compares the result with a reviewed snapshot.
fn snap(name: &str, src: &str) {
    let out = fmt(src);
    insta::with_settings!({ omit_expression => true, prepend_module_to_snapshot => true }, {
        insta::assert_snapshot!(name, out);
    });
}

#[test]
fn examples_and_std_are_fixed_points() {
    let files = common::corpus();
    for path in files {
        let src = std::fs::read_to_string(&path).unwrap();
        let out = fmt(&src);
        // std files written later are only required to format cleanly; the examples are the
        // reference of the style and must not change.
        if path.components().any(|c| c.as_os_str() == "examples") {
            assert_eq!(out, src, "{} is not in canonical form", path.display());
        }
    }
}

#[test]
fn syntax_errors_come_back_and_nothing_is_formatted() {
    let src = "model policy: CausalLM {\n  arch: tiny\n}\n\nfn f( {\n";
    let errors =
        format_source(FileId(0), src).expect_err("a file with syntax errors is not formatted");
    assert!(errors.len() >= 2, "every error comes back: {errors:#?}");
    assert!(errors.iter().all(|d| d.is_error()));
}

#[test]
fn a_file_of_comments_only_keeps_them() {
    // The parser warns that the file declares nothing; that is no reason to refuse.
    assert_eq!(fmt("// one\n\n\n  // two\n"), "// one\n\n// two\n");
}

#[test]
fn empty_file_stays_empty() {
    assert_eq!(format_source(FileId(0), "").unwrap(), "");
    assert_eq!(format_source(FileId(0), "\n\n  \n").unwrap(), "");
}

#[test]
fn spacing_and_blank_lines() {
    snap(
        "spacing_and_blank_lines",
        r#"


//! Module doc.
import std.algo {grpo_advantage,ppo_clip}
import std.models { tiny_gpt }


import "./lib/rewards.rl" as rewards
cluster local=cpu(devices:2)
let a=1


let long_name: f32 = 2.5
model policy:CausalLM{
arch=tiny_gpt(layers:2,hidden:64)
    init =random(seed:7)


  optim= adamw(lr:3e-3)
}
model reference : CausalLM=frozen(policy)
fn f(x:f32[B,T],y:f32)->f32[B]{


let z=x*2+y-(3)/-x%2
  let ok=!(a<=b)&&c!=d||e>=f

  mean(z,over:T)


}
struct S{a:f32[B],b:Tokens[B,8]}
pipeline train(steps=300,group:i64=8){loop step in 0 .. steps{log{reward:mean(r),kl:1}
every 10 step {
checkpoint policy,critic
}}}



"#,
    );
}

#[test]
fn alignment() {
    snap(
        "alignment",
        r#"
let h100 = device(memory: 80GiB)
let a100_80g: Device = device(memory: 80GiB)

let alone = 1

cluster big {
  nodes = 16
  devices_per_node = 8
  // a comment ends the run
  device = h100_80g
  intra_bandwidth = 450GBps

  inter_bandwidth = 50GBps
}

place policy.train on big[0..64] with fsdp(8), tp(8), micro(1)
place reference on big[96..104] with tp(8)
place scorer with tp(8)
place critic on big[112..128] auto

place auto on big

fn gae(r: f32[B, T], v: f32[B, T], m: Mask[B, T], gamma: f32, lam: f32) -> f32[B, T] {
  scan reverse over T with (next_v = 0.0, last = 0.0) { t ->
    let delta = r[t] + gamma * next_v - v[t]
    next_v = where(m[t], v[t], next_v)
    last = where(m[t], delta + gamma * lam * last, last)
    emit last
  }
}

pipeline train {
  let a = 1
  let bb: f32 = 2
  let ccc = 3 // a trailing comment does not end the run
  let dddd = 4
  f(a)
  let e = 5

  let ffffff = 6
  let g = 7
}
"#,
    );
}

#[test]
fn long_lines_break() {
    snap(
        "long_lines_break",
        r#"
import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean, whiten, gae, value_loss, entropy, kl_k1 }
struct Batch { tokens: Tokens[B, T], mask: Mask[B, T], rewards: f32[B], advantages: f32[B, T], extra: f32[B] }
model policy: CausalLM {
  arch = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 32, rope_theta: 10000.0)
}
pipeline train(steps = 500) {
  loop step in 0..steps {
    let rollout = actor.generate(batch, n: group, max_new: 512, temperature: 0.9, top_p: 0.95, seed: step)
    let reward = shaped_reward(score, kl_k1(old_logp, ref_logp), rollout.mask, rollout.last, beta, other(x, y, z, w, v, u))
    actor.update(rollout, epochs: 1, minibatch: 128, micro: 4, clip_grad: 1.0, accumulate: 8, shuffle: true) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2) + 0.001 * kl_k3(logp, ref_logp), rollout.mask)
    }
    log { reward: mean(reward), kl: token_mean(kl_k3(old_logp, ref_logp), rollout.mask), entropy: mean(ent) }
    every 100 steps { checkpoint policy, critic, reference, scorer, value_head, another_role, and_another }
  }
}
fn wide(a: f32) -> f32 {
  scan forward over T with (first_carried_value = 0.0, second_carried_value = 0.0, third_value = 1.0) { t ->
    emit first_carried_value
  }
}
"#,
    );
}

/// A pipeline's parameters stay on its line when they fit, else go one a line (a recipe's).
#[test]
fn long_pipeline_parameter_lists_break() {
    let short = "pipeline train(steps = 500, group = 16) {\n  log { n: 1.0 }\n}\n";
    assert_eq!(fmt(short), short);
    let long = "pipeline grpo(policy: CausalLM, reference: CausalLM, data: Dataset, reward: Fn, \
                steps = 500, prompts_per_step = 16, group = 16, max_new = 16, \
                minibatch = steps / 4) {\n  log { n: 1.0 }\n}\n";
    assert_eq!(
        fmt(long),
        "pipeline grpo(\n  policy: CausalLM,\n  reference: CausalLM,\n  data: Dataset,\n  \
         reward: Fn,\n  steps = 500,\n  prompts_per_step = 16,\n  group = 16,\n  \
         max_new = 16,\n  minibatch = steps / 4,\n) {\n  log { n: 1.0 }\n}\n"
    );
}

#[test]
fn loop_carries() {
    snap(
        "loop_carries",
        r#"
pipeline ppo(steps = 10, beta0 = 0.1) {
  loop step in 0..steps   with(beta=beta0,n = 0.0,) {
    let kl = mean(x)
    beta = adaptive_kl_beta(beta, kl, target: 6.0, n_steps: 1.0, horizon: 100.0)
    every 5 steps { n = n + 1.0 }
    log { beta: beta, n: n }
  }
}
pipeline wide(steps = 10) {
  loop step in 0..steps with (first_carried_value = 0.0, second_carried_value = 0.0, third_value = 1.0) {
    log { a: first_carried_value }
  }
}
pipeline commented(steps = 10) {
  loop step in 0..steps with (
    beta = 0.1, // the KL coefficient
    n = 0.0,
  ) {
    n = n + 1.0
  }
}
"#,
    );
}

#[test]
fn comments_stay_where_they_are() {
    snap(
        "comments_stay_where_they_are",
        r#"//! Module doc.

// Before the imports.
import std.algo { grpo_advantage, ppo_clip }   // trailing on an import
/// Documents the cluster.
cluster local = cpu(devices: 2) // trailing on an item

model policy: CausalLM { // after the brace
  // before a field
  arch = tiny // trailing on a field
  init = random(seed: 7)
  // at the end of the block
}

fn g(x: f32) -> f32 {
  let y = foo(a, // after a
    b, // after b
    // before c
    c
    // dangling before the paren
  )
  let q = a + // inside a binary expression
    b
  let w = // after the equals sign
    k
  x // on the tail
  // at the end of the body
}

pipeline p {
  // the only thing in the body
}

fn k() { // trailing on the brace
  1
}
// At the end of the file.
"#,
    );
}

#[test]
fn comments_in_awkward_places() {
    snap(
        "comments_in_awkward_places",
        r#"
import std.algo { // c1
  a, b as c // c2
}
place policy // c3
  .train on x[0..2] with dp(2) // c4
place x on y with // c5
  dp(2)
fn f(a: f32, // c6
  b: f32[B, // c7
  T]) -> f32 // c8
{
  every 5 // c9
    steps { checkpoint a }
  let x = a
    // c10
    .b
  let y = foo(a)  // c11
    { p -> p }
  let z = (a // c12
  )
  let w = xs[1 // c13
  ]
  log { // c14
    a: 1 }
  emit scan forward over T { t -> // c15
    t
  }
}
struct S { // c16
  a: f32 }
model m: K { // c17
}
model n: K // c18
  = frozen(m)
let q = 1 // c19
/// doc after
pipeline z() {
  loop i in 0..10 { // c20
  }
}
"#,
    );
}

#[test]
fn tabs_and_crlf() {
    let src = "fn f(x: f32) -> f32 {\r\n\tlet y = x // note\r\n\r\n\r\n\ty\r\n}\r\n";
    assert_eq!(
        fmt(src),
        "fn f(x: f32) -> f32 {\n  let y = x // note\n\n  y\n}\n"
    );
}

#[test]
fn numbers_strings_and_parentheses_as_written() {
    let src = "let a = (1_000 + 3e-4) * 80GiB / ((2))\nlet b = \"a \\\"q\\\" // not a comment\"\n";
    assert_eq!(
        fmt(src),
        "let a = (1_000 + 3e-4) * 80GiB / ((2))\nlet b = \"a \\\"q\\\" // not a comment\"\n"
    );
}

/// `verifier` items and list literals (#24): a list stays on one line when it fits, else one
/// element a line with its comments; a long declaration breaks its arguments like any call;
/// consecutive verifiers may stand together.
#[test]
fn verifiers_and_lists() {
    let src = r#"verifier answer = program( "python3","answer.py" , workers: 2, fields: [ "answer" ,"steps",] )
verifier rm = http("http://127.0.0.1:8000/score", timeout: 30s, on_error: fail, fields: ["answer", "question", "steps"], metrics: ["format"])
verifier commented = program("x", fields: [
  // the reference
  "answer",
])
"#;
    let want = r#"verifier answer = program("python3", "answer.py", workers: 2, fields: ["answer", "steps"])
verifier rm = http(
  "http://127.0.0.1:8000/score",
  timeout: 30s,
  on_error: fail,
  fields: ["answer", "question", "steps"],
  metrics: ["format"],
)
verifier commented = program(
  "x",
  fields: [
    // the reference
    "answer",
  ],
)
"#;
    assert_eq!(fmt(src), want);
    assert_eq!(fmt(want), want, "a fixed point");
}

/// `environment` items (#24 item 4) format like verifiers: one line when the call fits, else one
/// argument a line; consecutive environments stand together, and a verifier after them is apart.
#[test]
fn environments() {
    let src = r#"environment calc = program( "python3","envs/calc.py" , workers: 2, fields: [ "answer" ] )
environment web=http("http://127.0.0.1:8000/step", workers: 4, timeout: 30s, on_error: zero, fields: ["answer", "question"])
verifier answer = program("python3", "answer.py")
"#;
    let want = r#"environment calc = program("python3", "envs/calc.py", workers: 2, fields: ["answer"])
environment web = http(
  "http://127.0.0.1:8000/step",
  workers: 4,
  timeout: 30s,
  on_error: zero,
  fields: ["answer", "question"],
)

verifier answer = program("python3", "answer.py")
"#;
    assert_eq!(fmt(src), want);
    assert_eq!(fmt(want), want, "a fixed point");
}

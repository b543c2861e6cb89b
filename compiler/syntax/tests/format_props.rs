//! Property tests of the formatter: programs built from random fragments, and the examples with
//! random white space and comments inserted, format idempotently and keep their syntax tree
//! (spans aside) and their comments.

use proptest::prelude::*;
use rlc_diagnostics::FileId;
use rlc_syntax::format::{print, verify};

const EXAMPLES: &[&str] = &[
    include_str!("../../../examples/grpo_digits.rl"),
    include_str!("../../../examples/ppo_critic.rl"),
    include_str!("../../../examples/colocated_grpo.rl"),
    include_str!("../../../examples/ppo_70b_split.rl"),
];

const FRAGMENTS: &[&str] = &[
    "import std.algo { gae, whiten as w }",
    "import \"./lib/rewards.rl\" as rewards",
    "import std.models",
    "cluster local = cpu(devices: 2)",
    "cluster big { nodes = 16 devices_per_node = 8 device = h100_80g intra_bandwidth = 450GBps }",
    "let h100 = device(memory: 80GiB, flops: 989TFLOPS, bandwidth: 3.35TBps)",
    "pub let arch_small: Arch = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: sort.vocab, max_len: 32, theta: 1e4)",
    "model policy: CausalLM { arch = arch_small init = random(seed: 1) optim = adamw(lr: 1e-3) }",
    "model reference: CausalLM = frozen(policy)",
    "model critic: ValueModel {}",
    "dataset prompts = jsonl(\"data/prompts.jsonl\", field: \"prompt\")",
    "struct Sample { tokens: Tokens[B, T], score: f32[B] }",
    "struct Wide { tokens: Tokens[B, T], mask: Mask[B, T], rewards: f32[B], advantages: f32[B, T], x: f32[] }",
    "place policy.train on local[0..2] with dp(2), micro(4)",
    "place reference on local[0..1] auto",
    "place critic with tp(8)",
    "place auto on local",
    "/// Documented.\npub fn f(x: f32[B, T], m: Mask[B, T]) -> f32[B] { let y = where(m, x, 0.0) mean(y, over: T) }",
    "fn g(a: f32, b: f32 = 2.0) -> f32 { (a + b) * -a / 2 % 3 - a }",
    "fn cmp(a: i32) -> bool { !(a <= 3) && a != 2 || a >= 10 }",
    "fn e() {}",
    "pub fn gae(r: f32[B, T], v: f32[B, T], m: Mask[B, T], gamma: f32, lam: f32) -> f32[B, T] { scan reverse over T with (next_v = 0.0, last = 0.0) { t -> let delta = r[t] + gamma * next_v - v[t] next_v = where(m[t], v[t], next_v) last = where(m[t], delta + gamma * lam * last, last) emit last } }",
    "pipeline train(steps = 10, group: i64 = 8) { loop step in 0..steps { let r = policy.generate(p, n: group, max_new: 8, temperature: 1.0, top_p: 0.95, seed: step) policy.update(r, epochs: 1) { logp -> token_mean(ppo_clip(logp, old, adv, eps: 0.2) + 0.001 * kl_k3(logp, ref_logp), r.mask) } log { reward: mean(r.reward), kl: token_mean(kl_k3(old_logp, ref_logp), r.mask), entropy: mean(entropy_of_the_policy) } every 5 steps { checkpoint policy } every 1 step {} } }",
    "pipeline ppo(steps = 10) { loop step in 0..steps with (beta = 0.1, n = 0) { let kl = mean(x) beta = adaptive_kl_beta(beta, kl, target: 6.0, n_steps: 1.0, horizon: 100.0) every 5 steps { n = n + 1 } log { beta: beta } } }",
    "pipeline empty { }",
    "fn typed(a: f32 = 1.0, b: Tokens[B, 8]) -> f32 { let a: f32 = 1 let bb: f32[B] = 2 let c = 3 x = 1 yy = 2 c }",
    "let k1: f32 = 1\nlet k22 = 2\npub let k333: Device = device(memory: 80GiB)",
    "fn long_binary(a: f32) -> f32 { aaaaaaaaaaaaaaaaaaaa * bbbbbbbbbbbbbbbbbbbbbbbbb + cccccccccccccccccccccccc * dddddddddddddddddddd - eeeeeeeeeeeeeeeeeeeeeeeee(f, g) }",
    "fn nested() -> f32 { outer(inner(aaaaaaaaaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb), other(ccccccccccccccccccccccccccccccccc, { k: v }), -x) }",
];

/// What may be inserted where the source has white space.
const INSERTIONS: &[&str] = &[
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "\n\n\n",
    " // note\n",
    "\n// own line\n",
    "\n/// doc\n",
    "\n\n// after a blank\n\n",
    "//! module\n",
];

/// Offsets between two tokens (outside strings and comments): inserting white space or a
/// comment that ends in a new line there keeps the tokens as they are.
fn gaps(src: &str) -> Vec<usize> {
    let b = src.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b' ' | b'\t' | b'\r' | b'\n' => {
                out.push(i);
                i += 1;
                continue;
            }
            c if c.is_ascii_digit() => {
                // A number: digits, a fraction, an exponent and a unit are one token.
                while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                    i += 1;
                }
                if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                        i += 1;
                    }
                }
                if matches!(b.get(i), Some(b'e' | b'E')) {
                    let mut j = i + 1;
                    if matches!(b.get(j), Some(b'+' | b'-')) {
                        j += 1;
                    }
                    if b.get(j).is_some_and(u8::is_ascii_digit) {
                        i = j;
                        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                            i += 1;
                        }
                    }
                }
                while i < b.len() && word(b[i]) {
                    i += 1;
                }
            }
            c if word(c) => {
                while i < b.len() && word(b[i]) {
                    i += 1;
                }
            }
            _ => {
                let two = &src[i..(i + 2).min(src.len())];
                i += if ["..", "->", "==", "!=", "<=", ">=", "&&", "||"].contains(&two) {
                    2
                } else {
                    1
                };
            }
        }
        if i > start && i < b.len() {
            out.push(i);
        }
    }
    out
}

fn mutate(src: &str, edits: &[(prop::sample::Index, usize)]) -> String {
    let gaps = gaps(src);
    if gaps.is_empty() {
        return src.to_string();
    }
    let mut at: Vec<(usize, &str)> = edits
        .iter()
        .map(|(i, k)| (gaps[i.index(gaps.len())], INSERTIONS[*k]))
        .collect();
    at.sort_by_key(|&(pos, _)| std::cmp::Reverse(pos));
    let mut out = src.to_string();
    for (pos, text) in at {
        out.insert_str(pos, text);
    }
    out
}

/// Formats `src` if it parses, and checks the output: same tree, same comments, idempotent.
/// (`format_source` is `parse`, `print` and `verify::same_meaning`; calling the parts saves the
/// parses that dominate the time of a case.)
fn check(src: &str) -> Result<(), TestCaseError> {
    let parsed = rlc_syntax::parse(FileId(0), src);
    if parsed.diagnostics.iter().any(|d| d.is_error()) {
        // An insertion may make the text invalid (a `//!` glued to code, say): nothing to test.
        return Ok(());
    }
    let out = print(src, &parsed.module, &parsed.comments);
    let again = rlc_syntax::parse(FileId(0), &out);
    prop_assert!(
        again.diagnostics.iter().all(|d| !d.is_error()),
        "the output does not parse:\n{}\n---\n{}",
        src,
        out
    );
    prop_assert_eq!(
        verify::comment_multiset(&parsed.comments),
        verify::comment_multiset(&again.comments)
    );
    prop_assert_eq!(
        verify::without_spans(&parsed.module),
        verify::without_spans(&again.module),
        "tree changed:\n{}\n---\n{}",
        src,
        out
    );
    let twice = print(&out, &again.module, &again.comments);
    prop_assert_eq!(&twice, &out, "not idempotent; input:\n{}", src);
    Ok(())
}

fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, usize)>> {
    prop::collection::vec((any::<prop::sample::Index>(), 0..INSERTIONS.len()), 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn fragments_format_stably(
        picks in prop::collection::vec((0..FRAGMENTS.len(), 0..4usize), 1..7),
        edits in edits(),
    ) {
        let separators = ["\n", "\n\n", " ", "\n\n\n\n"];
        let mut src = String::new();
        for (fragment, sep) in picks {
            src.push_str(FRAGMENTS[fragment]);
            src.push_str(separators[sep]);
        }
        check(&mutate(&src, &edits))?;
    }

    #[test]
    fn examples_with_noise_format_stably(example in 0..EXAMPLES.len(), edits in edits()) {
        check(&mutate(EXAMPLES[example], &edits))?;
    }
}

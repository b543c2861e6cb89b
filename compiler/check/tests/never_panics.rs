//! Invariant 1: parsing and checking never panic, on any input. Random token soup and random
//! mutations of the examples and std files go through the parser and the whole checker.

use proptest::prelude::*;
use rlc_diagnostics::{Files, Severity};
use std::path::Path;

/// Serves nothing: imports of files fail with a diagnostic, as they should.
struct NoFiles;

impl rlc_check::SourceLoader for NoFiles {
    fn read(&self, _: &str) -> Result<String, String> {
        Err("not found".into())
    }
}

fn check(src: &str) {
    let parsed = rlc_syntax::parse(rlc_diagnostics::FileId(0), src);
    // Every diagnostic has a primary label inside the text it was reported on.
    for d in &parsed.diagnostics {
        assert!(
            d.labels[0].span.end as usize <= src.len(),
            "label past the end: {d:?}"
        );
    }
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, "fuzz.rl", src.to_string());
    for d in checked
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
    {
        assert!(!d.message.is_empty());
    }
}

/// Tokens besides the keywords (which come from the grammar's list).
const TOKENS: &[&str] = &[
    "std", ".", "algo", "{", "}", "(", ")", "[", "]", ",", ":", "=", "==", "->", "..", "+", "-",
    "*", "/", "%", "<", ">=", "&&", "||", "!", "steps", "reverse", "over", "dp", "tp", "fsdp",
    "micro", "policy", "CausalLM", "x", "T", "B", "f32", "Mask", "0", "2", "8", "3e-4", "80GiB",
    "\"s\"", "\"", "//c\n", "\n", " ", ";", "#", "@", "μ", "where", "mean", "rollout", "generate",
    "update", "logp", "cpu", "devices", "local", "tiny_gpt", "arch", "frozen",
];

fn vocabulary() -> Vec<&'static str> {
    rlc_syntax::ast::KEYWORDS
        .iter()
        .chain(TOKENS)
        .copied()
        .collect()
}

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vocabulary()), 0..120).prop_map(|t| t.join(" "))
}

fn corpus() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = Vec::new();
    for dir in ["examples", "stdlib/std", "stdlib/std/task"] {
        let mut paths: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        paths.sort();
        for p in paths
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "rl"))
        {
            out.push(std::fs::read_to_string(p).unwrap());
        }
    }
    out
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize, usize),
    Insert(usize, &'static str),
    DuplicateLine(usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), prop::sample::select(vocabulary()))
            .prop_map(|(a, t)| Mutation::Insert(a, t)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn boundary(s: &str, at: usize) -> usize {
    let mut at = at % (s.len() + 1);
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(mut s: String, m: &Mutation) -> String {
    match *m {
        Mutation::Delete(a, n) => {
            let a = boundary(&s, a);
            let b = boundary(&s, (a + n).min(s.len()));
            if b > a {
                s.replace_range(a..b, "");
            }
        }
        Mutation::Insert(a, t) => {
            let a = boundary(&s, a);
            s.insert_str(a, t);
        }
        Mutation::DuplicateLine(i) => {
            let lines: Vec<&str> = s.lines().collect();
            if !lines.is_empty() {
                let i = i % lines.len();
                let mut out: Vec<&str> = lines[..=i].to_vec();
                out.push(lines[i]);
                out.extend(&lines[i + 1..]);
                s = out.join("\n");
            }
        }
        Mutation::Truncate(a) => {
            let a = boundary(&s, a);
            s.truncate(a);
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn token_soup_never_panics(src in soup()) {
        check(&src);
    }

    #[test]
    fn mutated_programs_never_panic(which in any::<usize>(), muts in prop::collection::vec(mutation(), 1..4)) {
        let corpus = corpus();
        let mut src = corpus[which % corpus.len()].clone();
        for m in &muts {
            src = apply(src, m);
        }
        check(&src);
    }
}

#[test]
fn pathological_inputs_do_not_panic() {
    for src in [
        "",
        "(".repeat(10_000).as_str(),
        &"-".repeat(5_000),
        &format!("fn f(x: f32[B]) -> f32[B] {{ {} x }}", "!".repeat(3_000)),
        &format!("let a = {}1", "1 + ".repeat(20_000)),
        "\u{feff}model",
        "\"unterminated",
        "fn f() -> f32 { scan reverse over T { t -> emit 1.0 } }",
        "let a = b\nlet b = a",
        // A word right after a multi-byte character (found by a mutation run).
        "fn f(x: f32[B]) -> f32[B] //~\u{e9}E01",
        "fn f(x: f32[B]) -> f32[B] \u{e9}E01",
        "let \u{e9}if = 1",
        "let a = \u{e9}1.2.3",
    ] {
        check(src);
    }
}

//! The editor grammars (editors/) against grammar/rl.pest. Their word lists are written by
//! editors/gen-keywords.py from rl.pest; these tests derive the lists again, on their own, and
//! fail when rl.pest, the AST's lists, editors/words.json or an editor file disagree, so that
//! a change to rl.pest without `python3 editors/gen-keywords.py` fails CI.

use rlc_diagnostics::FileId;
use rlc_syntax::ast::{CONTEXTUAL_KEYWORDS, ITEM_KEYWORDS, KEYWORDS, LayoutKind, Unit};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every editor file that highlights keywords (grammar.js takes its lists from words.json).
const EDITOR_FILES: &[&str] = &[
    "editors/words.json",
    "editors/vscode/syntaxes/rl.tmLanguage.json",
    "editors/vim/syntax/rl.vim",
    "editors/tree-sitter-rl/queries/highlights.scm",
];

// ---------------------------------------------------------------------------------------------
// Reading rl.pest: just enough of its syntax for rule bodies and string literals.

struct Pest {
    text: String,
    rules: BTreeMap<String, String>,
}

impl Pest {
    fn load() -> Pest {
        let text = read("grammar/rl.pest");
        let code: String = text.lines().map(|l| strip_comment(l) + "\n").collect();
        let mut rules = BTreeMap::new();
        for line_start in std::iter::once(0).chain(code.match_indices('\n').map(|(i, _)| i + 1)) {
            let line = &code[line_start..];
            let name: String = line
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let rest = line[name.len()..].trim_start();
            if name.is_empty() || !rest.starts_with('=') {
                continue;
            }
            let open = line_start + line.find('{').expect("a rule body");
            rules.insert(name, body(&code, open));
        }
        Pest { text, rules }
    }

    fn rule(&self, name: &str) -> &str {
        self.rules
            .get(name)
            .unwrap_or_else(|| panic!("rl.pest has no rule `{name}`"))
    }

    fn literals(&self, name: &str) -> Vec<String> {
        literals(self.rule(name))
    }

    /// The first literal of each `*_op` rule that the rule `alternatives` names.
    fn operators(&self, alternatives: &str) -> Vec<String> {
        words(self.rule(alternatives))
            .into_iter()
            .filter(|w| w.ends_with("_op"))
            .map(|op| {
                first_literal(self.rule(&op))
                    .unwrap_or_else(|| panic!("`{op}` starts with no literal"))
            })
            .collect()
    }

    /// The backquoted words of the comment that lists the contextual keywords, less the
    /// `(in `scan`)` notes that say where each is one.
    fn contextual_comment(&self) -> Vec<String> {
        let mut lines = self
            .text
            .lines()
            .skip_while(|l| !l.starts_with("// Contextual keywords"));
        lines
            .next()
            .expect("rl.pest has no contextual keyword comment");
        let mut out = Vec::new();
        for line in lines.take_while(|l| l.starts_with("//")) {
            let mut rest = line.to_string();
            while let Some(at) = rest.find("(in ") {
                let end = at + rest[at..].find(')').expect("a closed `(in …)`");
                rest.replace_range(at..=end, "");
            }
            out.extend(rest.split('`').skip(1).step_by(2).map(str::to_string));
        }
        out
    }
}

fn strip_comment(line: &str) -> String {
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => i = skip_string(b, i),
            b'/' if b.get(i + 1) == Some(&b'/') => return line[..i].to_string(),
            _ => i += 1,
        }
    }
    line.to_string()
}

/// The index after the string literal that starts at `i`.
fn skip_string(b: &[u8], mut i: usize) -> usize {
    i += 1;
    while b[i] != b'"' {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    i + 1
}

/// The text between the `{` at `open` and its `}`.
fn body(code: &str, open: usize) -> String {
    let b = code.as_bytes();
    let (mut depth, mut i) = (1, open + 1);
    while depth > 0 {
        match b[i] {
            b'"' => {
                i = skip_string(b, i);
                continue;
            }
            b'{' => depth += 1,
            b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    code[open + 1..i - 1].to_string()
}

fn literals(body: &str) -> Vec<String> {
    let b = body.as_bytes();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < b.len() {
        if b[i] == b'"' {
            let end = skip_string(b, i);
            out.push(
                body[i + 1..end - 1]
                    .replace("\\\"", "\"")
                    .replace("\\\\", "\\"),
            );
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

fn first_literal(body: &str) -> Option<String> {
    body.trim_start()
        .starts_with('"')
        .then(|| literals(body).remove(0))
}

fn words(body: &str) -> Vec<String> {
    body.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

fn strings(xs: &[&str]) -> Vec<String> {
    xs.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// The tests

/// The lists editors/words.json must hold, derived from rl.pest (and, for units, the AST).
fn derived_words(pest: &Pest) -> Value {
    let keywords = pest.literals("keyword");
    let items: Vec<String> = pest
        .literals("item_start")
        .into_iter()
        .filter(|w| keywords.contains(w))
        .collect();
    let booleans = pest.literals("bool_lit");
    // A keyword that starts a statement or an expression is control flow; `let` stays an item.
    let starters: Vec<String> = pest
        .rules
        .iter()
        .filter(|(name, _)| name.ends_with("_stmt") || name.ends_with("_expr"))
        .filter_map(|(_, body)| first_literal(body))
        .collect();
    let control: Vec<&String> = keywords
        .iter()
        .filter(|w| starters.contains(w) && !items.contains(w))
        .collect();
    let other: Vec<&String> = keywords
        .iter()
        .filter(|w| !items.contains(w) && !control.contains(w) && !booleans.contains(w))
        .collect();
    let units: Vec<&str> = Unit::ALL.iter().map(|u| u.as_str()).collect();
    json!({
        "keywords": keywords,
        "item_keywords": items,
        "control_keywords": control,
        "other_keywords": other,
        "booleans": booleans,
        "contextual_keywords": pest.contextual_comment(),
        "scan_directions": pest.literals("scan_dir"),
        "scan_over": pest.literals("over_kw"),
        "every_steps": pest.literals("steps_kw"),
        "layouts": pest.literals("layout_kind"),
        "binary_operators": pest.operators("infix"),
        "prefix_operators": pest.operators("prefix"),
        "arrow": "->",
        "units": units,
    })
}

#[test]
fn pest_word_lists_match_the_ast() {
    let pest = Pest::load();
    assert_eq!(
        pest.literals("keyword"),
        strings(KEYWORDS),
        "rl.pest `keyword` vs ast::KEYWORDS"
    );
    let items: BTreeSet<String> = pest.literals("item_start").into_iter().collect();
    assert_eq!(
        items,
        strings(ITEM_KEYWORDS).into_iter().collect(),
        "`item_start` vs ITEM_KEYWORDS"
    );
    assert_eq!(
        pest.contextual_comment(),
        strings(CONTEXTUAL_KEYWORDS),
        "comment vs CONTEXTUAL_KEYWORDS"
    );
    let mut by_rule: Vec<String> = ["scan_dir", "over_kw", "steps_kw", "layout_kind"]
        .iter()
        .flat_map(|r| pest.literals(r))
        .collect();
    by_rule.sort();
    let mut contextual = strings(CONTEXTUAL_KEYWORDS);
    contextual.sort();
    assert_eq!(
        by_rule, contextual,
        "the contextual keyword rules vs CONTEXTUAL_KEYWORDS"
    );
    let layouts: Vec<&str> = LayoutKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        pest.literals("layout_kind"),
        strings(&layouts),
        "`layout_kind` vs LayoutKind"
    );
    assert!(pest.text.contains("\"->\""), "rl.pest lost `->`");
}

#[test]
fn words_json_is_derived_from_pest() {
    let expected = derived_words(&Pest::load());
    let actual: Value = serde_json::from_str(&read("editors/words.json")).unwrap();
    for (key, want) in expected.as_object().unwrap() {
        assert_eq!(
            actual.get(key),
            Some(want),
            "editors/words.json `{key}` differs from rl.pest: run `python3 editors/gen-keywords.py`"
        );
    }
}

/// Byte for byte: the generated parts of each editor file are what the generator writes now.
#[test]
fn editor_files_are_regenerated() {
    let out = Command::new("python3")
        .arg(root().join("editors/gen-keywords.py"))
        .arg("--check")
        .output()
        .expect("python3 runs editors/gen-keywords.py; install python3");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_word_is_in_every_editor_grammar() {
    let pest = Pest::load();
    let mut required = strings(KEYWORDS);
    required.extend(strings(CONTEXTUAL_KEYWORDS));
    required.extend(Unit::ALL.iter().map(|u| u.as_str().to_string()));
    for file in EDITOR_FILES {
        let text = read(file);
        let present: BTreeSet<String> = words(&text).into_iter().collect();
        let missing: Vec<&String> = required.iter().filter(|w| !present.contains(*w)).collect();
        assert!(missing.is_empty(), "{file} lacks {missing:?}");
    }
    // Operators are checked where they are written plainly; the TextMate and Vim files escape
    // them, and the snapshot tests show they are highlighted.
    let mut ops = pest.operators("infix");
    ops.extend(pest.operators("prefix"));
    for file in [
        "editors/words.json",
        "editors/tree-sitter-rl/queries/highlights.scm",
    ] {
        let text = read(file);
        for op in &ops {
            assert!(
                text.contains(&format!("\"{op}\"")),
                "{file} lacks the operator `{op}`"
            );
        }
    }
    let grammar_js = read("editors/tree-sitter-rl/grammar.js");
    assert!(
        grammar_js.contains("require('../words.json')"),
        "grammar.js must take its lists from words.json"
    );
}

/// The fixture the editor tests parse must stay valid rl and use every word.
#[test]
fn fixture_parses_and_covers_every_word() {
    let src = read("editors/test/constructs.rl");
    let parsed = rlc_syntax::parse(FileId(0), &src);
    assert!(
        parsed.diagnostics.is_empty(),
        "editors/test/constructs.rl: {:#?}",
        parsed.diagnostics
    );
    let present: BTreeSet<String> = words(&src).into_iter().collect();
    let mut required = strings(KEYWORDS);
    required.extend(strings(CONTEXTUAL_KEYWORDS));
    let missing: Vec<&String> = required.iter().filter(|w| !present.contains(*w)).collect();
    assert!(
        missing.is_empty(),
        "editors/test/constructs.rl does not use {missing:?}"
    );
    let pest = Pest::load();
    let mut ops = pest.operators("infix");
    ops.extend(pest.operators("prefix"));
    for op in ops {
        assert!(
            src.contains(&op),
            "editors/test/constructs.rl does not use `{op}`"
        );
    }
    for unit in Unit::ALL {
        let written = (0..10).any(|d| src.contains(&format!("{d}{}", unit.as_str())));
        assert!(
            written,
            "editors/test/constructs.rl has no number in {}",
            unit.as_str()
        );
    }
}

/// The type names that highlight as a recipe's parameter types (editors/words.json `role_kinds`
/// and `generic_types`) are the checker's: `GenericParam::from_type` takes each, and the
/// checker's own tables (`GenericParam::from_type`, `RoleKind::from_name`) name no other.
#[test]
fn generic_parameter_types_are_the_checkers() {
    let words: Value = serde_json::from_str(&read("editors/words.json")).unwrap();
    let listed: BTreeSet<String> = ["role_kinds", "generic_types"]
        .iter()
        .flat_map(|k| words[k].as_array().unwrap())
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    for name in &listed {
        let parsed = rlc_syntax::parse(FileId(0), &format!("pipeline p(x: {name}) {{}}\n"));
        let rlc_syntax::ast::ItemKind::Pipeline(p) = &parsed.module.items[0].kind else {
            panic!("not a pipeline");
        };
        let ty = p.params[0].ty.as_ref().unwrap();
        assert!(
            rlc_check::recipes::GenericParam::from_type(ty).is_some(),
            "editors/words.json lists `{name}`, which the checker does not take as a generic parameter"
        );
    }
    // The string literals of the function `func` after `after` in `file`.
    let table = |file: &str, after: &str, func: &str| -> Vec<String> {
        let src = read(file);
        let at = src
            .find(after)
            .unwrap_or_else(|| panic!("{file} lost `{after}`"));
        let at = at
            + src[at..]
                .find(func)
                .unwrap_or_else(|| panic!("{file} lost `{func}`"));
        let body = &src[at..];
        literals(&body[..body.find("\n    }\n").unwrap()])
    };
    let mut checker = table(
        "compiler/check/src/eval/recipes.rs",
        "impl GenericParam",
        "pub fn from_type(",
    );
    let roles = table(
        "compiler/check/src/program.rs",
        "impl RoleKind",
        "pub fn as_str(",
    );
    assert!(!roles.is_empty(), "RoleKind::as_str names no kind");
    checker.extend(roles);
    for name in checker {
        assert!(
            listed.contains(&name),
            "the checker takes `{name}` as a generic parameter's type: add it to editors/gen-keywords.py"
        );
    }
}

//! The renderers take any spans on any text: multi-byte characters, tabs, CRLF, empty files,
//! spans that are reversed, past the end or inside a character. They never panic, and the same
//! input gives the same output.

use proptest::prelude::*;
use rlc_diagnostics::render::{HumanOptions, human, json, sarif};
use rlc_diagnostics::{CODES, Diagnostic, FileId, Files, Label, Span};

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("x"),
            Just(" "),
            Just("\n"),
            Just("\r\n"),
            Just("\t"),
            Just("μ"),
            Just("日本"),
            Just("{"),
            Just("🦀")
        ],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

fn label() -> impl Strategy<Value = (u32, u32, u32, String, bool)> {
    (
        0u32..3,
        0u32..200,
        0u32..200,
        prop_oneof![
            Just(String::new()),
            Just("here".to_string()),
            Just("two\nlines".to_string())
        ],
        any::<bool>(),
    )
}

proptest! {
    #[test]
    fn renderers_never_panic(a in text(), b in text(), labels in proptest::collection::vec(label(), 1..4), code in 0usize..CODES.len(), width in 0usize..120) {
        let mut files = Files::new();
        files.add("a.rl", a);
        files.add("dir/b c.rl", b);
        let info = &CODES[code];
        let diag = Diagnostic {
            code: info.code,
            severity: info.severity,
            message: "message".into(),
            // File 2 does not exist; spans may be reversed or out of range.
            labels: labels.into_iter().enumerate().map(|(i, (file, s, e, message, primary))| Label {
                file: FileId(file),
                span: Span { start: s, end: e },
                message,
                primary: primary || i == 0,
            }).collect(),
            help: Some("help".into()),
            notes: vec!["a\n  b".into()],
            fixes: Vec::new(),
        };
        let diags = [diag.clone(), diag];
        for color in [false, true] {
            let opts = HumanOptions { color, width };
            prop_assert_eq!(human(&diags, &files, &opts), human(&diags, &files, &opts));
        }
        prop_assert_eq!(json(&diags, &files), json(&diags, &files));
        prop_assert_eq!(sarif(&diags, &files), sarif(&diags, &files));
    }
}

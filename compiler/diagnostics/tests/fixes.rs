//! Fixes travel as data: `--format json` lists each edit with its location and text, SARIF as
//! `fixes[].artifactChanges[].replacements[]`; a diagnostic without fixes has no `fixes` key.

use rlc_diagnostics::render::{json, sarif};
use rlc_diagnostics::{Code, Diagnostic, Edit, Files, Span};
use serde_json::Value;

fn example() -> (Files, Vec<Diagnostic>) {
    let mut files = Files::new();
    let main = files.add("main.rl", "let a = msk\nlet b = 1\n".to_string());
    let fixed = Diagnostic::new(
        Code::UndefinedName,
        "cannot find `msk`",
        main,
        Span::new(8, 11),
    )
    .fix(
        "rename to `mask`",
        vec![Edit {
            file: main,
            span: Span::new(8, 11),
            text: "mask".into(),
        }],
    );
    let plain = Diagnostic::new(
        Code::UndefinedName,
        "cannot find `b`",
        main,
        Span::new(16, 17),
    );
    (files, vec![fixed, plain])
}

#[test]
fn json_lists_fixes_with_their_edits() {
    let (files, diags) = example();
    let out = json(&diags, &files);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fix = &lines[0]["fixes"][0];
    assert_eq!(fix["message"], "rename to `mask`");
    let edit = &fix["edits"][0];
    assert_eq!(edit["file"], "main.rl");
    assert_eq!(edit["range"]["start"], 8);
    assert_eq!(edit["range"]["end"], 11);
    assert_eq!(edit["start"]["line"], 1);
    assert_eq!(edit["start"]["column"], 9);
    assert_eq!(edit["text"], "mask");
    assert!(lines[1].get("fixes").is_none(), "{}", lines[1]);
}

#[test]
fn sarif_results_carry_fixes() {
    let (files, diags) = example();
    let log: Value = serde_json::from_str(&sarif(&diags, &files)).unwrap();
    let results = &log["runs"][0]["results"];
    let fix = &results[0]["fixes"][0];
    assert_eq!(fix["description"]["text"], "rename to `mask`");
    let change = &fix["artifactChanges"][0];
    assert_eq!(change["artifactLocation"]["uri"], "main.rl");
    let r = &change["replacements"][0];
    assert_eq!(r["deletedRegion"]["charOffset"], 8);
    assert_eq!(r["deletedRegion"]["charLength"], 3);
    assert_eq!(r["insertedContent"]["text"], "mask");
    assert!(results[1].get("fixes").is_none(), "{}", results[1]);
}

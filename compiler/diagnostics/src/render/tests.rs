use super::*;
use crate::{Code, Span};

const MAIN: &str = "import \"./lib.rl\" as lib
model policy: CausalLM {
  desc = \"μP scaling\", lr: 3e-4
}
place policy.train on lib.local[0..2] with zero3(2)
fn f() {
  1.0";

const LIB: &str = "pub cluster local = cpu(devices: 2)
pub fn g() {
  2.0
";

/// The span of the first `needle` in `text` (after byte `from`).
fn find(text: &str, needle: &str, from: usize) -> Span {
    let start = from + text[from..].find(needle).expect("needle in text");
    Span::new(start, start + needle.len())
}

fn fixture() -> (Vec<Diagnostic>, Files) {
    let mut files = Files::new();
    let main = files.add("src/main.rl", MAIN);
    let lib = files.add("src/lib.rl", LIB);
    let empty = files.add("src/empty.rl", "");
    let lr = MAIN.find("lr:").unwrap();
    let diags = vec![
        Diagnostic::new(Code::YamlStyleField, "`key: value` where the language wants `key = value`", main, find(MAIN, ":", lr))
            .primary_label("expected `=`")
            .help("write `lr = 3e-4`"),
        Diagnostic::new(Code::UnknownLayout, "unknown parallel layout `zero3`", main, find(MAIN, "zero3", 0))
            .primary_label("not a layout")
            .label(lib, find(LIB, "cpu(devices: 2)", 0), "the cluster `local` is declared here")
            .note("the layouts are:\n  dp(n)    data parallel\n  fsdp(n)  fully sharded data parallel (ZeRO-3)\n  tp(n)    tensor parallel")
            .help("ZeRO-3 is `fsdp(n)`: write `fsdp(2)`, which shards parameters, gradients and optimizer state over the 2 devices of the range"),
        Diagnostic::new(Code::UnclosedDelimiter, "unclosed delimiter", main, Span::point(MAIN.len()))
            .primary_label("expected `}` here")
            .label(main, find(MAIN, "{", MAIN.find("fn f").unwrap()), "this `{` is never closed"),
        Diagnostic::new(Code::UnclosedDelimiter, "unclosed delimiter", lib, Span::point(LIB.len()))
            .primary_label("expected `}` here")
            .label(lib, find(LIB, "{", 0), "this `{` is never closed"),
        Diagnostic::new(Code::EmptyFile, "`src/empty.rl` declares nothing", empty, Span::point(0)),
    ];
    (diags, files)
}

#[test]
fn human_plain() {
    let (diags, files) = fixture();
    let out = human(
        &diags,
        &files,
        &HumanOptions {
            color: false,
            width: 80,
        },
    );
    insta::assert_snapshot!("human", out);
}

#[test]
fn human_colour_is_ansi_and_deterministic() {
    let (diags, files) = fixture();
    let opts = HumanOptions {
        color: true,
        width: 80,
    };
    let out = human(&diags, &files, &opts);
    assert!(out.contains("\x1b["), "colour output has ANSI escapes");
    assert!(!out.contains("\x1b]8;"), "no hyperlinks");
    assert_eq!(out, human(&diags, &files, &opts));
}

#[test]
fn human_points_at_the_right_character_after_non_ascii() {
    let (diags, files) = fixture();
    let out = human(&diags[..1], &files, &HumanOptions::default());
    // The header names the character column of `:`, not its byte column.
    let col = MAIN.lines().nth(2).unwrap().find("lr:").unwrap() + 2;
    let chars = MAIN.lines().nth(2).unwrap()[..col].chars().count();
    assert!(
        out.contains(&format!("[src/main.rl:3:{}]", chars + 1)),
        "{out}"
    );
    // The marker sits under the `:` (the source line and the marker line share a gutter).
    let lines: Vec<&str> = out.lines().collect();
    let src = lines.iter().position(|l| l.contains("lr: 3e-4")).unwrap();
    let marker = lines[src + 1];
    let source_col = lines[src].chars().position(|c| c == ':').unwrap();
    assert_eq!(
        marker.chars().position(|c| c == '┬'),
        Some(source_col),
        "{out}"
    );
}

#[test]
fn human_shows_labels_in_other_files_under_their_names() {
    let (diags, files) = fixture();
    let out = human(&diags[1..2], &files, &HumanOptions::default());
    assert!(out.contains("[src/main.rl:5:44]"), "{out}");
    assert!(out.contains("[src/lib.rl:1:21]"), "{out}");
    assert!(
        out.contains("the cluster `local` is declared here"),
        "{out}"
    );
}

#[test]
fn human_renders_points_at_end_of_file() {
    let (diags, files) = fixture();
    for d in &diags[2..4] {
        let out = human(std::slice::from_ref(d), &files, &HumanOptions::default());
        assert!(out.contains("expected `}` here"), "{out}");
        assert!(out.contains('▲'), "{out}");
    }
}

#[test]
fn human_with_no_labels_or_unknown_files_does_not_panic() {
    let (_, files) = fixture();
    let mut d = Diagnostic::new(
        Code::EmptyFile,
        "nothing",
        crate::FileId(9),
        Span::new(5, 900),
    );
    let out = human(std::slice::from_ref(&d), &files, &HumanOptions::default());
    assert_eq!(out, "warning[W0101]: nothing\n");
    d.labels.clear();
    assert_eq!(json(std::slice::from_ref(&d), &files).lines().count(), 1);
    let _ = sarif(std::slice::from_ref(&d), &files);
    // Spans past the end of a file are clamped.
    let d = Diagnostic::new(Code::EmptyFile, "far", crate::FileId(0), Span::new(5, 900));
    assert!(human(&[d], &files, &HumanOptions::default()).contains("src/main.rl:1:6"));
}

#[test]
fn json_lines() {
    let (diags, files) = fixture();
    let out = json(&diags, &files);
    assert_eq!(out.lines().count(), diags.len());
    for line in out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
        assert!(v.is_object());
    }
    insta::assert_snapshot!("json", out);
}

#[test]
fn json_keys_are_in_the_documented_order() {
    let (diags, files) = fixture();
    let out = json(&diags[..1], &files);
    let keys = [
        "file", "range", "start", "end", "code", "severity", "message", "labels", "help", "notes",
    ];
    let positions: Vec<usize> = keys
        .iter()
        .map(|k| {
            out.find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k} in {out}"))
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{out}");
}

#[test]
fn sarif_log() {
    let (diags, files) = fixture();
    // The rules' full descriptions come from the explain pages, which have tests of their own.
    let mut out = sarif(&diags, &files);
    for info in crate::CODES {
        let text = serde_json::to_string(&first_paragraph(info.explain)).unwrap();
        out = out.replace(
            &text,
            &format!("\"<first paragraph of explain/{}.md>\"", info.id),
        );
    }
    insta::assert_snapshot!("sarif", out);
}

#[test]
fn sarif_parses_with_the_required_fields() {
    let (diags, files) = fixture();
    let out = sarif(&diags, &files);
    assert_eq!(out, sarif(&diags, &files));
    let v: serde_json::Value = serde_json::from_str(&out).expect("SARIF is JSON");
    assert!(v["$schema"].as_str().unwrap().contains("sarif"));
    assert_eq!(v["version"], "2.1.0");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    let driver = &runs[0]["tool"]["driver"];
    assert_eq!(driver["name"], "rlc");
    let rules = driver["rules"].as_array().unwrap();
    let ids: Vec<&str> = rules.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["E0102", "E0103", "E0119", "W0101"]);
    for rule in rules {
        assert!(
            !rule["shortDescription"]["text"]
                .as_str()
                .unwrap()
                .is_empty()
        );
        let info = Code::parse(rule["id"].as_str().unwrap()).unwrap().info();
        assert_eq!(rule["shortDescription"]["text"], info.title);
        assert_eq!(
            rule["fullDescription"]["text"],
            first_paragraph(info.explain).as_str()
        );
    }
    let results = runs[0]["results"].as_array().unwrap();
    assert_eq!(results.len(), diags.len());
    for (r, d) in results.iter().zip(&diags) {
        assert_eq!(r["ruleId"], d.code.as_str());
        assert_eq!(
            ids[r["ruleIndex"].as_u64().unwrap() as usize],
            d.code.as_str()
        );
        assert_eq!(r["level"], d.severity.as_str());
        assert_eq!(r["message"]["text"], d.message.as_str());
        let region = &r["locations"][0]["physicalLocation"]["region"];
        for key in [
            "startLine",
            "startColumn",
            "endLine",
            "endColumn",
            "charOffset",
            "charLength",
        ] {
            assert!(region[key].is_u64(), "{key} in {region}");
        }
    }
    // The secondary label in the other file is a related location there.
    let related = &results[1]["relatedLocations"][0]["physicalLocation"];
    assert_eq!(related["artifactLocation"]["uri"], "src/lib.rl");
    // Character offsets count `μ` as one.
    let region = &results[0]["locations"][0]["physicalLocation"]["region"];
    let offset = MAIN.find("lr:").unwrap() + 2;
    assert_eq!(
        region["charOffset"].as_u64().unwrap() as usize,
        MAIN[..offset].chars().count()
    );
    assert_eq!(region["charLength"], 1);
}

#[test]
fn summary_counts_errors_and_warnings() {
    let (diags, _) = fixture();
    assert_eq!(
        summary(&diags).as_deref(),
        Some("error: 4 errors and 1 warning emitted")
    );
    assert_eq!(
        summary(&diags[4..]).as_deref(),
        Some("warning: 1 warning emitted")
    );
    assert_eq!(
        summary(&diags[..1]).as_deref(),
        Some("error: 1 error emitted")
    );
    assert_eq!(summary(&[]), None);
}

#[test]
fn first_paragraph_of_a_page() {
    let page = "# E0000: title\n\nThe first\nparagraph.\n\nThe second.\n\n## Wrong\n";
    assert_eq!(first_paragraph(page), "The first paragraph.");
    for info in crate::CODES {
        assert!(
            !first_paragraph(info.explain).is_empty(),
            "{} has no first paragraph",
            info.id
        );
    }
}

/// A file whose line 2 is `{` at column 5, `width` columns of `x`, then `@`, and line 3 is long
/// too: with the spans of the `{` and the `@`.
fn long_line(width: usize) -> (Files, Span, Span, Span) {
    let text = format!(
        "model m {{\n    {{{}@ tail\n{}\n}}\n",
        "x".repeat(width),
        "y".repeat(width)
    );
    let open = find(&text, "{", 10);
    let at = find(&text, "@", 0);
    let third = find(&text, "yyy", 0);
    let mut files = Files::new();
    files.add("long.rl", text);
    (files, open, at, third)
}

#[test]
fn human_clips_long_lines_and_keeps_the_real_column() {
    for width in [70_000, 1_000_000] {
        let (files, open, at, _) = long_line(width);
        let d = Diagnostic::new(Code::UnmatchedCloser, "far apart", FileId(0), at)
            .primary_label("here")
            .label(FileId(0), open, "opened here");
        let out = human(&[d], &files, &HumanOptions::default());
        // `@` is character `width + 6` of line 2.
        assert!(out.contains(&format!("[long.rl:2:{}]", width + 6)), "{out}");
        assert!(out.contains("here") && out.contains("opened here"), "{out}");
        assert!(out.contains('…'), "{out}");
        assert!(out.lines().all(|l| l.chars().count() < 300), "{out}");
        // Both ends are drawn under the characters they point at.
        let lines: Vec<&str> = out.lines().collect();
        let src = lines.iter().position(|l| l.contains('@')).unwrap();
        let column = |line: &str, c: char| line.chars().position(|x| x == c);
        let markers = lines[src + 1];
        let marked: Vec<usize> = markers
            .chars()
            .enumerate()
            .filter(|&(_, c)| c == '┬')
            .map(|(i, _)| i)
            .collect();
        assert_eq!(
            marked,
            vec![
                column(lines[src], '{').unwrap(),
                column(lines[src], '@').unwrap()
            ],
            "{out}"
        );
    }
}

#[test]
fn human_clips_a_label_over_several_long_lines() {
    let (files, open, _, third) = long_line(100_000);
    let d = Diagnostic::new(
        Code::UnclosedDelimiter,
        "spans lines",
        FileId(0),
        open.to(third),
    )
    .primary_label("all of this");
    let out = human(&[d], &files, &HumanOptions::default());
    assert!(out.contains("[long.rl:2:5]"), "{out}");
    assert!(out.contains("all of this"), "{out}");
    assert!(out.lines().all(|l| l.chars().count() < 300), "{out}");
}

#[test]
fn human_clips_context_lines_and_points_at_the_end_of_a_long_last_line() {
    let text = format!("a\n{}", "z".repeat(80_000));
    let mut files = Files::new();
    files.add("end.rl", text.clone());
    let d = Diagnostic::new(
        Code::UnclosedDelimiter,
        "at the end",
        FileId(0),
        Span::point(text.len()),
    )
    .primary_label("expected `}` here")
    .label(FileId(0), Span::new(0, 1), "first line");
    let out = human(&[d], &files, &HumanOptions::default());
    assert!(out.contains("[end.rl:2:80001]"), "{out}");
    assert!(out.contains('▲'), "{out}");
    assert!(out.lines().all(|l| l.chars().count() < 300), "{out}");
}

//! JSON Lines: one object per diagnostic, keys in a fixed order.

use super::file;
use crate::{Code, Diagnostic, FileId, Files, LineCol, Severity, Span};
use serde::Serialize;

#[derive(Serialize)]
struct Range {
    start: u32,
    end: u32,
}

/// Where a span is: its file's name, byte range, and 1-based line/column (in characters) of
/// both ends. All `None` for a file id that `files` does not know.
#[derive(Serialize)]
pub(super) struct Location<'a> {
    file: Option<&'a str>,
    range: Option<Range>,
    start: Option<LineCol>,
    end: Option<LineCol>,
}

impl<'a> Location<'a> {
    pub(super) fn new(files: &'a Files, id: FileId, span: Span) -> Self {
        match file(files, id) {
            Some(f) => Location {
                file: Some(&f.name),
                range: Some(Range {
                    start: span.start,
                    end: span.end,
                }),
                start: Some(f.line_col(span.start)),
                end: Some(f.line_col(span.end)),
            },
            None => Location {
                file: None,
                range: None,
                start: None,
                end: None,
            },
        }
    }

    fn none() -> Self {
        Location {
            file: None,
            range: None,
            start: None,
            end: None,
        }
    }
}

#[derive(Serialize)]
struct JsonLabel<'a> {
    #[serde(flatten)]
    at: Location<'a>,
    message: &'a str,
    primary: bool,
}

#[derive(Serialize)]
struct JsonDiagnostic<'a> {
    #[serde(flatten)]
    at: Location<'a>,
    code: Code,
    severity: Severity,
    message: &'a str,
    labels: Vec<JsonLabel<'a>>,
    help: Option<&'a str>,
    notes: &'a [String],
    /// Left out when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    fixes: Vec<JsonFix<'a>>,
}

#[derive(Serialize)]
struct JsonFix<'a> {
    message: &'a str,
    edits: Vec<JsonEdit<'a>>,
}

#[derive(Serialize)]
struct JsonEdit<'a> {
    #[serde(flatten)]
    at: Location<'a>,
    text: &'a str,
}

/// One JSON object per diagnostic, each on its own line (JSON Lines), in the order given:
///
/// ```text
/// {"file":"main.rl","range":{"start":40,"end":41},"start":{"line":3,"column":7},
///  "end":{"line":3,"column":8},"code":"E0103","severity":"error","message":"…",
///  "labels":[{"file":…,"range":…,"start":…,"end":…,"message":"…","primary":true}],
///  "help":null,"notes":[]}
/// ```
///
/// A diagnostic with machine-applicable fixes also has `"fixes":[{"message":"…","edits":[{"file":…,
/// "range":…,"start":…,"end":…,"text":"…"}]}]`: replacing each edit's range by its text applies
/// the fix.
///
/// (one line in the output). `file`, `range`, `start` and `end` are those of the primary label;
/// ranges are byte offsets, lines and columns are 1-based and columns count characters.
pub fn json(diags: &[Diagnostic], files: &Files) -> String {
    let mut out = String::new();
    for d in diags {
        let at = d
            .labels
            .first()
            .map_or_else(Location::none, |p| Location::new(files, p.file, p.span));
        let labels = d
            .labels
            .iter()
            .map(|l| JsonLabel {
                at: Location::new(files, l.file, l.span),
                message: &l.message,
                primary: l.primary,
            })
            .collect();
        let value = JsonDiagnostic {
            at,
            code: d.code,
            severity: d.severity,
            message: &d.message,
            labels,
            help: d.help.as_deref(),
            notes: &d.notes,
            fixes: d
                .fixes
                .iter()
                .map(|f| JsonFix {
                    message: &f.message,
                    edits: f
                        .edits
                        .iter()
                        .map(|e| JsonEdit {
                            at: Location::new(files, e.file, e.span),
                            text: &e.text,
                        })
                        .collect(),
                })
                .collect(),
        };
        out.push_str(&serde_json::to_string(&value).expect("a diagnostic serialises"));
        out.push('\n');
    }
    out
}

//! Code actions: each machine-applicable fix of a diagnostic the requested range touches, as a
//! `quickfix` with a workspace edit (the checker's `Diagnostic::fixes`, the same data
//! `--format json` and SARIF carry). A diagnostic's only fix is marked preferred, so editors
//! apply it with one key.

use super::analysis::{Analysis, Lines, UriMap, to_lsp};
use lsp_types::{
    CodeAction, CodeActionKind, CodeActionOrCommand, Position, Range, TextEdit, Uri, WorkspaceEdit,
};
use std::collections::HashMap;

/// The quick fixes of the document at `uri` (the analysis's root) whose diagnostics overlap
/// `range`, in the order of the diagnostics.
// `WorkspaceEdit::changes` is lsp-types' map keyed by `Uri`, whose cached parts clippy takes
// for interior mutability; the keys are never changed while in the map.
#[allow(clippy::mutable_key_type)]
pub fn code_actions(
    a: &Analysis,
    uris: &UriMap,
    uri: &Uri,
    range: Range,
) -> Vec<CodeActionOrCommand> {
    let root = a.root_file();
    let mut lines = Lines::new(&a.files);
    let mut out = Vec::new();
    for d in &a.checked.diagnostics {
        let primary = d.primary();
        if d.fixes.is_empty() || primary.file != root {
            continue;
        }
        let at = lines.range(primary.file, primary.span);
        if !overlaps(at, range) {
            continue;
        }
        let lsp = to_lsp(d, &mut lines, uris);
        for fix in &d.fixes {
            let mut changes: HashMap<Uri, Vec<TextEdit>> = HashMap::new();
            let mut complete = true;
            for e in &fix.edits {
                let target = if e.file == root {
                    Some(uri.clone())
                } else {
                    uris.uri(&a.files.get(e.file).name)
                };
                let Some(target) = target else {
                    complete = false;
                    break;
                };
                changes.entry(target).or_default().push(TextEdit {
                    range: lines.range(e.file, e.span),
                    new_text: e.text.clone(),
                });
            }
            // A fix is all its edits or nothing.
            if !complete {
                continue;
            }
            out.push(CodeActionOrCommand::CodeAction(CodeAction {
                title: fix.message.clone(),
                kind: Some(CodeActionKind::QUICKFIX),
                diagnostics: Some(vec![lsp.clone()]),
                edit: Some(WorkspaceEdit {
                    changes: Some(changes),
                    ..Default::default()
                }),
                is_preferred: Some(d.fixes.len() == 1),
                ..Default::default()
            }));
        }
    }
    out
}

/// Whether two ranges share a position (an empty range touches the diagnostic it is in or at
/// either end of).
fn overlaps(a: Range, b: Range) -> bool {
    let key = |p: Position| (p.line, p.character);
    key(a.start) <= key(b.end) && key(b.start) <= key(a.end)
}

#[cfg(test)]
mod tests {
    use super::overlaps;
    use lsp_types::{Position, Range};

    fn r(a: (u32, u32), b: (u32, u32)) -> Range {
        Range::new(Position::new(a.0, a.1), Position::new(b.0, b.1))
    }

    #[test]
    fn a_cursor_inside_or_at_either_end_overlaps() {
        let d = r((3, 4), (3, 9));
        assert!(overlaps(d, r((3, 4), (3, 4))));
        assert!(overlaps(d, r((3, 9), (3, 9))));
        assert!(overlaps(d, r((0, 0), (10, 0))));
        assert!(!overlaps(d, r((3, 10), (3, 12))));
        assert!(!overlaps(d, r((2, 0), (3, 3))));
    }
}

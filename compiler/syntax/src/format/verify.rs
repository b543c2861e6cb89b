//! Checks that formatted text says what the source said: it parses without errors, to the same
//! tree (spans aside), with the same comments. [`format_source`](super::format_source) runs it
//! on every result; the tests use it on their own.

use crate::Parsed;
use crate::ast::Module;
use crate::trivia::{Comment, CommentKind};
use rlc_diagnostics::FileId;

/// The comments of a file as a sorted multiset of `(kind, text)`.
pub fn comment_multiset(comments: &[Comment]) -> Vec<(CommentKind, String)> {
    let mut texts: Vec<(CommentKind, String)> =
        comments.iter().map(|c| (c.kind, c.text.clone())).collect();
    texts.sort_by(|a, b| {
        a.1.cmp(&b.1)
            .then_with(|| format!("{:?}", a.0).cmp(&format!("{:?}", b.0)))
    });
    texts
}

/// The `Debug` form of a module with every span replaced by `Span`, so that two trees read
/// from differently laid out text compare equal when they hold the same program.
pub fn without_spans(module: &Module) -> String {
    erase_spans(&format!("{module:?}"))
}

/// Replaces each `Span { start: N, end: M }` in a `Debug` text by `Span`.
pub fn erase_spans(debug: &str) -> String {
    const OPEN: &str = "Span { start: ";
    let mut out = String::with_capacity(debug.len());
    let mut rest = debug;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        out.push_str("Span");
        let after = &rest[at + OPEN.len()..];
        match after.find('}') {
            Some(close) => rest = &after[close + 1..],
            None => {
                rest = after;
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `Ok` if `formatted` parses cleanly to the same tree as `original` (spans aside) with the same
/// comments; otherwise what differs.
pub fn same_meaning(original: &Parsed, formatted: &str) -> Result<(), String> {
    let again = crate::parse(FileId(0), formatted);
    if let Some(d) = again.diagnostics.iter().find(|d| d.is_error()) {
        return Err(format!("the output does not parse: {}", d.message));
    }
    if comment_multiset(&original.comments) != comment_multiset(&again.comments) {
        return Err("the comments differ".to_string());
    }
    if without_spans(&original.module) != without_spans(&again.module) {
        return Err("the syntax tree differs".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erases_spans() {
        assert_eq!(
            erase_spans(
                "Ident { name: \"a\", span: Span { start: 1, end: 2 } }, Span { start: 0, end: 9 }"
            ),
            "Ident { name: \"a\", span: Span }, Span"
        );
    }
}

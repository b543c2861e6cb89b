//! Applying a fix's edits to a text, as an editor does: shared by the tests that check a
//! diagnostic's quick fixes (`tests/check_fixes.rs`, `tests/lsp.rs`, and the checker's own
//! `compiler/check/tests/fixes.rs`, which includes this file by path). Standard library only.

/// `text` with each `(start, end, new)` replacement (byte offsets into `text`) applied. The
/// edits must not overlap (else the test fails); they are applied from the last to the first,
/// so each offset still points into the original text.
pub fn apply_edits<S: AsRef<str>>(
    text: &str,
    edits: impl IntoIterator<Item = (usize, usize, S)>,
) -> String {
    let mut edits: Vec<(usize, usize, S)> = edits.into_iter().collect();
    edits.sort_by_key(|e| std::cmp::Reverse((e.0, e.1)));
    for w in edits.windows(2) {
        assert!(
            w[1].1 <= w[0].0,
            "overlapping edits {}..{} and {}..{}",
            w[1].0,
            w[1].1,
            w[0].0,
            w[0].1
        );
    }
    let mut out = text.to_string();
    for (start, end, new) in edits {
        out.replace_range(start..end, new.as_ref());
    }
    out
}

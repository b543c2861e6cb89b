//! Help lines that point at the name the user probably meant, each with the rename as a fix.

use rlc_diagnostics::{Diagnostic, Edit};

/// Adds "did you mean `x`?" when a candidate is within `max` edits of `word`, and `otherwise`
/// (typically the list of valid names) when none is. The diagnostic's primary label must be
/// on `word`: the rename replaces it.
pub(crate) fn suggest<'a>(
    d: Diagnostic,
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    max: usize,
    otherwise: impl Into<String>,
) -> Diagnostic {
    match rlc_syntax::closest(word, candidates, max) {
        Some(near) => did_you_mean(d, near),
        None => d.help(otherwise),
    }
}

/// "did you mean `near`?", with the fix that writes `near` in place of the primary label's text
/// (which must be the misspelt name).
pub(crate) fn did_you_mean(d: Diagnostic, near: &str) -> Diagnostic {
    let help = format!("did you mean `{near}`?");
    rename(d, near).help(help)
}

/// The fix that writes `near` in place of the primary label's text.
pub(crate) fn rename(d: Diagnostic, near: &str) -> Diagnostic {
    let p = d.primary();
    let edit = Edit {
        file: p.file,
        span: p.span,
        text: near.to_string(),
    };
    d.fix(format!("rename to `{near}`"), vec![edit])
}

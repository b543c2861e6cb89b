//! Help lines that point at the name the user probably meant.

use rlc_diagnostics::Diagnostic;

/// Adds "did you mean `x`?" when a candidate is within `max` edits of `word`, and `otherwise`
/// (typically the list of valid names) when none is.
pub(crate) fn suggest<'a>(
    d: Diagnostic,
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    max: usize,
    otherwise: impl Into<String>,
) -> Diagnostic {
    match rlc_syntax::closest(word, candidates, max) {
        Some(near) => d.help(format!("did you mean `{near}`?")),
        None => d.help(otherwise),
    }
}

//! Rendering diagnostics at the edge: [`human`] text through miette for people, [`json`] Lines
//! and [`sarif`] for machines.
//!
//! Every renderer is a pure function of its input: the same diagnostics and files give the same
//! bytes (fixed width, no hyperlinks, no terminal detection, no environment). Diagnostics are
//! rendered in the order given; sort them with [`Diagnostic::sort_key`] first for an order that
//! does not depend on the order of the passes.

mod human;
mod json;
mod sarif;

pub use human::{HumanOptions, human};
pub use json::json;
pub use sarif::{SARIF_INFORMATION_URI, sarif};

use crate::{Diagnostic, FileId, Files, Severity, SourceFile};

/// A one-line count of the errors and warnings, e.g. `error: 2 errors and 1 warning emitted`,
/// or `warning: 1 warning emitted`; `None` when there are neither.
pub fn summary(diags: &[Diagnostic]) -> Option<String> {
    let errors = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    let warnings = diags
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .count();
    let count = |n: usize, what: &str| {
        if n == 1 {
            format!("1 {what}")
        } else {
            format!("{n} {what}s")
        }
    };
    match (errors, warnings) {
        (0, 0) => None,
        (0, w) => Some(format!("warning: {} emitted", count(w, "warning"))),
        (e, 0) => Some(format!("error: {} emitted", count(e, "error"))),
        (e, w) => Some(format!(
            "error: {} and {} emitted",
            count(e, "error"),
            count(w, "warning")
        )),
    }
}

/// The file a label points into, or `None` for an id that `files` does not know.
fn file(files: &Files, id: FileId) -> Option<&SourceFile> {
    files.iter().nth(id.0 as usize).map(|(_, f)| f)
}

/// The first paragraph of an explain page after its `# ID: title` line, joined into one line.
pub(crate) fn first_paragraph(page: &str) -> String {
    let mut lines = page
        .lines()
        .skip_while(|l| l.trim().is_empty() || l.starts_with("# "));
    let mut out = Vec::new();
    for line in lines.by_ref() {
        if line.trim().is_empty() || line.starts_with('#') || line.starts_with("```") {
            break;
        }
        out.push(line.trim());
    }
    out.join(" ")
}

#[cfg(test)]
mod tests;

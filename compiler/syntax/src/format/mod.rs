//! The canonical formatter behind `rlc fmt`: one style, no options, like `gofmt`.
//!
//! [`format_source`] parses a file and prints its syntax tree back, putting every comment of
//! the source where it stood. A file with syntax errors is never formatted: the errors come
//! back instead, so that nothing the parser could not read is lost.
//!
//! The style, which the examples in `examples/` follow:
//!
//! - two spaces per indentation level; items are separated by one blank line, except that
//!   consecutive declarations of the same kind (`import`, `place`, `let`, `model`, `cluster`,
//!   `dataset`) keep the user's choice of no blank line or one; never more than one blank line;
//! - spaces around binary operators except `..`; `name: value` in calls and records;
//!   `key = value` in definition blocks; no trailing comma in a one-line list;
//! - alignment: consecutive `key = value` fields align their `=`, consecutive `let` (and scan
//!   `x = …`) statements align their `=`, consecutive module-level `let`s align their `=`, and
//!   consecutive `place` items align `on` and `with`. A run of aligned lines ends at a blank
//!   line or an own-line comment;
//! - a call, record, struct, import list or scan carry list whose one-line form would make the
//!   line's content (the text after its indentation) wider than [`MAX_WIDTH`] is broken one
//!   element per line, with a trailing comma; a closure keeps `{ logp ->` on the call's line and
//!   its body on the next lines; an `every` block with a single short statement stays on one
//!   line; parameter lists are never broken;
//! - numbers, strings and parentheses are printed as written;
//! - comments are never lost: an own-line comment stays on its own line before the same node, a
//!   trailing comment stays at the end of its line, and a comment inside an expression ends the
//!   line there (the expression continues one level deeper on the next line).
//!
//! The output is checked before it is returned: it must parse to the same tree (spans aside)
//! with the same comments ([`verify`]).

mod expr;
mod items;
mod printer;
pub mod verify;

pub use printer::{INDENT, MAX_WIDTH};

use crate::ast::Span;
use crate::trivia::Comment;
use printer::Printer;
use rlc_diagnostics::{Code, Diagnostic, FileId};

/// Formats one file. Returns the canonical text, or the file's syntax errors (and formats
/// nothing) if it does not parse cleanly.
pub fn format_source(file: FileId, src: &str) -> Result<String, Vec<Diagnostic>> {
    let parsed = crate::parse(file, src);
    let errors: Vec<Diagnostic> = parsed
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .cloned()
        .collect();
    if !errors.is_empty() {
        return Err(errors);
    }
    let out = print(src, &parsed.module, &parsed.comments);
    if let Err(why) = verify::same_meaning(&parsed, &out) {
        // A formatter bug: refuse rather than change what the file says.
        let diagnostic = Diagnostic::new(
            Code::UnexpectedToken,
            format!(
                "internal error: the formatter would change this file ({why}); it is left as it is"
            ),
            file,
            Span::point(0),
        )
        .primary_label("not formatted")
        .help("please report this file to the rlc developers");
        return Err(vec![diagnostic]);
    }
    Ok(out)
}

/// Prints a parsed module with its comments, without checking the result.
pub fn print(src: &str, module: &crate::ast::Module, comments: &[Comment]) -> String {
    let mut f = Formatter {
        p: Printer::new(src, comments),
        src,
    };
    f.module(module);
    f.p.finish()
}

/// The printer and the source it reads spellings from (the tree does not keep every one).
struct Formatter<'a> {
    p: Printer<'a>,
    src: &'a str,
}

fn start(span: Span) -> usize {
    span.start as usize
}

impl Formatter<'_> {
    /// Where a node really ends: the parser's spans of rules that end in an optional part take
    /// in the white space and comments after the node, which belong to what follows.
    fn end(&self, span: Span) -> usize {
        self.p.trim_end(start(span), span.end as usize)
    }
}

//! Text for people, drawn by miette's `GraphicalReportHandler`.
//!
//! miette knows one source per report, so the files of a compilation are laid end to end in one
//! virtual source ([`Sources`]): file `i` starts at the sum of the earlier files' lengths plus one
//! byte each, and that extra byte reads as a newline. Each snippet miette asks for is cut from
//! one file and carries that file's name, so a label in another file gets a snippet of its own
//! under its own file name. The extra newline also gives an empty span at the end of a file
//! (`expected `}` here`) a place to be drawn.

use crate::{Diagnostic, FileId, Files, Severity};
use miette::{
    GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError, MietteSpanContents,
    SourceCode, SourceSpan, SpanContents,
};
use std::fmt;
use unicode_width::UnicodeWidthStr;

/// How [`human`] draws.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HumanOptions {
    /// ANSI colours (for a terminal); without, the output is plain Unicode text.
    pub color: bool,
    /// The width text is wrapped to, in columns.
    pub width: usize,
}

impl Default for HumanOptions {
    /// No colour, 100 columns: the form snapshot tests use.
    fn default() -> Self {
        HumanOptions {
            color: false,
            width: 100,
        }
    }
}

/// Renders diagnostics for a terminal, each as
///
/// ```text
/// error[E0103]: `key: value` where the language wants `key = value`
///    ╭─[main.rl:3:7]
///  2 │ model policy: CausalLM {
///  3 │   init: random(seed: 7)
///    ·       ┬
///    ·       ╰── write `=` here
///  4 │ }
///    ╰────
///   help: write `init = random(seed: 7)`
/// ```
///
/// with a blank line between diagnostics. Notes come after the snippets, verbatim (tables keep
/// their alignment), then the help line.
pub fn human(diags: &[Diagnostic], files: &Files, opts: &HumanOptions) -> String {
    let sources = Sources::new(files);
    let theme = if opts.color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme)
        .with_width(opts.width)
        .with_links(false)
        .without_syntax_highlighting()
        .with_context_lines(1)
        .tab_width(4);
    let mut out = String::new();
    for (i, diag) in diags.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        render_one(&mut out, diag, &sources, &handler, opts);
    }
    out
}

fn render_one(
    out: &mut String,
    diag: &Diagnostic,
    sources: &Sources,
    handler: &GraphicalReportHandler,
    opts: &HumanOptions,
) {
    // Header: `error[E0103]: message`.
    let (style, reset, bold) = if opts.color {
        let colour = match diag.severity {
            Severity::Error => "\x1b[1;31m",
            Severity::Warning => "\x1b[1;33m",
            Severity::Note => "\x1b[1;36m",
        };
        (colour, "\x1b[0m", "\x1b[1m")
    } else {
        ("", "", "")
    };
    out.push_str(&format!(
        "{style}{}[{}]{reset}{bold}: {}{reset}\n",
        diag.severity.as_str(),
        diag.code,
        diag.message
    ));

    // Snippets, from miette. miette begins a report with the message (`  × message`, wrapped);
    // the header above already says it, so that block is cut off: it is exactly what miette
    // writes for the same report without labels.
    let severity = match diag.severity {
        Severity::Error => miette::Severity::Error,
        Severity::Warning => miette::Severity::Warning,
        Severity::Note => miette::Severity::Advice,
    };
    let labels = diag
        .labels
        .iter()
        .filter_map(|l| {
            let span = sources.span(l.file, l.span.start as usize, l.span.end as usize)?;
            let text = (!l.message.is_empty()).then(|| l.message.clone());
            Some(if l.primary {
                LabeledSpan::new_primary_with_span(text, span)
            } else {
                LabeledSpan::new_with_span(text, span)
            })
        })
        .collect::<Vec<_>>();
    if !labels.is_empty() {
        let bare = Report {
            message: &diag.message,
            severity,
            labels: Vec::new(),
            source: None,
        };
        let full = Report {
            message: &diag.message,
            severity,
            labels,
            source: Some(sources),
        };
        let mut prefix = String::new();
        let mut body = String::new();
        let rendered = handler.render_report(&mut prefix, &bare).is_ok()
            && handler.render_report(&mut body, &full).is_ok();
        if rendered {
            out.push_str(body.strip_prefix(prefix.as_str()).unwrap_or(&body));
        }
    }

    // Notes, verbatim, then help, wrapped.
    for note in &diag.notes {
        push_block(out, "note", note, None);
    }
    if let Some(help) = &diag.help {
        push_block(out, "help", help, Some(opts.width));
    }
}

/// `  note: first line` with later lines indented under the first; wrapped when `width` is set.
fn push_block(out: &mut String, tag: &str, text: &str, width: Option<usize>) {
    let head = format!("  {tag}: ");
    let indent = " ".repeat(head.len());
    let mut lines = Vec::new();
    for line in text.lines() {
        match width {
            Some(w) => lines.extend(wrap(line, w.saturating_sub(head.len()).max(20))),
            None => lines.push(line.to_string()),
        }
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    for (i, line) in lines.iter().enumerate() {
        let lead = if i == 0 {
            head.as_str()
        } else {
            indent.as_str()
        };
        out.push_str(format!("{lead}{line}").trim_end());
        out.push('\n');
    }
}

/// Greedy word wrap to `width` columns; a word longer than the width gets a line of its own.
fn wrap(line: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in line.split(' ') {
        if !current.is_empty() && current.width() + 1 + word.width() > width {
            lines.push(std::mem::take(&mut current));
        } else if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    lines.push(current);
    lines
}

/// One diagnostic as miette sees it.
struct Report<'a> {
    message: &'a str,
    severity: miette::Severity,
    labels: Vec<LabeledSpan>,
    source: Option<&'a Sources>,
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message)
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message)
    }
}

impl std::error::Error for Report<'_> {}

impl miette::Diagnostic for Report<'_> {
    fn severity(&self) -> Option<miette::Severity> {
        Some(self.severity)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.source.map(|s| s as &dyn SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        Some(Box::new(self.labels.iter().cloned()))
    }
}

/// All files of a compilation laid end to end (see the module comment).
struct Sources {
    files: Vec<VirtualFile>,
}

struct VirtualFile {
    name: String,
    /// The file's text followed by one `\n`.
    text: String,
    /// Length of the real text, without the added `\n`.
    len: usize,
    /// Where the file starts in the virtual source.
    base: usize,
    /// Byte offsets in `text` where lines start; the last one is `text.len()`.
    starts: Vec<usize>,
}

impl VirtualFile {
    fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset) - 1
    }
}

impl Sources {
    fn new(files: &Files) -> Self {
        let mut base = 0;
        let files = files
            .iter()
            .map(|(_, f)| {
                let text = format!("{}\n", f.text);
                let starts = std::iter::once(0)
                    .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                    .collect();
                let vf = VirtualFile {
                    name: f.name.clone(),
                    len: f.text.len(),
                    base,
                    text,
                    starts,
                };
                base += vf.text.len();
                vf
            })
            .collect();
        Sources { files }
    }

    /// The virtual span of `start..end` in `file`: clamped to the file, the start snapped back
    /// and the end snapped forward to character boundaries.
    fn span(&self, id: FileId, start: usize, end: usize) -> Option<SourceSpan> {
        let vf = self.files.get(id.0 as usize)?;
        let text = &vf.text[..vf.len];
        let mut start = start.min(text.len());
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = end.clamp(start, text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        Some(SourceSpan::from((vf.base + start, end - start)))
    }
}

impl SourceCode for Sources {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let offset = span.offset();
        let i = self.files.partition_point(|f| f.base <= offset);
        let vf = self
            .files
            .get(i.checked_sub(1).ok_or(MietteError::OutOfBounds)?)
            .ok_or(MietteError::OutOfBounds)?;
        let (start, end) = (offset - vf.base, offset - vf.base + span.len());
        // A span may reach the added newline, never past it (into the next file).
        if start > vf.len || end > vf.len + 1 {
            return Err(MietteError::OutOfBounds);
        }
        let first = vf.line_of(start);
        // A span that reaches the end of the file shows the line the end is on, even when
        // that is the empty line after a final newline (where "expected `}` here" points).
        let last_of_span = if end >= vf.len {
            vf.line_of(vf.len)
        } else if end > start {
            vf.line_of(end - 1)
        } else {
            first
        };
        // The last line of `text` is the empty one the added newline makes when the file ends
        // with a newline (or is empty); show it only when a span is on it.
        let lines = vf.starts.len() - 1;
        let max_line = if vf.text[..vf.len].ends_with('\n') && last_of_span < lines - 1 {
            lines - 2
        } else {
            lines - 1
        };
        let last = (last_of_span + context_lines_after)
            .min(max_line)
            .max(last_of_span);
        let (from, line, column) = if context_lines_before == 0 {
            let column = vf.text[vf.starts[first]..start].chars().count();
            (start, first, column)
        } else {
            let line = first.saturating_sub(context_lines_before);
            (vf.starts[line], line, 0)
        };
        let to = vf.starts[last + 1];
        Ok(Box::new(MietteSpanContents::new_named(
            vf.name.clone(),
            &vf.text.as_bytes()[from..to],
            SourceSpan::from((vf.base + from, to - from)),
            line,
            column,
            last + 1 - line,
        )))
    }
}

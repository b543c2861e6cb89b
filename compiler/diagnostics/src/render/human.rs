//! Text for people, drawn by miette's `GraphicalReportHandler`.
//!
//! miette knows one source per report, so each diagnostic gets one virtual source of its own
//! ([`Excerpt`]): for each file its labels are in, the runs of lines around them, laid end to end
//! with one byte between runs. Each snippet miette asks for is cut from one run and carries its
//! file's name, so a label in another file gets a snippet of its own under its own file name.
//! Every file's text reads as followed by one newline ([`SourceText`]), which gives an empty span
//! at the end of a file (`expected `}` here`) a place to be drawn.
//!
//! Lines longer than [`LONG_LINE`] bytes are clipped to the parts around the places labels start
//! and end (`…` for the rest), and the header names the real line and column: miette pads an
//! underline to its column with a formatting width, which panics past 65 535, and the work and
//! the output stay those of the lines shown, whatever the length of the file's lines.

use crate::{Diagnostic, FileId, Files, Severity, SourceFile};
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
    sources: &Sources<'_>,
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
    let shown = diag
        .labels
        .iter()
        .filter_map(|l| {
            let place = sources.clamp(l.file, l.span.start as usize, l.span.end as usize)?;
            Some((l, place))
        })
        .collect::<Vec<_>>();
    let places = shown.iter().map(|&(_, p)| p).collect::<Vec<_>>();
    let (excerpt, spans) = Excerpt::new(sources, &places);
    let labels = shown
        .iter()
        .zip(spans)
        .map(|(&(l, _), span)| {
            let text = (!l.message.is_empty()).then(|| l.message.clone());
            if l.primary {
                LabeledSpan::new_primary_with_span(text, span)
            } else {
                LabeledSpan::new_with_span(text, span)
            }
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
            source: Some(&excerpt),
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
    source: Option<&'a Excerpt<'a>>,
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

/// Lines longer than this many bytes are clipped in snippets: miette pads a label's underline
/// to its column with a formatting width, which panics past column 65 535, and a line of
/// thousands of columns helps no reader. The header keeps the real line and column.
const LONG_LINE: usize = 400;
/// What a clipped line keeps before and after each place a label starts or ends on it, in bytes
/// (widened to whole characters).
const KEEP_BEFORE: usize = 40;
const KEEP_AFTER: usize = 80;
/// What a clipped line keeps of its beginning when no label starts or ends on it.
const KEEP_HEAD: usize = 120;
/// Stands for the clipped text.
const ELLIPSIS: &str = "…";
/// Lines of context around a label: the handler's `with_context_lines`.
const CONTEXT: usize = 1;

/// The files of a compilation with their line starts, computed once for all diagnostics.
struct Sources<'a> {
    files: Vec<SourceText<'a>>,
}

struct SourceText<'a> {
    file: &'a SourceFile,
    /// Byte offsets where lines start in the file's text followed by one `\n` (see the module
    /// comment); the last one is the length of that text.
    starts: Vec<usize>,
}

impl<'a> Sources<'a> {
    fn new(files: &'a Files) -> Self {
        let files = files
            .iter()
            .map(|(_, file)| SourceText {
                file,
                starts: std::iter::once(0)
                    .chain(file.text.match_indices('\n').map(|(i, _)| i + 1))
                    .chain(std::iter::once(file.text.len() + 1))
                    .collect(),
            })
            .collect();
        Sources { files }
    }

    /// `start..end` in file `id`, clamped to the file, the start snapped back and the end
    /// snapped forward to character boundaries; `None` for a file `files` does not know.
    fn clamp(&self, id: FileId, start: usize, end: usize) -> Option<Place> {
        let text = &self.files.get(id.0 as usize)?.file.text;
        let mut start = start.min(text.len());
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = end.clamp(start, text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        Some(Place {
            file: id.0 as usize,
            start,
            end,
        })
    }
}

impl SourceText<'_> {
    fn len(&self) -> usize {
        self.file.text.len()
    }

    /// Lines of the text followed by `\n`: one more than the file has when it ends with one.
    fn lines(&self) -> usize {
        self.starts.len() - 1
    }

    fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset) - 1
    }

    /// Line `l` without its newline.
    fn line(&self, l: usize) -> &str {
        &self.file.text[self.starts[l]..self.starts[l + 1] - 1]
    }

    /// The last line a span shows: a span that reaches the end of the file shows the line the
    /// end is on, even when that is the empty line after a final newline (where "expected `}`
    /// here" points).
    fn last_line(&self, start: usize, end: usize) -> usize {
        if end >= self.len() {
            self.line_of(self.len())
        } else if end > start {
            self.line_of(end - 1)
        } else {
            self.line_of(start)
        }
    }

    /// The last line a snippet may show: the empty line the added newline makes when the file
    /// ends with a newline (or is empty) is shown only when a span is on it.
    fn max_line(&self, last_of_span: usize) -> usize {
        let lines = self.lines();
        if self.file.text.ends_with('\n') && last_of_span < lines - 1 {
            lines - 2
        } else {
            lines - 1
        }
    }
}

/// A label's bytes `start..end` in file number `file`.
#[derive(Clone, Copy)]
struct Place {
    file: usize,
    start: usize,
    end: usize,
}

/// What one diagnostic shows of its files, as one virtual source for miette: for each file its
/// labels are in, the runs of lines around them (each label's lines with [`CONTEXT`] lines either
/// side, runs that touch joined), long lines clipped to the parts around the places labels start
/// and end. Chunks lie end to end; a span never crosses from one to the next, so miette draws
/// each run as a snippet of its own, as it would for the whole file. Its work and memory are
/// those of the lines shown (clipped), not of the files.
struct Excerpt<'a> {
    chunks: Vec<Chunk<'a>>,
}

struct Chunk<'a> {
    source: &'a SourceText<'a>,
    /// Where the chunk starts in the virtual source.
    base: usize,
    /// The real line of the chunk's first line.
    first: usize,
    /// The lines as shown, each followed by `\n`.
    text: String,
    /// Where each shown line starts in `text`, then `text.len()`.
    starts: Vec<usize>,
    /// Per shown line, the parts of the real line it shows, in order.
    pieces: Vec<Vec<Piece>>,
}

/// Bytes `real` of a line (offsets within the line) are shown from byte `shown` of the chunk's
/// text on.
struct Piece {
    real: std::ops::Range<usize>,
    shown: usize,
}

impl<'a> Excerpt<'a> {
    /// The excerpt for the labels at `places`, and where each label is in it.
    fn new(sources: &'a Sources<'a>, places: &[Place]) -> (Self, Vec<SourceSpan>) {
        let mut runs: Vec<(usize, usize, usize)> = places
            .iter()
            .map(|p| {
                let src = &sources.files[p.file];
                let first = src.line_of(p.start);
                let last = src.last_line(p.start, p.end);
                (
                    p.file,
                    first.saturating_sub(CONTEXT),
                    (last + CONTEXT).min(src.lines() - 1),
                )
            })
            .collect();
        runs.sort_unstable();
        let mut joined: Vec<(usize, usize, usize)> = Vec::new();
        for run in runs {
            match joined.last_mut() {
                Some(last) if last.0 == run.0 && run.1 <= last.2 + 1 => last.2 = last.2.max(run.2),
                _ => joined.push(run),
            }
        }
        let mut base = 0;
        let chunks = joined
            .into_iter()
            .map(|(file, first, last)| {
                let chunk = Chunk::new(&sources.files[file], file, first, last, base, places);
                // One byte between chunks, so that no span reaches from one into the next.
                base += chunk.text.len() + 1;
                chunk
            })
            .collect::<Vec<_>>();
        let excerpt = Excerpt { chunks };
        let spans = places
            .iter()
            .map(|p| {
                let chunk = excerpt
                    .chunks
                    .iter()
                    .find(|c| {
                        std::ptr::eq(c.source, &sources.files[p.file])
                            && c.contains_line(c.source.line_of(p.start))
                    })
                    .expect("every label has a chunk");
                let (start, end) = (chunk.shown(p.start), chunk.shown(p.end));
                SourceSpan::from((chunk.base + start, end - start))
            })
            .collect();
        (excerpt, spans)
    }
}

impl<'a> Chunk<'a> {
    /// Lines `first..=last` of `source` (file number `file`), starting at `base`, clipped around
    /// the label ends among `places`.
    fn new(
        source: &'a SourceText<'a>,
        file: usize,
        first: usize,
        last: usize,
        base: usize,
        places: &[Place],
    ) -> Self {
        let mut text = String::new();
        let mut starts = Vec::with_capacity(last + 2 - first);
        let mut pieces = Vec::with_capacity(last + 1 - first);
        for l in first..=last {
            starts.push(text.len());
            let line = source.line(l);
            let line_start = source.starts[l];
            if line.len() <= LONG_LINE {
                pieces.push(vec![Piece {
                    real: 0..line.len(),
                    shown: text.len(),
                }]);
                text.push_str(line);
            } else {
                let ends = places
                    .iter()
                    .filter(|p| p.file == file)
                    .flat_map(|p| [p.start, p.end])
                    .filter(|&at| (line_start..=line_start + line.len()).contains(&at))
                    .map(|at| at - line_start);
                pieces.push(clip(&mut text, line, ends));
            }
            text.push('\n');
        }
        starts.push(text.len());
        Chunk {
            source,
            base,
            first,
            text,
            starts,
            pieces,
        }
    }

    fn contains_line(&self, line: usize) -> bool {
        (self.first..self.first + self.pieces.len()).contains(&line)
    }

    /// Where real byte `offset` (of one of the chunk's lines) is shown in `text`: where it is
    /// kept, else where the clipped text that holds it is.
    fn shown(&self, offset: usize) -> usize {
        let line = self.source.line_of(offset);
        let at = offset - self.source.starts[line];
        let pieces = &self.pieces[line - self.first];
        for piece in pieces {
            if at < piece.real.start {
                return piece.shown;
            }
            if at <= piece.real.end {
                return piece.shown + (at - piece.real.start);
            }
        }
        pieces
            .last()
            .map_or(self.starts[line - self.first], |p| p.shown + p.real.len())
    }

    /// The real byte offset (in the file) that byte `at` of `text` shows.
    fn real(&self, at: usize) -> usize {
        let k = self.starts.partition_point(|&s| s <= at) - 1;
        let Some(pieces) = self.pieces.get(k) else {
            return self.source.starts[self.first + k];
        };
        let line_start = self.source.starts[self.first + k];
        for piece in pieces {
            if at < piece.shown {
                return line_start + piece.real.start;
            }
            if at <= piece.shown + piece.real.len() {
                return line_start + piece.real.start + (at - piece.shown);
            }
        }
        if at + 1 == self.starts[k + 1] {
            // The newline.
            return line_start + self.source.line(self.first + k).len();
        }
        line_start + pieces.last().map_or(0, |p| p.real.end)
    }
}

/// Appends the parts of the long `line` around the offsets `ends` (where labels start and end)
/// to `text`, `…` for each part left out, and returns the pieces kept.
fn clip(text: &mut String, line: &str, ends: impl Iterator<Item = usize>) -> Vec<Piece> {
    let floor = |mut at: usize| {
        while !line.is_char_boundary(at) {
            at -= 1;
        }
        at
    };
    let ceil = |mut at: usize| {
        while !line.is_char_boundary(at) {
            at += 1;
        }
        at
    };
    let mut windows: Vec<std::ops::Range<usize>> = ends
        .map(|at| floor(at.saturating_sub(KEEP_BEFORE))..ceil((at + KEEP_AFTER).min(line.len())))
        .collect();
    if windows.is_empty() {
        windows.push(0..floor(KEEP_HEAD));
    }
    windows.sort_unstable_by_key(|w| w.start);
    let mut pieces: Vec<Piece> = Vec::new();
    let mut kept = 0;
    for window in windows {
        if let Some(last) = pieces.last_mut()
            && window.start <= last.real.end
        {
            let end = window.end.max(last.real.end);
            text.push_str(&line[last.real.end..end]);
            last.real.end = end;
            kept = end;
            continue;
        }
        if window.start > kept {
            text.push_str(ELLIPSIS);
        }
        pieces.push(Piece {
            real: window.clone(),
            shown: text.len(),
        });
        text.push_str(&line[window.clone()]);
        kept = window.end;
    }
    if kept < line.len() {
        text.push_str(ELLIPSIS);
    }
    pieces
}

impl SourceCode for Excerpt<'_> {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let offset = span.offset();
        let i = self.chunks.partition_point(|c| c.base <= offset);
        let chunk = self
            .chunks
            .get(i.checked_sub(1).ok_or(MietteError::OutOfBounds)?)
            .ok_or(MietteError::OutOfBounds)?;
        let (start, end) = (offset - chunk.base, offset - chunk.base + span.len());
        if end > chunk.text.len() {
            return Err(MietteError::OutOfBounds);
        }
        let src = chunk.source;
        let (real_start, real_end) = (chunk.real(start), chunk.real(end));
        let first = src.line_of(real_start);
        let last_of_span = src.last_line(real_start, real_end);
        let chunk_last = chunk.first + chunk.pieces.len() - 1;
        let last = (last_of_span + context_lines_after)
            .min(src.max_line(last_of_span))
            .max(last_of_span)
            .min(chunk_last);
        let (from, line, column) = if context_lines_before == 0 {
            let column = src.file.line_col(real_start as u32).column as usize - 1;
            (start, first, column)
        } else {
            let line = first.saturating_sub(context_lines_before).max(chunk.first);
            (chunk.starts[line - chunk.first], line, 0)
        };
        let to = chunk.starts[last + 1 - chunk.first];
        Ok(Box::new(MietteSpanContents::new_named(
            src.file.name.clone(),
            &chunk.text.as_bytes()[from..to],
            SourceSpan::from((chunk.base + from, to - from)),
            line,
            column,
            last + 1 - line,
        )))
    }
}

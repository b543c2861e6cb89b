//! The output buffer: lines, indentation, and the comments of the source, which it puts back
//! in source order as the code around them is written.
//!
//! Every token that comes from a syntax-tree node is written with [`Printer::tok`] (or after
//! [`Printer::comments_before`]), which first writes every comment that starts before it. So no
//! comment is ever dropped and comments keep their order relative to the code. A comment met at
//! the start of a line becomes an own-line comment; one met in the middle of a line ends that
//! line (as a trailing comment) and the code continues on the next line, indented one more level.

use crate::trivia::Comment;

/// The widest a line's content (its text after the indentation) may be before a call or record
/// is broken over several lines.
pub const MAX_WIDTH: usize = 100;

/// Spaces per indentation level.
pub const INDENT: usize = 2;

/// What to do with blank lines before a line-starting node (and its leading comments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blank {
    /// Never a blank line (inside lists, at the start of a file).
    Never,
    /// A blank line where the source has at least one (statements, fields, items of a group).
    Preserve,
    /// Exactly one blank line before the node's first line (between items of different kinds).
    Force,
}

pub struct Printer<'a> {
    pub src: &'a str,
    comments: &'a [Comment],
    /// The next comment not yet written.
    next: usize,
    out: String,
    /// The indentation level of the next structural line.
    pub indent: usize,
    /// The indentation level of the current line (valid once something is written on it).
    line_indent: usize,
    /// The level of continuation lines opened by a comment in the middle of a line.
    cont: Option<usize>,
    /// Characters written on the current line, indentation included.
    col: usize,
    /// Nothing written on the current line yet.
    line_start: bool,
    /// A space is due before the next text on this line.
    pending_space: bool,
    /// The current line ends in a line comment: the next text must go on a new line.
    needs_newline: bool,
    /// Just after the `{` of a block: no blank line may follow.
    block_start: bool,
    /// The source offset just after the last token or comment written.
    pub last_end: usize,
}

impl<'a> Printer<'a> {
    pub fn new(src: &'a str, comments: &'a [Comment]) -> Self {
        Printer {
            src,
            comments,
            next: 0,
            out: String::with_capacity(src.len() + src.len() / 8),
            indent: 0,
            line_indent: 0,
            cont: None,
            col: 0,
            line_start: true,
            pending_space: false,
            needs_newline: false,
            block_start: true,
            last_end: 0,
        }
    }

    pub fn finish(mut self) -> String {
        self.newline();
        while self.out.ends_with("\n\n") {
            self.out.pop();
        }
        if self.out.trim().is_empty() {
            return String::new();
        }
        self.out
    }

    // ---------------------------------------------------------------------------------------
    // Text

    /// Writes code text (no new lines) on the current line.
    pub fn write(&mut self, text: &str) {
        if self.needs_newline {
            self.break_continuation();
        }
        if self.line_start {
            let level = self.cont.unwrap_or(self.indent);
            self.line_indent = level;
            self.out.extend(std::iter::repeat_n(' ', level * INDENT));
            self.col = level * INDENT;
            self.line_start = false;
            self.block_start = false;
        } else if self.pending_space {
            self.out.push(' ');
            self.col += 1;
        }
        self.pending_space = false;
        self.out.push_str(text);
        self.col += text.chars().count();
    }

    /// Writes the text of a node that starts at source offset `start` and ends at `end`, after
    /// the comments that precede it.
    pub fn tok(&mut self, text: &str, start: usize, end: usize) {
        self.comments_before(start);
        self.write(text);
        self.last_end = self.last_end.max(end);
    }

    /// A space before the next text, unless that text starts a line.
    pub fn space(&mut self) {
        self.pending_space = true;
    }

    /// Ends the current line (if anything is on it); the next line is a structural one.
    pub fn newline(&mut self) {
        self.cont = None;
        self.needs_newline = false;
        if !self.line_start {
            self.end_line();
        }
    }

    /// One blank line, unless one is already there or this is the start of a block or file.
    pub fn blank_line(&mut self) {
        if !self.line_start {
            self.newline();
        }
        if !self.block_start && !self.out.is_empty() && !self.out.ends_with("\n\n") {
            self.out.push('\n');
        }
    }

    /// Marks the start of a block's content: no blank line may open it.
    pub fn open_block(&mut self) {
        self.block_start = true;
    }

    fn end_line(&mut self) {
        while self.out.ends_with(' ') {
            self.out.pop();
        }
        self.out.push('\n');
        self.line_start = true;
        self.pending_space = false;
        self.col = 0;
    }

    /// Ends a line in the middle of a construct (after a comment); code goes on one level deeper.
    /// A run of such lines stays at one level.
    fn break_continuation(&mut self) {
        let current = self.current_level();
        let level = if current > self.indent {
            current
        } else {
            self.indent + 1
        };
        self.end_line();
        self.needs_newline = false;
        self.cont = Some(level);
    }

    /// The indentation level of the current line (or of the line about to start).
    pub fn current_level(&self) -> usize {
        if self.line_start {
            self.cont.unwrap_or(self.indent)
        } else {
            self.line_indent
        }
    }

    /// Whether `width` more characters (and the pending space) fit on the current line.
    pub fn fits(&self, width: usize) -> bool {
        if self.needs_newline {
            return false;
        }
        let used = if self.line_start {
            0
        } else {
            self.col - self.line_indent * INDENT + usize::from(self.pending_space)
        };
        used + width <= MAX_WIDTH
    }

    // ---------------------------------------------------------------------------------------
    // Comments

    /// `end` moved back over the white space and comments that end the text `start..end`.
    pub fn trim_end(&self, start: usize, mut end: usize) -> usize {
        loop {
            end = start
                + self.src[start..end]
                    .trim_end_matches([' ', '\t', '\r', '\n'])
                    .len();
            let i = self
                .comments
                .partition_point(|c| (c.span.end as usize) < end);
            match self.comments.get(i) {
                Some(c) if (c.span.start as usize) < end && c.span.start as usize >= start => {
                    end = c.span.start as usize;
                }
                _ => return end,
            }
        }
    }

    /// Whether a comment starts in `start..end`.
    pub fn has_comment(&self, start: usize, end: usize) -> bool {
        let i = self
            .comments
            .partition_point(|c| (c.span.start as usize) < start);
        self.comments
            .get(i)
            .is_some_and(|c| (c.span.start as usize) < end)
    }

    /// Whether a comment not yet written starts before `pos`.
    pub fn pending_before(&self, pos: usize) -> bool {
        self.comments
            .get(self.next)
            .is_some_and(|c| (c.span.start as usize) < pos)
    }

    fn gap_has_blank(&self, pos: usize) -> bool {
        let from = self.last_end.min(pos);
        self.src[from..pos].bytes().filter(|&b| b == b'\n').count() >= 2
    }

    /// Writes every comment that starts before `pos`: on their own lines if the current line is
    /// empty, otherwise the first ends the current line and the code continues on the next.
    pub fn comments_before(&mut self, pos: usize) {
        while let Some(c) = self.comments.get(self.next) {
            if c.span.start as usize >= pos {
                break;
            }
            if self.line_start && !self.needs_newline {
                self.own_line_comment(Blank::Never);
            } else {
                self.trailing_comment();
            }
        }
    }

    /// Writes the comments that stand before a line-starting node at `pos`, and the blank line
    /// the policy asks for. Call at the start of a line.
    pub fn leading(&mut self, pos: usize, blank: Blank) {
        if !self.line_start || self.needs_newline {
            self.newline();
        }
        let mut first = true;
        while self.pending_before(pos) {
            let policy = if first {
                blank
            } else {
                Blank::Preserve.min_with(blank)
            };
            self.own_line_comment(policy);
            first = false;
        }
        let policy = if first {
            blank
        } else {
            Blank::Preserve.min_with(blank)
        };
        self.apply_blank(policy, pos);
    }

    fn apply_blank(&mut self, policy: Blank, pos: usize) {
        match policy {
            Blank::Never => {}
            Blank::Preserve => {
                if self.gap_has_blank(pos) {
                    self.blank_line();
                }
            }
            Blank::Force => self.blank_line(),
        }
    }

    fn own_line_comment(&mut self, blank: Blank) {
        let c = &self.comments[self.next];
        let (start, end) = (c.span.start as usize, c.span.end as usize);
        self.apply_blank(blank, start);
        let text = c.text.as_str();
        self.write(text);
        self.next += 1;
        self.last_end = self.last_end.max(end);
        // Keep a continuation's indentation for the code that follows.
        let cont = self.cont;
        self.end_line();
        self.cont = cont;
    }

    fn trailing_comment(&mut self) {
        let c = &self.comments[self.next];
        let end = c.span.end as usize;
        if self.needs_newline {
            self.break_continuation();
            self.own_line_comment(Blank::Never);
            return;
        }
        self.pending_space = false;
        while self.out.ends_with(' ') {
            self.out.pop();
        }
        self.out.push(' ');
        self.out.push_str(&c.text);
        self.next += 1;
        self.last_end = self.last_end.max(end);
        self.needs_newline = true;
    }

    /// Puts a comment that starts before `limit` on the same source line as the last token at
    /// the end of the current line.
    pub fn flush_trailing(&mut self, limit: usize) {
        if self.line_start || self.needs_newline {
            return;
        }
        if let Some(c) = self.comments.get(self.next) {
            let start = c.span.start as usize;
            if start < limit && !self.src[self.last_end.min(start)..start].contains('\n') {
                self.trailing_comment();
            }
        }
    }

    /// Writes every remaining comment, on its own line (the end of a block, list or file).
    pub fn dangling(&mut self, limit: usize, blank: Blank) {
        self.flush_trailing(limit);
        if self.pending_before(limit) {
            self.leading_comments_only(limit, blank);
        }
    }

    fn leading_comments_only(&mut self, limit: usize, blank: Blank) {
        if !self.line_start || self.needs_newline {
            self.newline();
        }
        while self.pending_before(limit) {
            self.own_line_comment(blank);
        }
    }
}

impl Blank {
    /// After the first line of a group, `Force` becomes `Preserve`; `Never` stays `Never`.
    fn min_with(self, first: Blank) -> Blank {
        if first == Blank::Never {
            Blank::Never
        } else {
            self
        }
    }
}

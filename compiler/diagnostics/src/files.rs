//! Source files known to a compilation, and byte spans into them.

use serde::Serialize;

/// Index of a file in [`Files`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
pub struct FileId(pub u32);

/// A half-open byte range `start..end` within one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        debug_assert!(start <= end, "span {start}..{end} is reversed");
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    /// An empty span at `offset` (a point, e.g. "expected `}` here").
    pub fn point(offset: usize) -> Self {
        Span::new(offset, offset)
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    /// This span moved `by` bytes to the right (for text parsed from a slice of a file).
    pub fn shifted(self, by: usize) -> Span {
        Span {
            start: self.start + by as u32,
            end: self.end + by as u32,
        }
    }

    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }

    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// A 1-based line and column; the column counts characters, not bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LineCol {
    pub line: u32,
    pub column: u32,
}

/// One source file: the name shown to users and its text.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
    line_starts: Vec<u32>,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i as u32 + 1))
            .collect();
        SourceFile {
            name: name.into(),
            text,
            line_starts,
        }
    }

    /// Line and column of a byte offset (clamped to the text, snapped back to a char boundary).
    pub fn line_col(&self, offset: u32) -> LineCol {
        let mut offset = (offset as usize).min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_starts.partition_point(|&s| s as usize <= offset) - 1;
        let start = self.line_starts[line] as usize;
        let column = self.text[start..offset].chars().count();
        LineCol {
            line: line as u32 + 1,
            column: column as u32 + 1,
        }
    }

    /// The text of a span (empty when it does not fall on char boundaries inside the file).
    pub fn slice(&self, span: Span) -> &str {
        self.text.get(span.range()).unwrap_or("")
    }
}

/// All files of one compilation, addressed by [`FileId`].
#[derive(Clone, Debug, Default)]
pub struct Files {
    files: Vec<SourceFile>,
}

impl Files {
    pub fn new() -> Self {
        Files::default()
    }

    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> FileId {
        self.files.push(SourceFile::new(name, text));
        FileId(self.files.len() as u32 - 1)
    }

    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id.0 as usize]
    }

    pub fn iter(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, f)| (FileId(i as u32), f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters_not_bytes() {
        let f = SourceFile::new("a.rl", "ab\nμx = 1\n");
        assert_eq!(f.line_col(0), LineCol { line: 1, column: 1 });
        assert_eq!(f.line_col(3), LineCol { line: 2, column: 1 });
        // `x` follows the two-byte `μ`: byte 5, character column 2.
        assert_eq!(f.line_col(5), LineCol { line: 2, column: 2 });
        // An offset inside `μ` snaps back to its start.
        assert_eq!(f.line_col(4), LineCol { line: 2, column: 1 });
        assert_eq!(f.line_col(999), LineCol { line: 3, column: 1 });
    }
}

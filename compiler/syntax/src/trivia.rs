//! Comments, which the grammar skips: the formatter puts them back and the parser reads
//! documentation from them.

use crate::ast::Span;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommentKind {
    /// `// …`
    Line,
    /// `/// …`, documents the next item.
    Doc,
    /// `//! …`, documents the module.
    ModuleDoc,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comment {
    pub kind: CommentKind,
    /// From the first `/` to the end of the line (the new line excluded).
    pub span: Span,
    pub text: String,
}

/// Where the string literal whose `"` is at `open` stops: at its closing `"`, at the end of
/// its line when it is unterminated (as in the grammar), or at or past the end of `bytes`. A
/// `\` escapes the byte after it.
pub(crate) fn string_end(bytes: &[u8], open: usize) -> usize {
    let mut i = open + 1;
    while i < bytes.len() && bytes[i] != b'"' && bytes[i] != b'\n' {
        i += if bytes[i] == b'\\' { 2 } else { 1 };
    }
    i
}

/// Every comment of `src`, in order. Strings are skipped so that `"http://x"` is not a comment;
/// an unterminated string ends at its line, as in the grammar.
pub fn comments(src: &str) -> Vec<Comment> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => i = string_end(bytes, i) + 1,
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                let end = src[i..].find('\n').map_or(src.len(), |n| i + n);
                let text = &src[i..end];
                let kind = if text.starts_with("///") && !text.starts_with("////") {
                    CommentKind::Doc
                } else if text.starts_with("//!") {
                    CommentKind::ModuleDoc
                } else {
                    CommentKind::Line
                };
                out.push(Comment {
                    kind,
                    span: Span::new(i, end),
                    text: text.trim_end().to_string(),
                });
                i = end;
            }
            _ => i += 1,
        }
    }
    out
}

/// Replaces the bytes of every comment in `text[from..]` with spaces, scanning from `from` as
/// [`comments`] does (strings skipped; offsets unchanged). The parser reads this text, so that
/// its grammar need not try a comment at every token (a tenth of parsing). `text` holds a copy
/// of the source. Returns whether a string ran on past the end of a line (after a `\`): only
/// then may a scan that starts at a later line, as the parser does after a syntax error, read a
/// `"` differently.
pub(crate) fn blank_comments(text: &mut [u8], from: usize) -> bool {
    let mut runs_on = false;
    let mut i = from;
    while i < text.len() {
        match text[i] {
            b'"' => {
                i += 1;
                while i < text.len() && text[i] != b'"' && text[i] != b'\n' {
                    if text[i] == b'\\' && text.get(i + 1) == Some(&b'\n') {
                        runs_on = true;
                    }
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'/' if text.get(i + 1) == Some(&b'/') => {
                while i < text.len() && text[i] != b'\n' {
                    text[i] = b' ';
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    runs_on
}

/// The text of a doc comment without its marker and the one space after it.
pub fn doc_text(comment: &Comment) -> &str {
    let body = &comment.text[3..];
    body.strip_prefix(' ').unwrap_or(body)
}

/// Skips white space and comments from `pos`; returns the offset of the next token.
pub fn skip(src: &str, mut pos: usize) -> usize {
    let bytes = src.as_bytes();
    while pos < bytes.len() {
        match bytes[pos] {
            b' ' | b'\t' | b'\r' | b'\n' => pos += 1,
            b'/' if bytes.get(pos + 1) == Some(&b'/') => {
                pos = src[pos..].find('\n').map_or(src.len(), |n| pos + n);
            }
            _ => break,
        }
    }
    pos
}

/// The end of the last token before `at`, skipping white space and comments (not before
/// `floor`).
pub fn previous_token_end(src: &str, floor: usize, at: usize) -> usize {
    let mut end = at;
    loop {
        let before = src[floor..end].trim_end();
        let line_start = before.rfind('\n').map_or(0, |n| n + 1);
        match comment_start(&before[line_start..]) {
            Some(c) => end = floor + line_start + c,
            None => return floor + before.len(),
        }
    }
}

/// Where a `//` comment starts in one line, outside strings.
fn comment_start(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_comments_outside_strings() {
        let src = "let a = \"http://x\" // note\n/// doc\n//! mod\n//// rule\n";
        let kinds: Vec<_> = comments(src)
            .into_iter()
            .map(|c| (c.kind, c.text))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (CommentKind::Line, "// note".to_string()),
                (CommentKind::Doc, "/// doc".to_string()),
                (CommentKind::ModuleDoc, "//! mod".to_string()),
                (CommentKind::Line, "//// rule".to_string()),
            ]
        );
    }

    #[test]
    fn previous_token_end_skips_space_and_comments() {
        let src = "a = f(x) // note \"q\"\n  \n";
        assert_eq!(previous_token_end(src, 0, src.len()), 8);
        assert_eq!(previous_token_end("s = \"a//b\"  ", 0, 12), 10);
    }

    #[test]
    fn blanking_keeps_offsets_and_strings() {
        let src = "a = \"http://x\" // é note\nb // c";
        let mut text = src.as_bytes().to_vec();
        assert!(!blank_comments(&mut text, 0));
        let blank = |s: &str| " ".repeat(s.len());
        assert_eq!(
            String::from_utf8(text).unwrap(),
            format!(
                "a = \"http://x\" {}\nb {}",
                blank("// é note"),
                blank("// c")
            )
        );
        let mut run_on = b"s = \"a\\\n// b\"".to_vec();
        assert!(blank_comments(&mut run_on, 0));
        assert_eq!(run_on, b"s = \"a\\\n// b\"");
    }

    #[test]
    fn skip_passes_comments_and_space() {
        assert_eq!(skip("  // a\n\t x", 0), 9);
        assert_eq!(skip("// only", 0), 7);
    }
}

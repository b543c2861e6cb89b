//! Positions and addresses: byte offsets ↔ LSP positions (0-based line, UTF-16 code units),
//! file paths ↔ `file:` URIs, and the on-disk copy of the embedded std library.

use lsp_types::{Position, Range, Uri};
use rlc_diagnostics::Span;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Line starts of one text, for converting between byte offsets and LSP positions.
pub struct LineIndex<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
    /// Per line, whether it is all ASCII (a byte is a UTF-16 unit): positions on such lines
    /// take no walk along the line, which matters on a line of megabytes.
    ascii: Vec<bool>,
}

impl<'a> LineIndex<'a> {
    pub fn new(text: &'a str) -> Self {
        let line_starts: Vec<usize> = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        let ascii = line_starts
            .iter()
            .enumerate()
            .map(|(i, &start)| {
                let end = line_starts.get(i + 1).map_or(text.len(), |&next| next);
                text.as_bytes()[start..end].is_ascii()
            })
            .collect();
        LineIndex {
            text,
            line_starts,
            ascii,
        }
    }

    /// The position of a byte offset (clamped to the text, snapped back to a char boundary).
    pub fn position(&self, offset: usize) -> Position {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line];
        let character: usize = if self.ascii[line] {
            offset - start
        } else {
            self.text[start..offset].chars().map(char::len_utf16).sum()
        };
        Position::new(line as u32, character as u32)
    }

    pub fn range(&self, span: Span) -> Range {
        Range::new(
            self.position(span.start as usize),
            self.position(span.end as usize),
        )
    }

    /// The byte offset of a position. A line past the end gives the end of the text; a
    /// character past the end of its line gives the end of the line; a position inside a
    /// surrogate pair gives the start of its character.
    pub fn offset(&self, pos: Position) -> usize {
        let Some(&start) = self.line_starts.get(pos.line as usize) else {
            return self.text.len();
        };
        let end = self
            .line_starts
            .get(pos.line as usize + 1)
            .map_or(self.text.len(), |&next| next - 1);
        if self.ascii[pos.line as usize] {
            return start + (pos.character as usize).min(end - start);
        }
        let mut units = 0usize;
        for (i, c) in self.text[start..end].char_indices() {
            let next = units + c.len_utf16();
            if next > pos.character as usize {
                return start + i;
            }
            units = next;
        }
        end
    }

    /// The range covering the whole text.
    pub fn full_range(&self) -> Range {
        Range::new(Position::new(0, 0), self.position(self.text.len()))
    }
}

/// The positions of byte offsets given in increasing order (each clamped to the text and
/// snapped back to a char boundary, as [`LineIndex::position`]), in one pass over the text:
/// one [`LineIndex::position`] at a time walks its line, which for many offsets on one long
/// line (a minified or adversarial document) adds up to the square of the line's length. An
/// offset before the previous one starts the walk again from the top.
pub fn positions_in_order(text: &str, offsets: impl IntoIterator<Item = usize>) -> Vec<Position> {
    let (mut at, mut line, mut character) = (0usize, 0u32, 0u32);
    let mut out = Vec::new();
    for offset in offsets {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        if offset < at {
            (at, line, character) = (0, 0, 0);
        }
        for c in text[at..offset].chars() {
            if c == '\n' {
                line += 1;
                character = 0;
            } else {
                character += c.len_utf16() as u32;
            }
        }
        at = offset;
        out.push(Position::new(line, character));
    }
    out
}

/// The file-system path a `file:` URI names (percent-decoded), or `None` for another scheme.
pub fn uri_to_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    // `file:///path` (empty host) or `file://localhost/path`.
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    let decoded = percent_decode(rest)?;
    // `/C:/dir` on Windows is the path `C:/dir`.
    let bytes = decoded.as_bytes();
    if bytes.len() >= 3 && bytes[0] == b'/' && bytes[2] == b':' && bytes[1].is_ascii_alphabetic() {
        return Some(PathBuf::from(&decoded[1..]));
    }
    Some(PathBuf::from(decoded))
}

/// The `file:` URI of an absolute path.
pub fn path_to_uri(path: &Path) -> Option<Uri> {
    let text = path.to_string_lossy().replace('\\', "/");
    let mut out = String::from("file://");
    if !text.starts_with('/') {
        out.push('/');
    }
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Uri::from_str(&out).ok()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The directory the embedded std library is written to, so that go-to-definition into std
/// gives ordinary `file:` URIs every editor opens: `$XDG_CACHE_HOME/rlc/std-<version>-<hash>`
/// (else `~/.cache/…`, else the temporary directory). The hash of the sources keeps builds with
/// different std libraries apart; the files are written once and made read-only, since editing
/// them changes nothing (std is embedded in the compiler).
pub fn std_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    // FNV-1a over every module's name and text.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (module, _, text) in rlc_check::std_lib::STD_MODULES {
        for b in module.bytes().chain(text.bytes()) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    base.join("rlc")
        .join(format!("std-{}-{hash:016x}", env!("CARGO_PKG_VERSION")))
}

/// Writes the std sources under [`std_dir`] if they are not there yet; returns the directory.
/// A failure only costs go-to-definition into std, so it is reported, not fatal.
pub fn materialize_std() -> Result<PathBuf, String> {
    let dir = std_dir();
    for (_, name, text) in rlc_check::std_lib::STD_MODULES {
        let path = std_file(&dir, name);
        if std::fs::read_to_string(&path).is_ok_and(|t| t == *text) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create `{}`: {e}", parent.display()))?;
        }
        let tmp = path.with_extension("rl.tmp");
        std::fs::write(&tmp, text).map_err(|e| format!("cannot write `{}`: {e}", tmp.display()))?;
        if let Ok(meta) = std::fs::metadata(&tmp) {
            let mut perms = meta.permissions();
            perms.set_readonly(true);
            let _ = std::fs::set_permissions(&tmp, perms);
        }
        std::fs::rename(&tmp, &path)
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    }
    Ok(dir)
}

/// Where std file `<std>/std/algo.rl` lies under `dir`.
pub fn std_file(dir: &Path, file_name: &str) -> PathBuf {
    dir.join(file_name.strip_prefix("<std>/").unwrap_or(file_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_utf16_units() {
        // `μ` is 2 bytes and 1 UTF-16 unit; `𝔵` is 4 bytes and 2 units.
        let text = "ab\nμ𝔵 = 1\nlast";
        let index = LineIndex::new(text);
        assert_eq!(index.position(0), Position::new(0, 0));
        assert_eq!(index.position(3), Position::new(1, 0));
        assert_eq!(index.position(5), Position::new(1, 1));
        assert_eq!(index.position(9), Position::new(1, 3));
        // Inside `𝔵`: snaps back to its start.
        assert_eq!(index.position(7), Position::new(1, 1));
        assert_eq!(index.position(999), Position::new(2, 4));
        for offset in [0, 3, 5, 9, 10, 14, 18] {
            assert_eq!(index.offset(index.position(offset)), offset, "{offset}");
        }
        // Inside the surrogate pair: the start of `𝔵`.
        assert_eq!(index.offset(Position::new(1, 2)), 5);
        // Past the end of a line: its end; past the last line: the end of the text.
        assert_eq!(index.offset(Position::new(0, 40)), 2);
        assert_eq!(index.offset(Position::new(9, 0)), text.len());
    }

    #[test]
    fn positions_in_order_agree_with_one_at_a_time() {
        let text = "ab\nμ𝔵 = 1\r\nlast";
        let index = LineIndex::new(text);
        let offsets: Vec<usize> = (0..=text.len() + 2).chain([3, 0, 9]).collect();
        let want: Vec<Position> = offsets.iter().map(|&o| index.position(o)).collect();
        assert_eq!(positions_in_order(text, offsets), want);
    }

    #[test]
    fn file_uris_round_trip() {
        let path = Path::new("/tmp/my dir/μ.rl");
        let uri = path_to_uri(path).unwrap();
        assert_eq!(uri.as_str(), "file:///tmp/my%20dir/%CE%BC.rl");
        assert_eq!(uri_to_path(uri.as_str()).unwrap(), path);
        assert_eq!(
            uri_to_path("file:///C:/x/a.rl").unwrap(),
            PathBuf::from("C:/x/a.rl")
        );
        assert!(uri_to_path("untitled:Untitled-1").is_none());
    }
}

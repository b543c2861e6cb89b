//! The registry of diagnostic codes. A code, once published, keeps its meaning forever; every
//! code has an explain page (`explain/<ID>.md`) with what it means, why, a wrong and a fixed
//! example. Ranges: E01xx syntax, E02xx names and modules, E03xx types, E04xx roles,
//! E05xx placement, E06xx batch arithmetic, E07xx algorithm sanity, E08xx memory, W… warnings.

use crate::Severity;
use serde::Serialize;

/// What the registry knows about one code.
#[derive(Debug)]
pub struct CodeInfo {
    pub code: Code,
    /// The stable identifier users see, e.g. `E0103`.
    pub id: &'static str,
    pub severity: Severity,
    /// A one-line summary (shown by `rlc explain --list`).
    pub title: &'static str,
    /// The explain page, Markdown.
    pub explain: &'static str,
}

macro_rules! codes {
    ($( $variant:ident = $id:literal, $severity:ident, $title:literal; )*) => {
        /// A stable diagnostic code.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code { $($variant,)* }

        /// Every code, in the order of [`Code`]'s variants.
        pub static CODES: &[CodeInfo] = &[
            $(CodeInfo {
                code: Code::$variant,
                id: $id,
                severity: Severity::$severity,
                title: $title,
                explain: include_str!(concat!("../explain/", $id, ".md")),
            },)*
        ];
    };
}

codes! {
    // Syntax.
    UnexpectedToken = "E0101", Error, "unexpected token";
    UnclosedDelimiter = "E0102", Error, "unclosed delimiter";
    YamlStyleField = "E0103", Error, "`key: value` where the language wants `key = value`";
    AssignInExpression = "E0104", Error, "`=` where `==` is meant";
    KeywordAsName = "E0105", Error, "a keyword used as a name";
    UnterminatedString = "E0106", Error, "unterminated string";
    InvalidNumber = "E0107", Error, "invalid number literal";
    UnknownUnit = "E0108", Error, "unknown unit suffix on a number";
    UnmatchedCloser = "E0109", Error, "closing delimiter with no opening one";
    Semicolon = "E0110", Error, "`;` is not used in rl";
    ForeignSyntax = "E0111", Error, "a construct from another language";
    HashComment = "E0112", Error, "`#` comment";
    SingleQuotedString = "E0113", Error, "single-quoted string";
    InvalidEscape = "E0114", Error, "invalid escape in a string";
    ChainedComparison = "E0115", Error, "chained comparison";
    InvalidCharacter = "E0116", Error, "a character that cannot appear in rl source";
    ExpectedItem = "E0117", Error, "expected an item at the top level";
    CommaBetweenFields = "E0118", Error, "`,` between `key = value` fields";
    UnknownLayout = "E0119", Error, "unknown parallel layout";
    EmptyFile = "W0101", Warning, "file declares nothing";
}

impl CodeInfo {
    /// The program of the page's `## Wrong` section (the first fenced block after the heading),
    /// which produces this code.
    pub fn wrong_example(&self) -> Option<&'static str> {
        example(self.explain, "## Wrong")
    }

    /// The program of the page's `## Fixed` section, the corrected `## Wrong` one, which
    /// produces no diagnostic.
    pub fn fixed_example(&self) -> Option<&'static str> {
        example(self.explain, "## Fixed")
    }
}

/// The body of the first fenced code block after the line `heading`.
fn example(page: &'static str, heading: &str) -> Option<&'static str> {
    let at = page.find(&format!("\n{heading}\n"))? + heading.len() + 2;
    let rest = &page[at..];
    let open = rest.find("```")?;
    let body = open + rest[open..].find('\n')? + 1;
    let close = if rest[body..].starts_with("```") {
        body
    } else {
        body + rest[body..].find("\n```")? + 1
    };
    Some(&rest[body..close])
}

impl Code {
    pub fn info(self) -> &'static CodeInfo {
        &CODES[self as usize]
    }

    pub fn as_str(self) -> &'static str {
        self.info().id
    }

    /// Looks a code up by its identifier, ignoring ASCII case (`e0103` finds `E0103`).
    pub fn parse(id: &str) -> Option<Code> {
        CODES
            .iter()
            .find(|c| c.id.eq_ignore_ascii_case(id))
            .map(|c| c.code)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_in_variant_order_with_unique_ids() {
        let mut seen = std::collections::BTreeSet::new();
        for (i, info) in CODES.iter().enumerate() {
            assert_eq!(info.code as usize, i, "{} is out of order", info.id);
            assert!(seen.insert(info.id), "{} is listed twice", info.id);
            let prefix = match info.severity {
                Severity::Error => 'E',
                Severity::Warning => 'W',
                Severity::Note => 'N',
            };
            assert!(
                info.id.starts_with(prefix),
                "{} does not match its severity",
                info.id
            );
        }
    }

    #[test]
    fn every_explain_page_has_a_title_and_both_examples() {
        for info in CODES {
            let page = info.explain;
            assert!(
                page.starts_with(&format!("# {}", info.id)),
                "{}: page must start with `# {}`",
                info.id,
                info.id
            );
            assert!(
                page.contains("## Wrong"),
                "{}: page lacks a `## Wrong` example",
                info.id
            );
            assert!(
                page.contains("## Fixed"),
                "{}: page lacks a `## Fixed` example",
                info.id
            );
        }
    }

    #[test]
    fn parse_is_case_insensitive() {
        assert_eq!(Code::parse("e0103"), Some(Code::YamlStyleField));
        assert_eq!(Code::parse("E9999"), None);
    }
}

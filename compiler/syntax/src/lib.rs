//! The rl language's syntax: the grammar (`grammar/rl.pest`), the syntax tree, a parser that
//! reports every syntax error of a file in one run, and the canonical formatter.
//!
//! Parsing never panics and always returns a [`Module`] (with the items it could read) and the
//! diagnostics; no pest type escapes this crate.

pub mod ast;
pub mod format;
mod grammar;
mod lower;
mod syntax_error;
pub mod trivia;

pub use syntax_error::closest;

use ast::{ITEM_KEYWORDS, Ident, Item, Module, Span};
use grammar::{RlParser, Rule};
use lower::Lowerer;
use pest::Parser;
use pest::error::{ErrorVariant, InputLocation};
use rlc_diagnostics::{Code, Diagnostic, FileId};
use std::collections::BTreeSet;
use trivia::{Comment, CommentKind};

/// The result of parsing one file.
#[derive(Clone, Debug)]
pub struct Parsed {
    pub module: Module,
    pub comments: Vec<Comment>,
    pub diagnostics: Vec<Diagnostic>,
    /// The items that a syntax error cut short, in source order: missing from `module`, but
    /// what their first words say lets later passes stay silent about the names they declare.
    pub broken: Vec<Broken>,
    /// Indices in `module.items` of the items that parsed but hold an expression the lowering
    /// refused (E01xx, read as a placeholder such as `0`): what they declare is unknown.
    pub refused: Vec<usize>,
}

/// An item that a syntax error cut short, as far as its first words tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    /// The item keyword it starts with (`model`, `fn`, `place`, …; `pub` skipped), if any.
    pub keyword: Option<&'static str>,
    /// The name it declares (`policy` in `model policy = …`), when the text got that far; for
    /// text that starts with no item keyword, its second word (`modle policy = …`).
    pub name: Option<Ident>,
    /// From its first word to where parsing resumed.
    pub span: Span,
}

impl Broken {
    /// Whether nothing tells which names it declared (an `import`, text without a name, a file
    /// refused whole): every unknown name of its module may be one of them.
    pub fn declares_unknown(&self) -> bool {
        self.name.is_none() && self.keyword != Some("place")
    }

    /// Reads what the broken text `src[start..end]` starts with.
    fn read(src: &str, start: usize, end: usize) -> Self {
        let word = |at: usize| -> (usize, usize) {
            let at = skip_blanks(src, at, end);
            let len = src[at..end]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(end - at);
            (at, at + len)
        };
        let (mut a, mut b) = word(start);
        if &src[a..b] == "pub" {
            (a, b) = word(b);
        }
        let first = &src[a..b];
        let keyword = ITEM_KEYWORDS
            .iter()
            .copied()
            .find(|k| *k == first && *k != "pub");
        let (na, nb) = word(b);
        let name = src[na..nb]
            .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            .then(|| Ident {
                name: src[na..nb].to_string(),
                span: Span::new(na, nb),
            })
            .filter(|_| a < b && !matches!(keyword, Some("import" | "place")));
        Broken {
            keyword,
            name,
            span: Span::new(a, end.max(a)),
        }
    }
}

/// `at` moved past spaces and tabs on the same line (not past `end`).
fn skip_blanks(src: &str, at: usize, end: usize) -> usize {
    at + src[at..end]
        .find(|c: char| c != ' ' && c != '\t')
        .unwrap_or(end - at)
}

/// Brackets nested deeper than this are refused before parsing (E0120), so that no input can
/// exhaust the stack of the (recursive) parser. Brackets in strings and comments do not count.
pub const MAX_NESTING: usize = 128;

pub use lower::{MAX_CHAIN, MAX_DEPTH};

/// Parses one file. Items are read one at a time; after a syntax error the parser resumes at the
/// next line that starts with an item keyword, so one run reports the errors of every item.
pub fn parse(file: FileId, src: &str) -> Parsed {
    let comments = trivia::comments(src);
    let mut diagnostics = Vec::new();
    let mut items = Vec::new();
    let mut broken = Vec::new();
    let mut refused = Vec::new();

    let mut text = Blanked::new(src);
    if let Some(at) = too_deep(&text.text) {
        diagnostics.push(
            Diagnostic::new(
                Code::NestedTooDeep,
                format!("brackets nested more than {MAX_NESTING} deep"),
                file,
                Span::new(at, at + 1),
            )
            .primary_label("too deep")
            .help("split the expression with `let` bindings"),
        );
        broken.push(Broken {
            keyword: None,
            name: None,
            span: Span::new(0, src.len()),
        });
        return Parsed {
            module: Module {
                doc: None,
                items,
                span: Span::new(0, src.len()),
            },
            comments,
            diagnostics,
            broken,
            refused,
        };
    }

    let mut pos = trivia::skip(src, 0);
    while pos < src.len() {
        let mut restart = false;
        match parse_item(src, &text.text, pos) {
            Ok(mut pairs) => {
                let entry = pairs.next().expect("grammar: item_entry");
                let item_pair = entry
                    .into_inner()
                    .next()
                    .expect("grammar: item_entry holds an item");
                let end = pos + item_pair.as_span().end();
                let before = diagnostics.len();
                let mut lowerer = Lowerer {
                    file,
                    src,
                    blanked: text.exact(),
                    offset: pos,
                    diagnostics: &mut diagnostics,
                    depth: Default::default(),
                };
                let item = lowerer.item(item_pair);
                if diagnostics[before..].iter().any(Diagnostic::is_error) {
                    refused.push(items.len());
                }
                items.push(item);
                pos = trivia::skip(src, end);
            }
            Err(_) => {
                let err = detailed_error(&text.text[pos..]);
                let (at, rules, tokens) = furthest_failure(&err, &src[pos..]);
                let at = pos + at;
                // A complete item followed by something that starts no item: keep the item and
                // report the stray text on its own.
                let mut start = pos;
                let before = diagnostics.len();
                if let Some((item, end)) =
                    complete_item_ending_at(file, src, &text.text, pos, at, &mut diagnostics)
                {
                    if diagnostics[before..].iter().any(Diagnostic::is_error) {
                        refused.push(items.len());
                    }
                    items.push(item);
                    start = end;
                }
                diagnostics.push(syntax_error::diagnose(
                    file, src, start, at, &rules, &tokens,
                ));
                let resume = resume_point(src, pos, at);
                broken.push(Broken::read(
                    src,
                    trivia::skip(src, start).min(resume),
                    resume,
                ));
                pos = resume;
                restart = true;
            }
        }
        if restart {
            text.restart(src, pos);
        }
    }

    attach_docs(&mut items, &comments, src);
    let doc = module_doc(&comments);
    if items.is_empty() && diagnostics.is_empty() {
        diagnostics.push(
            Diagnostic::new(
                Code::EmptyFile,
                "this file declares nothing",
                file,
                Span::point(0),
            )
            .primary_label("empty module")
            .help("a module holds items: `import`, `model`, `fn`, `pipeline`, …"),
        );
    }
    Parsed {
        module: Module {
            doc,
            items,
            span: Span::new(0, src.len()),
        },
        comments,
        diagnostics,
        broken,
        refused,
    }
}

/// The text the grammar reads: the source with its comments blanked out (offsets unchanged; see
/// [`trivia::blank_comments`]).
struct Blanked {
    text: String,
    /// A string ran on past the end of a line: after a syntax error the comments are found
    /// again from where the parser starts afresh.
    runs_on: bool,
}

impl Blanked {
    fn new(src: &str) -> Self {
        let mut bytes = src.as_bytes().to_vec();
        let runs_on = trivia::blank_comments(&mut bytes, 0);
        Blanked {
            text: String::from_utf8(bytes).expect("a comment is blanked whole, to its line end"),
            runs_on,
        }
    }

    /// The text, when its blanks are exactly the comments that a scan of each line finds (no
    /// string runs on past a line end), as `trivia::previous_token_end` scans.
    fn exact(&self) -> Option<&str> {
        (!self.runs_on).then_some(self.text.as_str())
    }

    /// After a syntax error the parser starts again at `pos` as if nothing came before; a scan
    /// for comments that ran through a string which the parser never read must do the same.
    fn restart(&mut self, src: &str, pos: usize) {
        if !self.runs_on {
            return;
        }
        let mut bytes = std::mem::take(&mut self.text).into_bytes();
        bytes[pos..].copy_from_slice(&src.as_bytes()[pos..]);
        trivia::blank_comments(&mut bytes, pos);
        self.text = String::from_utf8(bytes).expect("a comment is blanked whole, to its line end");
    }
}

/// Parses the item at `pos` of `text` (the blanked source). pest indexes the lines of all the input it is given, so each item is
/// first parsed on its own text — up to the next line that starts an item — which keeps parsing
/// linear; only if that fails is the rest of the file tried.
fn parse_item<'t>(
    src: &str,
    text: &'t str,
    pos: usize,
) -> Result<pest::iterators::Pairs<'t, Rule>, pest::error::Error<Rule>> {
    let end = resume_point(src, pos, pos);
    RlParser::parse(Rule::item_entry, &text[pos..end])
        .or_else(|_| RlParser::parse(Rule::item_entry, &text[pos..]))
}

/// Re-parses a failing item with pest's record of what it attempted where. Keeping that record
/// makes every parse about five times slower, so it is on only here. The switch is global to the
/// process; the lock makes sure that a parse which needs the record has it (other parses that
/// run meanwhile only get slower).
fn detailed_error(src: &str) -> pest::error::Error<Rule> {
    static DETAIL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = DETAIL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    pest::set_error_detail(true);
    let result = RlParser::parse(Rule::item_entry, src);
    pest::set_error_detail(false);
    result.expect_err("an item that failed to parse fails again")
}

/// The item at `pos` if it parses and ends, comments aside, exactly at `at`.
fn complete_item_ending_at(
    file: FileId,
    src: &str,
    text: &str,
    pos: usize,
    at: usize,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<(Item, usize)> {
    let pair = RlParser::parse(Rule::item, &text[pos..]).ok()?.next()?;
    let end = pos + pair.as_span().end();
    (trivia::skip(src, end) == at).then(|| {
        let mut lowerer = Lowerer {
            file,
            src,
            blanked: None,
            offset: pos,
            diagnostics,
            depth: Default::default(),
        };
        (lowerer.item(pair), at)
    })
}

/// Where the parse got furthest, and what it would have accepted there: the rules and the
/// literal tokens attempted at that position.
fn furthest_failure(
    err: &pest::error::Error<Rule>,
    src: &str,
) -> (usize, Vec<Rule>, BTreeSet<String>) {
    let loc = match err.location {
        InputLocation::Pos(p) => p,
        InputLocation::Span((s, _)) => s,
    };
    let positives = match &err.variant {
        ErrorVariant::ParsingError { positives, .. } => positives.clone(),
        ErrorVariant::CustomError { .. } => Vec::new(),
    };
    let Some(attempts) = err.parse_attempts() else {
        return (loc, positives, BTreeSet::new());
    };
    let at = attempts.max_position.max(loc);
    let mut rules: Vec<Rule> = attempts
        .call_stacks()
        .iter()
        .filter_map(|c| c.deepest.get_rule().copied())
        .collect();
    let tokens = syntax_error::with_all_operators(
        attempts
            .expected_tokens()
            .into_iter()
            .map(|t| t.to_string())
            .filter(|t| is_literal_token(t)),
    );
    // The end of a keyword tried in a look-ahead (`!keyword`) is no place to report an error:
    // nothing but word characters was expected there. Fall back to where the rule failed.
    // Likewise a keyword that stands where a name is used: report it at its start.
    let keyword_between = src
        .get(loc..at)
        .is_some_and(|w| ast::KEYWORDS.contains(&w.trim()));
    let only_word_characters = tokens.is_empty()
        && rules.iter().all(|r| {
            matches!(
                r,
                Rule::keyword | Rule::item_start | Rule::item_entry | Rule::log_fn
            )
        });
    if keyword_between || only_word_characters {
        return (loc, positives, BTreeSet::new());
    }
    if at == loc {
        rules.extend(positives);
    }
    (at, rules, tokens)
}

/// pest's token type is private; its text form is the literal, except for character ranges
/// (`a..z`) and built-in rules, which say nothing useful to a user.
fn is_literal_token(t: &str) -> bool {
    let is_range = t.chars().count() == 4 && t.chars().skip(1).take(2).eq("..".chars());
    let lexical = t.trim().is_empty() || t == "//" || t == "_";
    !(is_range || lexical || t == "BUILTIN_RULE")
}

/// Where to continue after a syntax error at `at` in the item that starts at `item_start`: the
/// first line at or after the error's line that starts, in column 0, with an item keyword.
fn resume_point(src: &str, item_start: usize, at: usize) -> usize {
    let mut line_start = src[..at.min(src.len())].rfind('\n').map_or(0, |n| n + 1);
    loop {
        if line_start > item_start && starts_item(&src[line_start..]) {
            return line_start;
        }
        match src[line_start..].find('\n') {
            Some(n) => line_start += n + 1,
            None => return src.len(),
        }
    }
}

fn starts_item(line: &str) -> bool {
    if line.starts_with("///") {
        return true;
    }
    let word_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(line.len());
    ITEM_KEYWORDS.contains(&&line[..word_end])
}

/// The offset of the first bracket nested deeper than [`MAX_NESTING`] in `text` (the source
/// with its comments blanked), if any. Strings are skipped as [`trivia::blank_comments`] skips
/// them.
fn too_deep(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => i = trivia::string_end(bytes, i),
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(i);
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Gives each item the `///` comments that stand right above it (only white space between).
fn attach_docs(items: &mut [Item], comments: &[Comment], src: &str) {
    let mut next = 0;
    for item in items.iter_mut() {
        let start = item.span.start as usize;
        let mut lines: Vec<&Comment> = Vec::new();
        while next < comments.len() && (comments[next].span.end as usize) <= start {
            let c = &comments[next];
            let gap_after = &src[c.span.end as usize..next_boundary(comments, next, start)];
            if c.kind == CommentKind::Doc && gap_after.trim().is_empty() {
                lines.push(c);
            } else {
                lines.clear();
            }
            next += 1;
        }
        if !lines.is_empty() {
            item.doc = Some(
                lines
                    .iter()
                    .map(|c| trivia::doc_text(c))
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
        }
    }
}

/// The end of the gap after comment `i`: the next comment's start, or `item_start`.
fn next_boundary(comments: &[Comment], i: usize, item_start: usize) -> usize {
    comments
        .get(i + 1)
        .map_or(item_start, |c| (c.span.start as usize).min(item_start))
}

fn module_doc(comments: &[Comment]) -> Option<String> {
    let lines: Vec<&str> = comments
        .iter()
        .filter(|c| c.kind == CommentKind::ModuleDoc)
        .map(trivia::doc_text)
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

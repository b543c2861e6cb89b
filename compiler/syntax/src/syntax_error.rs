//! Turns pest's "expected rule X" into a diagnostic a person can act on: the expected tokens in
//! words, what was found, and a specific code and hint for the common mistakes.

use crate::ast::{ITEM_KEYWORDS, KEYWORDS, LayoutKind, Span};
use crate::grammar::Rule;
use rlc_diagnostics::{Code, Diagnostic, FileId};
use std::collections::BTreeSet;

const ITEM_EXPECTED: &str = "an item (`import`, `cluster`, `model`, `dataset`, `verifier`, `environment`, `struct`, `fn`, `let`, `place` or `pipeline`)";

/// The token that stands at an error position.
#[derive(Debug)]
pub(crate) struct Found<'s> {
    pub text: &'s str,
    pub span: Span,
    pub kind: TokenKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenKind {
    Eof,
    Word,
    Number,
    Str,
    Punct,
}

impl Found<'_> {
    fn describe(&self) -> String {
        match self.kind {
            TokenKind::Eof => "end of file".into(),
            TokenKind::Word if KEYWORDS.contains(&self.text) => format!("keyword `{}`", self.text),
            TokenKind::Word => format!("`{}`", self.text),
            TokenKind::Number => format!("number `{}`", self.text),
            TokenKind::Str => "a string".into(),
            TokenKind::Punct => format!("`{}`", self.text),
        }
    }
}

/// Reads the token at `at`.
pub(crate) fn token_at(src: &str, at: usize) -> Found<'_> {
    let rest = &src[at..];
    let Some(c) = rest.chars().next() else {
        return Found {
            text: "",
            span: Span::point(at),
            kind: TokenKind::Eof,
        };
    };
    let take = |n: usize, kind| Found {
        text: &rest[..n],
        span: Span::new(at, at + n),
        kind,
    };
    if c.is_ascii_alphabetic() || c == '_' {
        let n = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        return take(n, TokenKind::Word);
    }
    if c.is_ascii_digit() {
        let n = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        return take(n, TokenKind::Number);
    }
    if c == '"' {
        let n = rest[1..]
            .find(['"', '\n'])
            .map_or(rest.len(), |n| n + 2)
            .min(rest.len());
        return take(n, TokenKind::Str);
    }
    for op in ["==", "!=", "<=", ">=", "&&", "||", "..", "->", "=>", ":="] {
        if rest.starts_with(op) {
            return take(2, TokenKind::Punct);
        }
    }
    take(c.len_utf8(), TokenKind::Punct)
}

/// The binary operators, in the order of `infix` in grammar/rl.pest.
const BINARY_OPERATORS: [&str; 14] = [
    "..", "||", "&&", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%",
];

/// pest's expected tokens, with every binary operator where one could have stood. `infix`
/// (grammar/rl.pest) always tries `..`, `||`, `&&`, `==` and `!=`, but the other operators only
/// when the next character starts one of them: where none was read, this adds them, as trying
/// each would have. `||` marks such a place (no other rule expects it).
pub(crate) fn with_all_operators(tokens: impl Iterator<Item = String>) -> BTreeSet<String> {
    let mut tokens: BTreeSet<String> = tokens.collect();
    if tokens.contains("||") {
        tokens.extend(BINARY_OPERATORS.iter().map(|op| op.to_string()));
    }
    tokens
}

/// What the parser would have accepted, in words.
fn expected_words(positives: &[Rule], tokens: &BTreeSet<String>) -> Vec<String> {
    let mut words: BTreeSet<(u8, String)> = BTreeSet::new();
    let mut add = |rank: u8, w: &str| {
        words.insert((rank, w.to_string()));
    };
    let continues_expression = tokens
        .iter()
        .any(|t| matches!(t.as_str(), "+" | "*" | "==" | ".." | "("));
    for rule in positives {
        match rule {
            Rule::expr if continues_expression => add(3, "an operator"),
            Rule::ident => add(2, "a name"),
            Rule::number
            | Rule::string
            | Rule::bool_lit
            | Rule::expr
            | Rule::postfix_expr
            | Rule::paren
            | Rule::record
            | Rule::list
            | Rule::scan_expr
            | Rule::neg_op
            | Rule::not_op => add(1, "an expression"),
            Rule::type_expr => add(1, "a type"),
            Rule::item
            | Rule::pub_kw
            | Rule::import_item
            | Rule::cluster_item
            | Rule::model_item
            | Rule::dataset_item
            | Rule::verifier_item
            | Rule::environment_item
            | Rule::struct_item
            | Rule::fn_item
            | Rule::const_item
            | Rule::place_item
            | Rule::pipeline_item => add(0, ITEM_EXPECTED),
            Rule::field => add(1, "a field (`name = value`)"),
            Rule::let_stmt
            | Rule::assign_stmt
            | Rule::loop_stmt
            | Rule::log_stmt
            | Rule::every_stmt
            | Rule::checkpoint_stmt
            | Rule::emit_stmt
            | Rule::expr_stmt => add(0, "a statement"),
            Rule::layout_kind => add(1, "a layout (`dp`, `tp`, `pp`, `fsdp`, `sp` or `micro`)"),
            Rule::param => add(1, "a parameter"),
            Rule::arg => add(1, "an argument"),
            Rule::range_op
            | Rule::or_op
            | Rule::and_op
            | Rule::eq_op
            | Rule::ne_op
            | Rule::le_op
            | Rule::ge_op
            | Rule::lt_op
            | Rule::gt_op
            | Rule::add_op
            | Rule::sub_op
            | Rule::mul_op
            | Rule::div_op
            | Rule::rem_op => add(3, "an operator"),
            Rule::steps_kw => add(2, "`steps`"),
            Rule::scan_dir => add(2, "`forward` or `reverse`"),
            Rule::over_kw => add(2, "`over`"),
            Rule::dim | Rule::dim_size => add(1, "a dimension (a name or a size)"),
            Rule::record_field => add(1, "a field (`name: value`)"),
            Rule::struct_field => add(1, "a field (`name: Type`)"),
            Rule::import_source | Rule::module_path => add(1, "a module path or a file name"),
            Rule::import_name => add(1, "a name to import"),
            Rule::role_ref => add(1, "a role"),
            Rule::auto_kw => add(2, "`auto`"),
            Rule::carry => add(1, "a carried value (`name = init`)"),
            Rule::EOI => add(4, "end of file"),
            _ => {}
        }
    }
    if tokens
        .iter()
        .any(|t| t != "let" && ITEM_KEYWORDS.contains(&t.as_str()))
    {
        add(0, ITEM_EXPECTED);
    }
    let have = |w: &str| words.iter().any(|(_, x)| x == w);
    let (expr, stmt, item, ops) = (
        have("an expression"),
        have("a statement"),
        have(ITEM_EXPECTED),
        have("an operator"),
    );
    for t in tokens {
        let starts_expr = matches!(
            t.as_str(),
            "(" | "{" | "-" | "!" | "scan" | "true" | "false" | "\""
        );
        let starts_stmt = matches!(
            t.as_str(),
            "let" | "loop" | "log" | "every" | "checkpoint" | "emit"
        );
        let is_op = matches!(
            t.as_str(),
            ".." | "||"
                | "&&"
                | "=="
                | "!="
                | "<="
                | ">="
                | "<"
                | ">"
                | "+"
                | "-"
                | "*"
                | "/"
                | "%"
        );
        let postfix = matches!(t.as_str(), "." | "[" | "(" | "{");
        if (expr && starts_expr)
            || (stmt && (starts_stmt || starts_expr))
            || (item && ITEM_KEYWORDS.contains(&t.as_str()))
            || ((ops || continues_expression) && (is_op || postfix))
            || t == "\n"
        {
            continue;
        }
        let rank = if matches!(t.as_str(), "}" | ")" | "]") {
            4
        } else {
            2
        };
        let word = format!("`{t}`");
        // Skip a token a rule's description already names (`forward` in "`forward` or `reverse`").
        if t == "step" || words.iter().any(|(_, w)| w.contains(&word)) {
            continue;
        }
        words.insert((rank, word));
    }
    // An operator could always continue the expression before the error; say so only when
    // nothing else was expected, or the list hides what is missing.
    if words.iter().any(|(rank, _)| *rank != 3) {
        words.retain(|(rank, _)| *rank != 3);
    }
    words.into_iter().map(|(_, w)| w).collect()
}

fn join_or(words: &[String]) -> String {
    match words {
        [] => "something else".into(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    }
}

/// The innermost bracket opened in `src[from..to]` and not closed before `to`.
fn unclosed_opener(src: &str, from: usize, to: usize) -> Option<(usize, char)> {
    let bytes = src.as_bytes();
    let mut stack: Vec<(usize, char)> = Vec::new();
    let mut i = from;
    while i < to.min(bytes.len()) {
        match bytes[i] {
            b'"' => i = crate::trivia::string_end(bytes, i),
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = src[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            b'{' | b'(' | b'[' => stack.push((i, bytes[i] as char)),
            b'}' | b')' | b']' => {
                stack.pop();
            }
            _ => {}
        }
        i += 1;
    }
    stack.pop()
}

fn closer(opener: char) -> char {
    match opener {
        '{' => '}',
        '(' => ')',
        _ => ']',
    }
}

/// Words from other languages, with what rl writes instead.
pub(crate) fn foreign_word_help(word: &str) -> Option<&'static str> {
    Some(match word {
        "def" | "function" | "func" | "fun" => "functions are declared with `fn`",
        "const" | "var" | "val" => "constants and bindings are declared with `let`",
        "if" | "else" | "elif" => {
            "rl has no `if`: choose element-wise with `where(condition, then, otherwise)`"
        }
        "for" | "while" => "loops are written `loop step in 0..steps { … }`",
        "return" => "a block's value is its last expression: drop `return`",
        "and" => "logical and is written `&&`",
        "or" => "logical or is written `||`",
        "not" => "logical not is written `!`",
        "lambda" => "a block that receives values is written `{ x -> … }` after a call",
        "class" => "records are declared with `struct`",
        "from" => "imports are written `import std.algo { name }`",
        _ => return None,
    })
}

/// The edit distance of `a` and `b` when it is at most `max`, else `None`, in
/// O((|a| + |b|) · max): only cells within `max` of the diagonal can stay within `max`, so a
/// 100 000-character name costs no more than its length (a full table was quadratic).
fn edit_distance_within(a: &str, b: &str, max: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let over = max + 1;
    // `row[j]`: the distance of a[..i] and b[..j], `over` outside the band.
    let mut row: Vec<usize> = (0..=b.len()).map(|j| j.min(over)).collect();
    for i in 1..=a.len() {
        let lo = i.saturating_sub(max).max(1);
        let hi = (i + max).min(b.len());
        let mut diagonal = row[lo - 1];
        row[lo - 1] = if lo == 1 { i.min(over) } else { over };
        let mut best = row[lo - 1];
        for j in lo..=hi {
            let up = row[j];
            let cell = (diagonal + usize::from(a[i - 1] != b[j - 1]))
                .min(row[j - 1] + 1)
                .min(up + 1)
                .min(over);
            diagonal = up;
            row[j] = cell;
            best = best.min(cell);
        }
        if hi < b.len() {
            row[hi + 1] = over;
        }
        if best > max {
            return None;
        }
    }
    Some(row[b.len()]).filter(|&d| d <= max)
}

/// The fix that writes `near` in place of the misspelt word at `span`.
fn rename(d: Diagnostic, file: FileId, span: Span, near: &str) -> Diagnostic {
    let edit = rlc_diagnostics::Edit {
        file,
        span,
        text: near.to_string(),
    };
    d.fix(format!("rename to `{near}`"), vec![edit])
}

/// The closest name within `max` edits, for "did you mean" hints.
pub fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .filter_map(|c| Some((edit_distance_within(word, c, max)?, c)))
        .min()
        .map(|(_, c)| c)
}

/// The word that ends right before `at` (skipping white space), e.g. `if` in `if a > b`.
fn previous_word(src: &str, at: usize) -> Option<(&str, Span)> {
    let before = src[..at].trim_end_matches([' ', '\t']);
    // The character before the word may take several bytes.
    let start = before
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let word = &before[start..];
    (!word.is_empty() && !word.starts_with(|c: char| c.is_ascii_digit()))
        .then(|| (word, Span::new(start, before.len())))
}

fn trivia_skip_spaces(src: &str, from: usize) -> usize {
    from + src[from..].len() - src[from..].trim_start_matches([' ', '\t']).len()
}

/// Builds the diagnostic for a failed parse of the item starting at `item_start`.
pub(crate) fn diagnose(
    file: FileId,
    src: &str,
    item_start: usize,
    at: usize,
    positives: &[Rule],
    tokens: &BTreeSet<String>,
) -> Diagnostic {
    let found = token_at(src, at);
    let expected = expected_words(positives, tokens);
    let expects = |w: &str| expected.iter().any(|e| e == w);
    let expects_closer = expected
        .iter()
        .any(|e| matches!(e.as_str(), "`}`" | "`)`" | "`]`"));
    let generic = format!(
        "expected {}, found {}",
        join_or(&expected),
        found.describe()
    );
    let d = |code: Code, message: String, span: Span| Diagnostic::new(code, message, file, span);
    let line_end = |from: usize| src[from..].find('\n').map_or(src.len(), |n| from + n);

    let line_start = src[..at].rfind('\n').map_or(0, |n| n + 1);
    if let Some(open) = open_string(src, line_start, at) {
        return d(
            Code::UnterminatedString,
            "unterminated string".into(),
            Span::new(open, line_end(open)),
        )
        .primary_label("this string has no closing `\"` on its line")
        .help(
            "close the string with `\"`; a string cannot span lines (write `\\n` for a new line)",
        );
    }
    match (found.kind, found.text) {
        (TokenKind::Punct, "#") => {
            return d(
                Code::HashComment,
                "`#` does not start a comment in rl".into(),
                Span::new(at, line_end(at)),
            )
            .primary_label("this line")
            .help("comments start with `//`");
        }
        (TokenKind::Punct, "'") => {
            return d(
                Code::SingleQuotedString,
                "strings are written in double quotes".into(),
                found.span,
            )
            .primary_label("single quote")
            .help("write \"text\" instead of 'text'");
        }
        (TokenKind::Punct, ";") => {
            return d(Code::Semicolon, "rl does not use `;`".into(), found.span)
                .primary_label("remove this `;`")
                .help("statements end at the end of the line; nothing separates them");
        }
        (TokenKind::Punct, c)
            if !c.is_ascii() || matches!(c, "@" | "$" | "`" | "~" | "?" | "^" | "\\") =>
        {
            return d(
                Code::InvalidCharacter,
                format!("`{c}` cannot appear here: it is not part of rl's syntax"),
                found.span,
            )
            .primary_label("unexpected character");
        }
        _ => {}
    }
    if let Some(first) = foreign_line_start(src, item_start, at) {
        let mut diag = d(
            Code::ForeignSyntax,
            format!("`{}` is not rl syntax", first.text),
            first.span,
        )
        .primary_label("not an rl keyword")
        .help(foreign_word_help(first.text).unwrap_or_default());
        if first.span != found.span {
            diag = diag.label(
                file,
                found.span,
                format!("the parser stopped here: {generic}"),
            );
        }
        return diag;
    }
    match (found.kind, found.text) {
        (TokenKind::Word, w)
            if KEYWORDS.contains(&w)
                && (expects("an expression") || expects("a statement") || expects("a name")) =>
        {
            let mut diag = d(
                Code::KeywordAsName,
                format!("`{w}` is a keyword and cannot be used as a name"),
                found.span,
            )
            .primary_label("keyword")
            .help(format!("choose another name, e.g. `{w}_`"));
            let before = &src[item_start..at];
            let decl = [format!("let {w} "), format!("({w}:"), format!(", {w}:")]
                .iter()
                .find_map(|pat| {
                    before
                        .find(pat.as_str())
                        .map(|i| item_start + i + pat.len() - w.len() - 1)
                });
            if let Some(start) = decl {
                diag = diag.label(file, Span::new(start, start + w.len()), "declared here");
            }
            return diag;
        }
        (TokenKind::Punct, ":") if expects("`=`") || expects("a field (`name = value`)") => {
            let key = previous_word(src, at).map(|(w, _)| w).unwrap_or("key");
            return d(
                Code::YamlStyleField,
                "rl writes `key = value`, not `key: value`".into(),
                found.span,
            )
            .primary_label("expected `=` here")
            .help(format!("write `{key} = …`"));
        }
        (TokenKind::Number | TokenKind::Str, _)
            if src[..at].trim_end().ends_with(':') && !expects("an expression") =>
        {
            let colon = src[..at].trim_end().len() - 1;
            let name = previous_word(src, colon).map(|(w, _)| w).unwrap_or("name");
            return d(
                Code::YamlStyleField,
                "a default value is written with `=`, not `:`".into(),
                Span::new(colon, colon + 1),
            )
            .primary_label("`:` introduces a type")
            .label(file, found.span, "this is a value")
            .help(format!("write `{name} = {}`", found.text));
        }
        (TokenKind::Punct, "=")
            if expects("an operator") || expects("`)`") || expects("`,`") || expects("`]`") =>
        {
            return d(
                Code::AssignInExpression,
                "`=` is not a comparison".into(),
                found.span,
            )
            .primary_label("assignment is not allowed here")
            .help("to compare, write `==`");
        }
        (TokenKind::Punct, ",") if in_field_block(src, item_start, at) => {
            return d(
                Code::CommaBetweenFields,
                "fields of a block are not separated by `,`".into(),
                found.span,
            )
            .primary_label("remove this `,`")
            .help("put each `key = value` on its own line");
        }
        (TokenKind::Word, w) if expects("a layout (`dp`, `tp`, `pp`, `fsdp`, `sp` or `micro`)") => {
            let names = LayoutKind::ALL.map(LayoutKind::as_str);
            let mut diag = d(
                Code::UnknownLayout,
                format!("`{w}` is not a parallel layout"),
                found.span,
            )
            .primary_label("unknown layout");
            diag = match closest(w, names, 2) {
                Some(s) => rename(diag, file, found.span, s).help(format!(
                    "did you mean `{s}`? The layouts are dp, tp, pp, fsdp, sp and micro"
                )),
                None => diag.help("the layouts are dp, tp, pp, fsdp, sp and micro"),
            };
            return diag;
        }
        (TokenKind::Word, w) if foreign_word_help(w).is_some() => {
            return d(
                Code::ForeignSyntax,
                format!("`{w}` is not rl syntax"),
                found.span,
            )
            .primary_label(generic)
            .help(foreign_word_help(w).unwrap());
        }
        (TokenKind::Punct, "=>") if expects("`->`") => {
            return d(
                Code::UnexpectedToken,
                "expected `->`, found `=>`".into(),
                found.span,
            )
            .primary_label("write `->`")
            .help("a block that receives values is written `{ x -> … }`");
        }
        (TokenKind::Punct, "&" | "|") => {
            let op = if found.text == "&" { "&&" } else { "||" };
            return d(
                Code::UnexpectedToken,
                format!("expected {}, found `{}`", join_or(&expected), found.text),
                found.span,
            )
            .primary_label("unexpected token")
            .help(format!("logical operators are written `{op}`"));
        }
        (TokenKind::Number, _)
            if src[..at].ends_with('.')
                && src[..at - 1].ends_with(|c: char| c.is_ascii_digit()) =>
        {
            let start = src[..at - 1]
                .char_indices()
                .rev()
                .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                .map_or(0, |(i, c)| i + c.len_utf8());
            let span = Span::new(start, found.span.end as usize);
            return d(
                Code::InvalidNumber,
                format!("`{}` is not a number", &src[span.range()]),
                span,
            )
            .primary_label("more than one decimal point");
        }
        (TokenKind::Punct, "=") if src[..at].ends_with(':') => {
            return d(
                Code::UnexpectedToken,
                format!("expected {}, found `=`", join_or(&expected)),
                found.span,
            )
            .primary_label("unexpected `=`")
            .help("`:=` is not rl syntax: bind with `let name = value`");
        }
        (TokenKind::Punct, "{") if expects("`steps`") => {}
        (TokenKind::Punct, ".") if src[at + 1..].trim_start().starts_with('{') => {
            return d(
                Code::UnexpectedToken,
                "expected an item, found `.`".into(),
                found.span,
            )
            .primary_label("no `.` before the list of names")
            .help("write `import std.algo { name, other }`");
        }
        _ => {}
    }
    if expects("`steps`")
        && let Some(glued) = src[..at]
            .trim_end()
            .strip_suffix("steps")
            .or_else(|| src[..at].trim_end().strip_suffix("step"))
        && glued.ends_with(|c: char| c.is_ascii_digit())
    {
        let start = glued.len();
        let end = src[..at].trim_end().len();
        return d(
            Code::UnknownUnit,
            format!(
                "`{}` is read as a number with the unit `{}`",
                &src[start - 1..end],
                &src[start..end]
            ),
            Span::new(start, end),
        )
        .primary_label("not a unit")
        .help("put a space between the number and `steps`: `every 5 steps`");
    }
    let first = token_at(src, trivia_skip_spaces(src, line_start));
    if let Some((w, span)) = previous_word(src, at)
        && let Some(help) = foreign_word_help(w)
    {
        return d(Code::ForeignSyntax, format!("`{w}` is not rl syntax"), span)
            .primary_label(format!("read as a name, then {generic}"))
            .label(file, found.span, "the parser stopped here")
            .help(help);
    }
    // A block left open shows up as an error at the end of the file, or on a later line that
    // starts a new item (read as more of the open block).
    let new_item_line = first.kind == TokenKind::Word
        && first.span.start as usize == line_start
        && line_start > item_start
        && ITEM_KEYWORDS.contains(&first.text);
    let unclosed_at = if new_item_line { line_start } else { at };
    let unclosed = unclosed_opener(src, item_start, unclosed_at);
    if let Some((open_at, open)) = unclosed
        && (found.kind == TokenKind::Eof && expects_closer || new_item_line)
    {
        let close = closer(open);
        let (here_span, here) = if new_item_line {
            (
                first.span,
                format!("expected `{close}` before this `{}`", first.text),
            )
        } else {
            (
                found.span,
                format!("expected `{close}` before the end of the file"),
            )
        };
        return d(
            Code::UnclosedDelimiter,
            format!("unclosed `{open}`"),
            Span::new(open_at, open_at + 1),
        )
        .primary_label(format!("this `{open}` is never closed"))
        .label(file, here_span, here)
        .help(format!("add the missing `{close}`"));
    }
    if found.kind == TokenKind::Punct && matches!(found.text, "}" | ")" | "]") && unclosed.is_none()
    {
        return d(
            Code::UnmatchedCloser,
            format!("`{}` closes nothing", found.text),
            found.span,
        )
        .primary_label("no matching opening bracket");
    }
    if expects(ITEM_EXPECTED) && at == item_start {
        let mut diag = d(
            Code::ExpectedItem,
            format!("expected an item, found {}", found.describe()),
            found.span,
        )
        .primary_label("not an item");
        if found.kind == TokenKind::Word
            && let Some(s) = closest(found.text, ITEM_KEYWORDS.iter().copied(), 2)
        {
            diag = rename(diag, file, found.span, s).help(format!("did you mean `{s}`?"));
        } else {
            diag = diag.help("a file is a list of items: `import`, `cluster`, `model`, `dataset`, `verifier`, `environment`, `struct`, `fn`, `let`, `place`, `pipeline`");
        }
        return diag;
    }
    // When the unexpected token is on a later line, what is missing belongs after the previous
    // token: point there (as rustc does) and show the token as a secondary label.
    let prev_end = crate::trivia::previous_token_end(src, item_start, at);
    let diag = if src[prev_end..at].contains('\n') || found.kind == TokenKind::Eof {
        let missing = if expected.is_empty() {
            "something is missing here".to_string()
        } else {
            format!("expected {} here", join_or(&expected))
        };
        let mut diag =
            d(Code::UnexpectedToken, generic, Span::point(prev_end)).primary_label(missing);
        if found.kind != TokenKind::Eof {
            diag = diag.label(file, found.span, format!("unexpected {}", found.describe()));
        }
        diag
    } else {
        d(Code::UnexpectedToken, generic, found.span)
            .primary_label(format!("unexpected {}", found.describe()))
    };
    if expects("`->`") && found.text == "=" {
        return diag.help("a scan's block first names the position: `{ t -> … }`");
    }
    let after_string = src[..at]
        .trim_end()
        .strip_suffix('"')
        .map(|s| &s[s.rfind('"').map_or(0, |q| q + 1)..]);
    match previous_word(src, at) {
        Some(("log", span)) if token_at(src, trivia_skip_spaces(src, line_start)).span == span => {
            diag.help("`log` takes a record: `log { reward: mean(r) }`")
        }
        _ if found.kind == TokenKind::Word && after_string.is_some_and(|s| s.contains(", ") || s.contains(": ")) => {
            diag.help("the string before this word looks like it swallowed code: is a closing `\"` missing earlier?")
        }
        _ if found.kind == TokenKind::Word && after_string.is_some() => diag.help("is a `,` missing before this?"),
        _ if found.text == "{" && src[..at].trim_end().ends_with('.') => {
            diag.help("an import lists names without a `.`: `import std.algo { name, other }`")
        }
        _ => diag,
    }
}

/// The start of a string left open on the line of `at`, if any.
fn open_string(src: &str, line_start: usize, at: usize) -> Option<usize> {
    let line = &src[line_start
        ..line_start
            + src[line_start..]
                .find('\n')
                .unwrap_or(src.len() - line_start)];
    let bytes = line.as_bytes();
    let mut open = None;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if open.is_none() && bytes.get(i + 1) == Some(&b'/') => break,
            b'\\' if open.is_some() => i += 1,
            b'"' => {
                open = if open.is_some() {
                    None
                } else {
                    Some(line_start + i)
                }
            }
            _ => {}
        }
        i += 1;
    }
    open.filter(|&o| o <= at.max(line_start))
}

/// Whether `at` is inside the `{ key = value … }` block of a `cluster`, `model`, `dataset`,
/// `verifier` or `environment`.
fn in_field_block(src: &str, item_start: usize, at: usize) -> bool {
    let Some((open, '{')) = unclosed_opener(src, item_start, at) else {
        return false;
    };
    let head = src[item_start..open].trim_start_matches("pub").trim_start();
    ["cluster", "model", "dataset", "verifier", "environment"]
        .iter()
        .any(|k| head.starts_with(k))
}

/// A line of the item, up to `at`, that starts with a word from another language (`if`, `for`, …).
fn foreign_line_start(src: &str, item_start: usize, at: usize) -> Option<Found<'_>> {
    let mut line_start = item_start;
    let mut last = None;
    while line_start <= at {
        let first = token_at(src, trivia_skip_spaces(src, line_start));
        if first.kind == TokenKind::Word
            && foreign_word_help(first.text).is_some()
            && (first.span.start as usize) <= at
        {
            last = Some(first);
        }
        match src[line_start..].find('\n') {
            Some(n) => line_start += n + 1,
            None => break,
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The banded distance equals the full table's within `max` and says `None` past it.
    #[test]
    fn banded_edit_distance_matches_the_full_table() {
        fn full(a: &str, b: &str) -> usize {
            let b: Vec<char> = b.chars().collect();
            let mut row: Vec<usize> = (0..=b.len()).collect();
            for (i, ca) in a.chars().enumerate() {
                let mut prev = row[0];
                row[0] = i + 1;
                for (j, &cb) in b.iter().enumerate() {
                    let cur = row[j + 1];
                    row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
                    prev = cur;
                }
            }
            row[b.len()]
        }
        let words = [
            "",
            "a",
            "mask",
            "msk",
            "masks",
            "token_mean",
            "tokne_mean",
            "kl_k3",
            "kl",
            "policy",
            "polciy",
            "reference",
            "grpo_advantage",
            "gae",
        ];
        for a in words {
            for b in words {
                for max in 0..4 {
                    let d = full(a, b);
                    assert_eq!(
                        edit_distance_within(a, b, max),
                        (d <= max).then_some(d),
                        "{a} {b} {max}"
                    );
                }
            }
        }
        // A 100 000-character name against another: linear, not quadratic.
        let long = "x".repeat(100_000);
        let other = format!("{}y", "x".repeat(99_999));
        assert_eq!(edit_distance_within(&long, &other, 2), Some(1));
        assert_eq!(closest(&long, ["exact", "mask"], 2), None);
    }
    use crate::grammar::RlParser;
    use pest::Parser;

    /// `BINARY_OPERATORS` is the list `infix` reads, look-ahead included.
    #[test]
    fn binary_operators_are_the_grammars() {
        for op in BINARY_OPERATORS {
            let src = format!("a {op} b");
            let expr = RlParser::parse(Rule::expr, &src).unwrap().next().unwrap();
            assert_eq!(expr.as_str(), src, "`{op}` ends the expression");
            let parts: Vec<_> = expr.into_inner().map(|p| p.as_str().trim()).collect();
            assert_eq!(parts, ["a", op, "b"], "`{op}`");
        }
        let trail = with_all_operators(["||".to_string(), ")".to_string()].into_iter());
        assert!(BINARY_OPERATORS.iter().all(|op| trail.contains(*op)));
        assert!(trail.contains(")"));
        let none = with_all_operators(["+".to_string()].into_iter());
        assert_eq!(none.len(), 1);
    }

    /// The keyword rule's look-ahead lets every keyword through, and no longer word.
    #[test]
    fn keyword_rule_reads_every_keyword() {
        for k in KEYWORDS {
            let read = RlParser::parse(Rule::keyword, k).map(|mut p| p.next().unwrap().as_str());
            assert_eq!(read.ok(), Some(*k), "`{k}` is read as a keyword");
            assert!(RlParser::parse(Rule::keyword, &format!("{k}_x")).is_err());
        }
        for word in ["x", "b", "reward", "Tokens", "_", "logp", "input"] {
            assert!(RlParser::parse(Rule::keyword, word).is_err(), "`{word}`");
        }
    }
}

//! Semantic tokens (`textDocument/semanticTokens/full`), so that an editor without the rl
//! grammar still colours a program, and one with it sees what the names resolve to.
//!
//! The text is scanned once for comments, strings, numbers (with their unit), words and
//! operators; each word the resolver met ([`resolve::occurrences`]) takes the kind of what it
//! stands for (a parameter, a role, a std function, a module, a named dimension…), a reserved
//! or contextual keyword that is not a name is a keyword, and any other word (one inside an
//! item a syntax error cut short) is left to the editor. Tokens never span lines; positions
//! and lengths count UTF-16 units, as every position of this server.

use super::analysis::Analysis;
use super::resolve::{self, Role, Target};
use super::text::positions_in_order;
use lsp_types::{
    SemanticToken, SemanticTokenModifier, SemanticTokenType, SemanticTokens, SemanticTokensLegend,
};
use rlc_syntax::ast::{CONTEXTUAL_KEYWORDS, ItemKind, KEYWORDS};
use std::collections::HashMap;

/// The token types, in the order of their indices in the legend.
const TYPES: [SemanticTokenType; 16] = [
    SemanticTokenType::NAMESPACE,
    SemanticTokenType::TYPE,
    SemanticTokenType::CLASS,
    SemanticTokenType::STRUCT,
    SemanticTokenType::TYPE_PARAMETER,
    SemanticTokenType::PARAMETER,
    SemanticTokenType::VARIABLE,
    SemanticTokenType::PROPERTY,
    SemanticTokenType::ENUM_MEMBER,
    SemanticTokenType::FUNCTION,
    SemanticTokenType::METHOD,
    SemanticTokenType::KEYWORD,
    SemanticTokenType::COMMENT,
    SemanticTokenType::STRING,
    SemanticTokenType::NUMBER,
    SemanticTokenType::OPERATOR,
];

/// Indices into [`TYPES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Namespace,
    Type,
    Class,
    Struct,
    TypeParameter,
    Parameter,
    Variable,
    Property,
    EnumMember,
    Function,
    Method,
    Keyword,
    Comment,
    Str,
    Number,
    Operator,
}

/// The modifiers, bit `i` for the `i`th.
const MODIFIERS: [SemanticTokenModifier; 4] = [
    SemanticTokenModifier::DECLARATION,
    SemanticTokenModifier::READONLY,
    SemanticTokenModifier::DEFAULT_LIBRARY,
    SemanticTokenModifier::DOCUMENTATION,
];
const DECLARATION: u32 = 1;
const READONLY: u32 = 2;
const DEFAULT_LIBRARY: u32 = 4;
const DOCUMENTATION: u32 = 8;

pub fn legend() -> SemanticTokensLegend {
    SemanticTokensLegend {
        token_types: TYPES.to_vec(),
        token_modifiers: MODIFIERS.to_vec(),
    }
}

/// A token before encoding: byte range, kind and modifier bits.
#[derive(Clone, Copy, Debug)]
struct Raw {
    start: usize,
    end: usize,
    kind: Kind,
    modifiers: u32,
}

/// The tokens of the document `a` checked, encoded relative to each other as the protocol
/// asks.
pub fn semantic_tokens(a: &Analysis) -> SemanticTokens {
    let text = &a.files.get(a.root_file()).text;
    let names = classify(a, text);
    let raw = scan(text, &names);
    SemanticTokens {
        result_id: None,
        data: encode(text, &raw),
    }
}

/// What each name the resolver met (by its start) is.
fn classify(a: &Analysis, text: &str) -> HashMap<usize, (Kind, u32)> {
    let modules = &a.checked.modules;
    let occurrences = resolve::occurrences(modules, 0);
    // Locals are parameters or variables, as their declaration says.
    let params: std::collections::HashSet<u32> = occurrences
        .iter()
        .filter(|o| o.role == Role::Param)
        .map(|o| o.span.start)
        .collect();
    let mut out = HashMap::new();
    for o in &occurrences {
        let declares = matches!(o.role, Role::Item | Role::Param | Role::Let);
        let mut modifiers = if declares { DECLARATION } else { 0 };
        let kind = match &o.target {
            Some(Target::Module(_)) => Kind::Namespace,
            Some(Target::Field { .. }) => Kind::Property,
            Some(Target::Local(l)) => {
                if params.contains(&l.ident.span.start) {
                    Kind::Parameter
                } else {
                    Kind::Variable
                }
            }
            Some(Target::Item { module, index }) => {
                let m = modules.get(*module);
                if m.is_std {
                    modifiers |= DEFAULT_LIBRARY;
                }
                match &m.item(*index).kind {
                    ItemKind::Fn(_) | ItemKind::Pipeline(_) | ItemKind::Verifier(_) => {
                        Kind::Function
                    }
                    ItemKind::Model(_) => Kind::Class,
                    ItemKind::Struct(_) => Kind::Struct,
                    ItemKind::Const(_)
                    | ItemKind::Cluster(_)
                    | ItemKind::Dataset(_)
                    | ItemKind::Environment(_) => {
                        modifiers |= READONLY;
                        Kind::Variable
                    }
                    ItemKind::Import(_) | ItemKind::Place(_) => continue,
                }
            }
            None => match o.role {
                Role::Type => {
                    modifiers |= DEFAULT_LIBRARY;
                    Kind::Type
                }
                Role::Dim => Kind::TypeParameter,
                Role::Import => Kind::Namespace,
                Role::Item | Role::Label => Kind::Property,
                Role::Phase => Kind::EnumMember,
                Role::Member if called(text, o.span.end as usize) => Kind::Method,
                Role::Member => Kind::Property,
                // A builtin (`mean`, `adamw`, `f32`), or a name the checker did not find.
                Role::Use | Role::Assign | Role::Param | Role::Let => {
                    modifiers |= DEFAULT_LIBRARY;
                    if called(text, o.span.end as usize) {
                        Kind::Function
                    } else {
                        Kind::Variable
                    }
                }
            },
        };
        out.insert(o.span.start as usize, (kind, modifiers));
    }
    out
}

/// Whether the name ending at `end` is called: `(` follows, spaces aside.
fn called(text: &str, end: usize) -> bool {
    text.get(end..)
        .is_some_and(|rest| rest.trim_start_matches([' ', '\t']).starts_with('('))
}

/// Scans the text into tokens in order.
fn scan(text: &str, names: &HashMap<usize, (Kind, u32)>) -> Vec<Raw> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut push = |start: usize, end: usize, kind: Kind, modifiers: u32| {
        out.push(Raw {
            start,
            end,
            kind,
            modifiers,
        })
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
                let line = &text[i..end];
                let doc = (line.starts_with("///") && !line.starts_with("////"))
                    || line.starts_with("//!");
                let end = i + line.trim_end().len();
                push(
                    start,
                    end,
                    Kind::Comment,
                    if doc { DOCUMENTATION } else { 0 },
                );
                i = end.max(i + 2);
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    i += if b[i] == b'\\' && b.get(i + 1) != Some(&b'\n') {
                        2
                    } else {
                        1
                    };
                }
                if b.get(i) == Some(&b'"') {
                    i += 1;
                }
                let end = i.min(b.len());
                push(start, end, Kind::Str, 0);
                i = end;
            }
            b'0'..=b'9' => {
                while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                    i += 1;
                }
                // A fraction, not the `..` of a range.
                if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                        i += 1;
                    }
                }
                if matches!(b.get(i), Some(b'e' | b'E')) {
                    let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
                    if b.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
                        i += 1 + sign;
                        while i < b.len() && b[i].is_ascii_digit() {
                            i += 1;
                        }
                    }
                }
                // A unit written against the number (`80GiB`).
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
                push(start, i, Kind::Number, 0);
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
                let word = &text[start..i];
                if let Some(&(kind, modifiers)) = names.get(&start) {
                    push(start, i, kind, modifiers);
                } else if KEYWORDS.contains(&word) || CONTEXTUAL_KEYWORDS.contains(&word) {
                    push(start, i, Kind::Keyword, 0);
                }
            }
            _ => {
                let two = text.get(i..i + 2).unwrap_or("");
                let len = if ["==", "!=", "<=", ">=", "&&", "||", "..", "->"].contains(&two) {
                    2
                } else if b"+-*/%<>!=".contains(&c) {
                    1
                } else {
                    0
                };
                if len > 0 {
                    push(start, start + len, Kind::Operator, 0);
                    i += len;
                } else {
                    // Punctuation, white space, or any other character (whole, not a byte).
                    i += text[i..].chars().next().map_or(1, char::len_utf8);
                }
            }
        }
    }
    out
}

/// The protocol's encoding: per token, its line and start relative to the previous token's
/// (the start relative only on the same line), its length, type and modifiers; UTF-16 units.
fn encode(text: &str, raw: &[Raw]) -> Vec<SemanticToken> {
    // Tokens are in order and do not overlap: starts and ends together are in order.
    let positions = positions_in_order(text, raw.iter().flat_map(|t| [t.start, t.end]));
    let mut out = Vec::with_capacity(raw.len());
    let (mut line, mut col) = (0u32, 0u32);
    for (t, pair) in raw.iter().zip(positions.chunks(2)) {
        let (start, end) = (pair[0], pair[1]);
        if end.line != start.line || end.character <= start.character {
            continue;
        }
        let delta_line = start.line - line;
        let delta_start = if delta_line == 0 {
            start.character - col
        } else {
            start.character
        };
        out.push(SemanticToken {
            delta_line,
            delta_start,
            length: end.character - start.character,
            token_type: t.kind as u32,
            token_modifiers_bitset: t.modifiers,
        });
        (line, col) = (start.line, start.character);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legend_lists_each_kind_at_its_index() {
        let kinds = [
            (Kind::Namespace, SemanticTokenType::NAMESPACE),
            (Kind::Type, SemanticTokenType::TYPE),
            (Kind::Class, SemanticTokenType::CLASS),
            (Kind::Struct, SemanticTokenType::STRUCT),
            (Kind::TypeParameter, SemanticTokenType::TYPE_PARAMETER),
            (Kind::Parameter, SemanticTokenType::PARAMETER),
            (Kind::Variable, SemanticTokenType::VARIABLE),
            (Kind::Property, SemanticTokenType::PROPERTY),
            (Kind::EnumMember, SemanticTokenType::ENUM_MEMBER),
            (Kind::Function, SemanticTokenType::FUNCTION),
            (Kind::Method, SemanticTokenType::METHOD),
            (Kind::Keyword, SemanticTokenType::KEYWORD),
            (Kind::Comment, SemanticTokenType::COMMENT),
            (Kind::Str, SemanticTokenType::STRING),
            (Kind::Number, SemanticTokenType::NUMBER),
            (Kind::Operator, SemanticTokenType::OPERATOR),
        ];
        for (kind, ty) in kinds {
            assert_eq!(TYPES[kind as usize], ty);
        }
        for (bit, m) in [
            (DECLARATION, SemanticTokenModifier::DECLARATION),
            (READONLY, SemanticTokenModifier::READONLY),
            (DEFAULT_LIBRARY, SemanticTokenModifier::DEFAULT_LIBRARY),
            (DOCUMENTATION, SemanticTokenModifier::DOCUMENTATION),
        ] {
            assert_eq!(MODIFIERS[bit.trailing_zeros() as usize], m);
        }
    }

    #[test]
    fn numbers_ranges_strings_and_utf16_columns() {
        let text = "let μ = \"é\" // ≈\nx 0..3e-4 80GiB";
        let raw = scan(text, &HashMap::new());
        let kinds: Vec<(&str, Kind)> = raw
            .iter()
            .map(|t| (&text[t.start..t.end], t.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("let", Kind::Keyword),
                ("=", Kind::Operator),
                ("\"é\"", Kind::Str),
                ("// ≈", Kind::Comment),
                ("0", Kind::Number),
                ("..", Kind::Operator),
                ("3e-4", Kind::Number),
                ("80GiB", Kind::Number),
            ]
        );
        let data = encode(text, &raw);
        let rows: Vec<[u32; 3]> = data
            .iter()
            .map(|t| [t.delta_line, t.delta_start, t.length])
            .collect();
        // `μ` is one UTF-16 unit: `=` at column 6, the string at 8 (3 units), the comment at
        // 12 (4 units); then the next line from column 0.
        assert_eq!(
            rows,
            [
                [0, 0, 3],
                [0, 6, 1],
                [0, 2, 3],
                [0, 4, 4],
                [1, 2, 1],
                [0, 1, 2],
                [0, 2, 4],
                [0, 5, 5],
            ]
        );
    }
}

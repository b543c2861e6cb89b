//! Structure-aware mutations. A program is cut into tokens (words, numbers, strings, comments,
//! white space, punctuation; their concatenation is the text) and lines, and mutated at that
//! level: tokens and lines deleted, duplicated, swapped, replaced by words of the corpus;
//! numbers replaced by extreme values; deep nesting, long lines and Unicode inserted; items
//! spliced in from other files. A plan (JSON) is mutated as a JSON tree: numbers at the edges
//! of their types, fields removed, arrays emptied or repeated, strings replaced.

use crate::rng::Rng;
use serde_json::Value;

/// Inputs are cut to this many bytes (at a character boundary), so one input's work stays
/// bounded: the largest mutation (100 000 nested brackets) fits.
pub const MAX_LEN: usize = 1 << 20;

/// Numbers at the edges: zero, negative, the limits of i32/u32/i64/u64, beyond f64, tiny,
/// many digits, with units.
const EXTREME_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2147483647",
    "2147483648",
    "4294967296",
    "9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551616",
    "340282366920938463463374607431768211457",
    "1e400",
    "1e-400",
    "1e308",
    "3.4e38",
    "0.0",
    "-0.0",
    "0.5",
    "1_000_000_000_000",
    "1e18",
    "65536",
    "10000000",
    "1TiB",
    "999999999999TFLOPS",
    "0GiB",
];

/// Characters outside ASCII and awkward ones within it.
const ODD_TEXT: &[&str] = &[
    "é",
    "中文",
    "😀",
    "\u{0301}",
    "\u{200B}",
    "\u{FEFF}",
    "\u{202E}",
    "\r",
    "\t",
    "\0",
    "\\",
    "\"",
    "\r\n",
    "ǅ",
    "ﬁ",
    "𝔁",
    "\u{10FFFF}",
    "#",
    ";",
    "'",
    "`",
    "@",
    "$",
    "~",
    "^",
];

/// Operators and brackets, to insert or to replace one with another.
const PUNCT: &[&str] = &[
    "(", ")", "[", "]", "{", "}", ",", ".", "..", ":", "=", "==", "!=", "<", "<=", ">", ">=", "+",
    "-", "*", "/", "%", "!", "&&", "||", "->", "\"", "//", "///", "//!",
];

/// Splits `text` into tokens whose concatenation is `text`.
pub fn tokens(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let b = bytes[i];
        if b.is_ascii_whitespace() {
            while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                i += 1;
            }
        } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if b == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' && bytes[i] != b'\n' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(bytes.len());
        } else if b.is_ascii_alphanumeric() || b == b'_' {
            let number = b.is_ascii_digit();
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric()
                    || bytes[i] == b'_'
                    || (number
                        && bytes[i] == b'.'
                        && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)))
            {
                i += 1;
            }
        } else {
            i += 1;
        }
        while !text.is_char_boundary(i) {
            i += 1;
        }
        out.push(&text[start..i.min(text.len())]);
    }
    out
}

fn is_number(t: &str) -> bool {
    t.as_bytes().first().is_some_and(u8::is_ascii_digit)
}

fn is_word(t: &str) -> bool {
    t.as_bytes()
        .first()
        .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
}

fn is_space(t: &str) -> bool {
    t.bytes().all(|b| b.is_ascii_whitespace())
}

/// What mutations draw from: the corpus's programs and the words they use.
pub struct Dictionary {
    pub words: Vec<String>,
}

impl Dictionary {
    pub fn new(programs: &[String]) -> Dictionary {
        let mut words: Vec<String> = programs
            .iter()
            .flat_map(|p| {
                tokens(p)
                    .into_iter()
                    .filter(|t| is_word(t))
                    .map(str::to_string)
            })
            .collect();
        words.sort();
        words.dedup();
        Dictionary { words }
    }
}

/// One program mutated one to eight times; `others` are the corpus's programs, for splicing.
pub fn mutate_program(rng: &mut Rng, text: &str, others: &[String], dict: &Dictionary) -> String {
    let mut text = text.to_string();
    let rounds = if rng.one_in(4) {
        1 + rng.below(8)
    } else {
        1 + rng.below(3)
    };
    for _ in 0..rounds {
        text = mutate_once(rng, &text, others, dict);
        if text.len() > MAX_LEN {
            let mut end = MAX_LEN;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
    }
    text
}

/// A token index (of a non-space token when there is one), or `None` for an empty text.
fn some_token(rng: &mut Rng, toks: &[&str]) -> Option<usize> {
    if toks.is_empty() {
        return None;
    }
    for _ in 0..8 {
        let i = rng.below(toks.len());
        if !is_space(toks[i]) {
            return Some(i);
        }
    }
    Some(rng.below(toks.len()))
}

fn nested(rng: &mut Rng, inner: &str) -> String {
    let n = *rng.pick(&[3usize, 50, 127, 128, 129, 200, 257, 1000, 100_000]);
    let (open, close) = *rng.pick(&[("(", ")"), ("[", "]"), ("{", "}"), ("f(", ")"), ("-(", ")")]);
    let unclosed = rng.one_in(4);
    let mut s = open.repeat(n);
    s.push_str(inner);
    if !unclosed {
        s.push_str(&close.repeat(n));
    }
    s
}

fn chain(rng: &mut Rng, inner: &str) -> String {
    let n = *rng.pick(&[10usize, 255, 256, 257, 1000, 50_000]);
    match rng.below(6) {
        0 => format!("{}{inner}", "-".repeat(n)),
        1 => format!("{}{inner}", "!".repeat(n)),
        2 => format!("{inner}{}", " + x".repeat(n)),
        3 => format!("{inner}{}", ".x".repeat(n)),
        4 => format!("{inner}{}", "()".repeat(n)),
        _ => format!("{inner}{}", "[0]".repeat(n)),
    }
}

fn long_text(rng: &mut Rng) -> String {
    let n = *rng.pick(&[1000usize, 65_535, 65_536, 70_000, 200_000]);
    match rng.below(5) {
        0 => " ".repeat(n),
        1 => "x".repeat(n),
        2 => format!("\"{}\"", "a".repeat(n)),
        3 => "9".repeat(n.min(100_000)),
        _ => format!("// {}", "é".repeat(n / 2)),
    }
}

/// `text` with `text[from..to]` replaced by `with`: one allocation per mutation.
fn splice(text: &str, from: usize, to: usize, with: &str) -> String {
    let mut out = String::with_capacity(text.len() - (to - from) + with.len());
    out.push_str(&text[..from]);
    out.push_str(with);
    out.push_str(&text[to..]);
    out
}

fn mutate_once(rng: &mut Rng, text: &str, others: &[String], dict: &Dictionary) -> String {
    let toks = tokens(text);
    let Some(i) = some_token(rng, &toks) else {
        return others.first().cloned().unwrap_or_default();
    };
    // Byte offsets of a token's start and end in `text`.
    let start = |k: usize| toks[k].as_ptr() as usize - text.as_ptr() as usize;
    let end = |k: usize| start(k) + toks[k].len();
    match rng.below(20) {
        // Delete a run of tokens.
        0 | 1 => {
            let n = 1 + rng.below(4).min(toks.len() - i - 1);
            splice(text, start(i), end((i + n - 1).min(toks.len() - 1)), "")
        }
        // Duplicate a run of tokens.
        2 => {
            let n = 1 + rng.below(6);
            let run = &text[start(i)..end((i + n - 1).min(toks.len() - 1))];
            splice(text, start(i), start(i), run)
        }
        // Swap two tokens.
        3 => {
            let j = some_token(rng, &toks).unwrap();
            let (a, b) = (i.min(j), i.max(j));
            if a == b {
                return text.to_string();
            }
            [
                &text[..start(a)],
                toks[b],
                &text[end(a)..start(b)],
                toks[a],
                &text[end(b)..],
            ]
            .concat()
        }
        // A number at the edge of its type.
        4 | 5 => {
            let numbers: Vec<usize> = (0..toks.len()).filter(|&k| is_number(toks[k])).collect();
            let k = if numbers.is_empty() {
                i
            } else {
                *rng.pick(&numbers)
            };
            splice(
                text,
                start(k),
                end(k),
                EXTREME_NUMBERS[rng.below(EXTREME_NUMBERS.len())],
            )
        }
        // A word of the corpus instead of a token, or inserted.
        6 | 7 => {
            let w = rng.pick(&dict.words).clone();
            if rng.one_in(2) {
                splice(text, start(i), end(i), &w)
            } else {
                splice(text, start(i), start(i), &format!("{w} "))
            }
        }
        // An operator or bracket instead of a token, or inserted.
        8 => {
            let p = *rng.pick(PUNCT);
            let to = if rng.one_in(2) { end(i) } else { start(i) };
            splice(text, start(i), to, p)
        }
        // Deep nesting around a token.
        9 | 10 => splice(text, start(i), end(i), &nested(rng, toks[i])),
        // A long chain of operators on a token.
        11 => splice(text, start(i), end(i), &chain(rng, toks[i])),
        // A long line.
        12 => splice(text, start(i), start(i), &long_text(rng)),
        // Unicode and awkward characters.
        13 => {
            let s = *rng.pick(ODD_TEXT);
            let to = if rng.one_in(2) { end(i) } else { start(i) };
            splice(text, start(i), to, s)
        }
        // Truncate.
        14 => text[..start(i)].to_string(),
        // Line-level: delete, duplicate, swap, or splice lines of another file.
        _ => mutate_lines(rng, text, others),
    }
}

fn mutate_lines(rng: &mut Rng, text: &str, others: &[String]) -> String {
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.is_empty() {
        lines.push("");
    }
    let i = rng.below(lines.len());
    match rng.below(5) {
        0 => {
            let n = 1 + rng.below(3);
            lines.drain(i..(i + n).min(lines.len()));
        }
        1 => {
            let n = 1 + rng.below(8);
            let block: Vec<&str> = lines[i..(i + n).min(lines.len())].to_vec();
            let at = rng.below(lines.len() + 1);
            lines.splice(at..at, block);
        }
        2 => {
            let j = rng.below(lines.len());
            lines.swap(i, j);
        }
        _ => {
            // Splice: a run of lines (often an item) of another file.
            if !others.is_empty() {
                let other = rng.pick(others);
                let theirs: Vec<&str> = other.split_inclusive('\n').collect();
                if !theirs.is_empty() {
                    let from = rng.below(theirs.len());
                    let n = 1 + rng.below(20);
                    let block = &theirs[from..(from + n).min(theirs.len())];
                    let at = rng.below(lines.len() + 1);
                    lines.splice(at..at, block.iter().copied());
                }
            }
        }
    }
    lines.concat()
}

/// Numbers for plan fields: the edges of u32, i64, u64, f64.
const EXTREME_JSON: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "4294967295",
    "4294967296",
    "2147483648",
    "9223372036854775807",
    "18446744073709551615",
    "1e308",
    "-1e308",
    "0.5",
    "1e-300",
    "1000000000",
];

fn extreme_json(rng: &mut Rng) -> Value {
    let text = EXTREME_JSON[rng.below(EXTREME_JSON.len())];
    serde_json::from_str(text).expect("a JSON number")
}

/// One plan (JSON text) mutated: mostly as a tree, sometimes as text.
pub fn mutate_plan(rng: &mut Rng, text: &str, dict: &Dictionary) -> String {
    if rng.one_in(5) {
        return mutate_once(rng, text, &[], dict);
    }
    let Ok(mut value) = serde_json::from_str::<Value>(text) else {
        return mutate_once(rng, text, &[], dict);
    };
    for _ in 0..1 + rng.below(4) {
        mutate_value(rng, &mut value, dict);
    }
    value.to_string()
}

/// Walks down from the root to a random node and changes it (or its parent's list of them).
fn mutate_value(rng: &mut Rng, root: &mut Value, dict: &Dictionary) {
    // The walk is read-only; the change goes through a JSON pointer to the node.
    let mut pointer = String::new();
    let mut node: &Value = root;
    loop {
        if rng.below(4) == 0 {
            break;
        }
        let step = match node {
            Value::Object(map) if !map.is_empty() => {
                let key = map.keys().nth(rng.below(map.len())).unwrap();
                Some((key.replace('~', "~0").replace('/', "~1"), &map[key]))
            }
            Value::Array(items) if !items.is_empty() => {
                let k = rng.below(items.len());
                Some((k.to_string(), &items[k]))
            }
            _ => None,
        };
        let Some((part, child)) = step else { break };
        pointer.push('/');
        pointer.push_str(&part);
        node = child;
    }
    let Some(node) = root.pointer_mut(&pointer) else {
        return;
    };
    match node {
        Value::Object(map) if !map.is_empty() && rng.one_in(3) => {
            let key = map.keys().nth(rng.below(map.len())).unwrap().clone();
            map.remove(&key);
            return;
        }
        Value::Array(items) if !items.is_empty() && rng.one_in(2) => {
            match rng.below(4) {
                0 => items.clear(),
                1 => {
                    let k = rng.below(items.len());
                    items.remove(k);
                }
                2 => {
                    let k = rng.below(items.len());
                    let copy = items[k].clone();
                    items.push(copy);
                }
                _ => {
                    let (a, b) = (rng.below(items.len()), rng.below(items.len()));
                    items.swap(a, b);
                }
            }
            return;
        }
        _ => {}
    }
    *node = match (&*node, rng.below(6)) {
        (Value::Number(_), 0..=3) => extreme_json(rng),
        (Value::String(_), 0..=2) => Value::String(
            rng.pick(&[
                "",
                "../../x",
                "policy",
                "0..2",
                "f32[B, T]",
                "\u{FEFF}x",
                "é",
            ])
            .to_string(),
        ),
        (Value::String(_), 3) => Value::String(rng.pick(&dict.words).clone()),
        (_, 0) => Value::Null,
        (_, 1) => Value::Bool(true),
        (_, 2) => extreme_json(rng),
        (_, 3) => Value::Array(vec![]),
        (_, 4) => Value::Object(Default::default()),
        _ => Value::String("x".repeat(rng.below(100))),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_cover_the_text() {
        let text = "let x = f(1.5e3, \"a\\\"b\") // c\n  é + 2GiB";
        let toks = tokens(text);
        assert_eq!(toks.concat(), text);
        assert!(toks.contains(&"\"a\\\"b\""));
        assert!(toks.contains(&"// c"));
        assert!(toks.contains(&"2GiB"));
    }

    #[test]
    fn mutations_are_deterministic_and_valid_text() {
        let corpus = vec![
            "let a = 1\nlet b = a + 2\n".to_string(),
            "fn f(x) { x }\n".into(),
        ];
        let dict = Dictionary::new(&corpus);
        for seed in 0..200 {
            let a = mutate_program(&mut Rng::for_input(7, seed), &corpus[0], &corpus, &dict);
            let b = mutate_program(&mut Rng::for_input(7, seed), &corpus[0], &corpus, &dict);
            assert_eq!(a, b);
            assert!(a.len() <= MAX_LEN);
        }
    }
}

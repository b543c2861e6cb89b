//! The task vocabulary: 16 tokens, as the type checker fixes it (`Kind::Task`), and a text form
//! of it so JSONL prompts such as `"123+456="` can feed task models.

use super::DataError;

/// Token ids `0..=9` are the digits themselves.
pub const PLUS: i64 = 10;
pub const EQUALS: i64 = 11;
pub const BOS: i64 = 12;
pub const EOS: i64 = 13;
pub const PAD: i64 = 14;
/// Unused; keeps the vocabulary at the 16 entries the checker promises.
pub const SPARE: i64 = 15;
pub const VOCAB: i64 = 16;

/// The character each token is written as, by id. The spare token has no text form.
const CHARS: [char; 15] = [
    '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '+', '=', '^', '$', '_',
];

/// Text → token ids, one token per character: digits, `+`, `=`, and `^` (BOS), `$` (EOS), `_`
/// (PAD) so that `decode` output reads back. Any other character is an error naming it and its
/// position.
pub fn encode(text: &str) -> Result<Vec<i64>, DataError> {
    text.chars()
        .enumerate()
        .map(|(position, ch)| {
            CHARS
                .iter()
                .position(|&c| c == ch)
                .map(|id| id as i64)
                .ok_or(DataError::Alphabet { ch, position })
        })
        .collect()
}

/// Token ids → text, the inverse of `encode`; the spare token and ids outside the vocabulary show
/// as `?` (decode is for display, so it never fails).
pub fn decode(tokens: &[i64]) -> String {
    tokens
        .iter()
        .map(|&t| {
            usize::try_from(t)
                .ok()
                .and_then(|i| CHARS.get(i))
                .copied()
                .unwrap_or('?')
        })
        .collect()
}

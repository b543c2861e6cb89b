//! The worker protocol's messages (`docs/verifiers.md`): JSON Lines over a worker's stdin and
//! stdout, or one HTTP POST body and its response body.
//!
//! A request carries up to `batch` items; its response carries one result per item, in order,
//! or one error for the whole request. A result is a reward and the declared metrics, or an
//! error of its own (that item failed, the others stand).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// What a verifier scores: one sampled response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// The prompt's text, decoded with the dataset's tokenizer (special tokens left out).
    pub prompt: String,
    /// The response's text up to where it stopped (the end-of-answer token left out).
    pub response: String,
    /// The prompt's token ids (no padding).
    pub prompt_ids: Vec<i64>,
    /// The response's token ids as the policy sampled them (its end-of-answer token included).
    pub response_ids: Vec<i64>,
    /// The dataset row's fields the declaration asks for (`fields: [...]`).
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

/// One line a worker reads: a verifier's [`Item`]s, or an environment's
/// [`super::environment::StepItem`]s.
#[derive(Debug, Serialize)]
pub struct Request<'a, T = Item> {
    pub id: u64,
    pub items: &'a [T],
}

/// One line a worker writes: `results` (one per item, in order) or `error`.
#[derive(Debug, Deserialize)]
#[serde(bound(deserialize = "R: Deserialize<'de>"))]
pub struct Response<R = ItemResult> {
    pub id: u64,
    #[serde(default)]
    pub results: Option<Vec<R>>,
    #[serde(default)]
    pub error: Option<String>,
}

/// The score of one item: a reward and named metrics, or why this item has none.
#[derive(Debug, Deserialize)]
pub struct ItemResult {
    /// A number; `null` or absent is a failure of the item (as is a non-finite value).
    #[serde(default)]
    pub reward: Option<f64>,
    #[serde(default)]
    pub metrics: BTreeMap<String, Option<f64>>,
    #[serde(default)]
    pub error: Option<String>,
}

/// A request as one line of text (no newline).
pub fn encode<T: Serialize>(id: u64, items: &[T]) -> String {
    serde_json::to_string(&Request { id, items }).expect("requests are plain data")
}

/// A line a worker wrote, read as a response; the error says what is wrong with it.
pub fn decode<R: DeserializeOwned>(line: &str) -> Result<Response<R>, String> {
    let response: Response<R> = serde_json::from_str(line).map_err(|e| {
        let hint = if ["NaN", "Infinity"].iter().any(|w| line.contains(w)) {
            " (NaN and Infinity are not JSON numbers: the reward is not finite)"
        } else {
            ""
        };
        format!(
            "printed a line that is not a response ({e}){hint}: {}",
            snippet(line)
        )
    })?;
    match (&response.results, &response.error) {
        (Some(_), Some(_)) => Err(format!(
            "response {} has both `results` and `error`",
            response.id
        )),
        (None, None) => Err(format!(
            "response {} has neither `results` nor `error`",
            response.id
        )),
        _ => Ok(response),
    }
}

/// The start of `text`, for error messages (at most 200 characters).
pub fn snippet(text: &str) -> String {
    const MAX: usize = 200;
    let text = text.trim_end();
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

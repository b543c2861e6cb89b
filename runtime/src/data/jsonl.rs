//! `jsonl(path, field)`: a fixed set of prompts, one JSON object per line, written as text in the
//! task alphabet (see `tokens`), or in any text a Hugging Face model's `tokenizer.json` encodes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::tokens::{self, BOS, EOS};
use super::{DataError, Sample, Specials};
use crate::hf::HfTokenizer;

/// The field that, when a line has it, holds the reference answer.
const TARGET_FIELD: &str = "target";

/// Every line of a JSONL file, encoded up front so a bad line fails the job before training.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonlPrompts {
    path: PathBuf,
    samples: Vec<Sample>,
    /// The fields the dataset keeps (`keep: [...]`) of each sample, by row: what verifiers read.
    fields: Vec<BTreeMap<String, String>>,
    /// Token ids are below this: the task vocabulary's, or the tokenizer's.
    vocab: i64,
    specials: Specials,
}

/// How a line's text becomes tokens.
#[derive(Clone, Copy)]
enum Encoder<'t> {
    /// The task alphabet: BOS before the prompt, EOS after the target.
    Task,
    /// A model's tokenizer: the prompt as `tokenizer(text)` gives it (special tokens are the
    /// tokenizer's post-processor's business), the target's plain tokens and then the EOS.
    Hf(&'t HfTokenizer),
}

impl JsonlPrompts {
    /// Reads `path`, taking each line's prompt from `field`. Blank lines are skipped (a trailing
    /// newline is common) but still counted, so line numbers in errors match an editor's.
    pub fn load(path: &Path, field: &str) -> Result<JsonlPrompts, DataError> {
        JsonlPrompts::load_with(path, field, &[], Encoder::Task)
    }

    /// Like [`load`](Self::load) (or [`load_with_tokenizer`](Self::load_with_tokenizer) with a
    /// tokenizer), also keeping each line's fields named in `keep` as text (a string as it is,
    /// any other JSON value as its JSON text); a line without one of them is an error.
    pub fn load_keeping(
        path: &Path,
        field: &str,
        keep: &[String],
        tokenizer: Option<&HfTokenizer>,
    ) -> Result<JsonlPrompts, DataError> {
        let encoder = tokenizer.map_or(Encoder::Task, Encoder::Hf);
        JsonlPrompts::load_with(path, field, keep, encoder)
    }

    /// Like [`load`](Self::load), encoding the text with a Hugging Face `tokenizer`: any text it
    /// encodes is a prompt, and a target ends in the tokenizer's EOS when it has one.
    pub fn load_with_tokenizer(
        path: &Path,
        field: &str,
        tokenizer: &HfTokenizer,
    ) -> Result<JsonlPrompts, DataError> {
        JsonlPrompts::load_with(path, field, &[], Encoder::Hf(tokenizer))
    }

    fn load_with(
        path: &Path,
        field: &str,
        keep: &[String],
        encoder: Encoder,
    ) -> Result<JsonlPrompts, DataError> {
        let text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        // A UTF-8 byte-order mark (some editors on Windows start files with one) is not text.
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let (mut samples, fields): (Vec<Sample>, Vec<_>) = text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(i, line)| {
                parse_line(line, field, keep, encoder).map_err(|problem| DataError::Line {
                    path: path.to_path_buf(),
                    line: i + 1,
                    problem,
                })
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        for (row, sample) in samples.iter_mut().enumerate() {
            sample.row = Some(row as u64);
        }
        if samples.is_empty() {
            return Err(DataError::Empty {
                path: path.to_path_buf(),
            });
        }
        let (vocab, specials) = match encoder {
            Encoder::Task => (tokens::VOCAB, Specials::TASK),
            Encoder::Hf(tokenizer) => (
                tokenizer.vocab_size(),
                Specials {
                    eos: tokenizer.eos_id(),
                    // Padding is masked out; a tokenizer without a pad token pads with its EOS.
                    pad: tokenizer.pad_id().or(tokenizer.eos_id()).unwrap_or(0),
                },
            ),
        };
        Ok(JsonlPrompts {
            path: path.to_path_buf(),
            samples,
            fields,
            vocab,
            specials,
        })
    }

    /// The kept fields of row `row` (`Sample::row`).
    pub fn fields(&self, row: u64) -> Option<&BTreeMap<String, String>> {
        self.fields.get(usize::try_from(row).ok()?)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The samples in file order; never empty.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    pub fn vocab(&self) -> i64 {
        self.vocab
    }

    pub fn specials(&self) -> Specials {
        self.specials
    }

    pub fn prompt_len(&self) -> i64 {
        self.samples
            .iter()
            .map(|s| s.prompt.len() as i64)
            .max()
            .unwrap_or(0)
    }
}

/// One line → a sample and its kept fields, or what is wrong with it (the caller adds file and
/// line).
fn parse_line(
    line: &str,
    field: &str,
    keep: &[String],
    encoder: Encoder,
) -> Result<(Sample, BTreeMap<String, String>), String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let object = value
        .as_object()
        .ok_or_else(|| format!("expected a JSON object, found {}", describe(&value)))?;
    let text = |name: &str, is_prompt: bool| -> Result<Option<Vec<i64>>, String> {
        let Some(value) = object.get(name) else {
            return Ok(None);
        };
        let text = value
            .as_str()
            .ok_or_else(|| format!("field `{name}` is {}, not a string", describe(value)))?;
        let encoded = match encoder {
            Encoder::Task => tokens::encode(text).map_err(|e| e.to_string()),
            Encoder::Hf(tokenizer) if is_prompt => {
                tokenizer.encode(text).map_err(|e| e.to_string())
            }
            Encoder::Hf(tokenizer) => tokenizer.encode_plain(text).map_err(|e| e.to_string()),
        };
        encoded
            .map(Some)
            .map_err(|e| format!("field `{name}`: {e}"))
    };

    let mut prompt = text(field, true)?.ok_or_else(|| format!("no field `{field}`"))?;
    let eos = match encoder {
        Encoder::Task => {
            // Task prompts start with BOS; prompts written without it get one, so both read
            // alike.
            if prompt.first() != Some(&BOS) {
                prompt.insert(0, BOS);
            }
            Some(EOS)
        }
        Encoder::Hf(tokenizer) => tokenizer.eos_id(),
    };
    if prompt.is_empty() {
        return Err(format!("field `{field}` encodes to no tokens"));
    }
    // Without a reference answer the target stays empty; with one it ends in EOS like a task's.
    // (A target already written with its EOS keeps just that one.)
    let target = match text(TARGET_FIELD, false)? {
        None => Vec::new(),
        Some(mut target) => {
            if let Some(eos) = eos.filter(|eos| target.last() != Some(eos)) {
                target.push(eos);
            }
            target
        }
    };
    let kept = keep
        .iter()
        .map(|name| match object.get(name) {
            Some(Value::String(s)) => Ok((name.clone(), s.clone())),
            Some(other) => Ok((name.clone(), other.to_string())),
            None => Err(format!("no field `{name}` (the dataset keeps it)")),
        })
        .collect::<Result<_, _>>()?;
    let sample = Sample {
        prompt,
        target,
        row: None,
    };
    Ok((sample, kept))
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

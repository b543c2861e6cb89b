//! `jsonl(path, field)`: a fixed set of prompts, one JSON object per line, written as text in the
//! task alphabet (see `tokens`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::tokens::{BOS, EOS, encode};
use super::{DataError, Sample};

/// The field that, when a line has it, holds the reference answer.
const TARGET_FIELD: &str = "target";

/// Every line of a JSONL file, encoded up front so a bad line fails the job before training.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonlPrompts {
    path: PathBuf,
    samples: Vec<Sample>,
}

impl JsonlPrompts {
    /// Reads `path`, taking each line's prompt from `field`. Blank lines are skipped (a trailing
    /// newline is common) but still counted, so line numbers in errors match an editor's.
    pub fn load(path: &Path, field: &str) -> Result<JsonlPrompts, DataError> {
        let text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let samples = text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(i, line)| {
                parse_line(line, field).map_err(|problem| DataError::Line {
                    path: path.to_path_buf(),
                    line: i + 1,
                    problem,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if samples.is_empty() {
            return Err(DataError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(JsonlPrompts {
            path: path.to_path_buf(),
            samples,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The samples in file order; never empty.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    pub fn prompt_len(&self) -> i64 {
        self.samples
            .iter()
            .map(|s| s.prompt.len() as i64)
            .max()
            .unwrap_or(0)
    }
}

/// One line → a sample, or what is wrong with it (the caller adds file and line).
fn parse_line(line: &str, field: &str) -> Result<Sample, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let object = value
        .as_object()
        .ok_or_else(|| format!("expected a JSON object, found {}", describe(&value)))?;
    let text = |name: &str| -> Result<Option<Vec<i64>>, String> {
        let Some(value) = object.get(name) else {
            return Ok(None);
        };
        let text = value
            .as_str()
            .ok_or_else(|| format!("field `{name}` is {}, not a string", describe(value)))?;
        encode(text)
            .map(Some)
            .map_err(|e| format!("field `{name}`: {e}"))
    };

    let mut prompt = text(field)?.ok_or_else(|| format!("no field `{field}`"))?;
    // Task prompts start with BOS; prompts written without it get one, so both read alike.
    if prompt.first() != Some(&BOS) {
        prompt.insert(0, BOS);
    }
    // Without a reference answer the target stays empty; with one it ends in EOS like a task's.
    // (A target already written with its `$` keeps just that one.)
    let target = match text(TARGET_FIELD)? {
        None => Vec::new(),
        Some(mut target) => {
            if target.last() != Some(&EOS) {
                target.push(EOS);
            }
            target
        }
    };
    Ok(Sample { prompt, target })
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

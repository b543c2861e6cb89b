//! The prompt sources of training jobs: `task(kind, digits)` from `std.task.digits` and
//! `jsonl(path, field)`, with a reproducible `Sampler` and the tasks' rule-based `score`.

mod jsonl;
mod sampler;
mod score;
pub mod supervised;
mod task;
pub mod tokens;

use std::path::{Path, PathBuf};

pub use jsonl::JsonlPrompts;
pub use sampler::Sampler;
pub use score::score;
pub use task::{Task, TaskKind};
pub use tokens::{decode, encode};

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error(
        "unknown task kind `{kind}` (the tasks are reverse_digits, add_numbers, sort_digits and add_with_tool)"
    )]
    UnknownTask { kind: String },
    #[error("a task needs at least 1 digit, got {digits}")]
    Digits { digits: i64 },
    #[error(
        "character `{ch}` at position {position} is outside the task alphabet \
         (digits, `+`, `=`, `^` BOS, `$` EOS, `_` PAD)"
    )]
    Alphabet { ch: char, position: usize },
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: line {line}: {problem}")]
    Line {
        path: PathBuf,
        line: usize,
        problem: String,
    },
    #[error("{path}: no prompts (the file is empty)")]
    Empty { path: PathBuf },
}

/// One prompt and its reference answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// In the task vocabulary it starts with BOS (task prompts end with `=`); through a Hugging
    /// Face tokenizer it is what the tokenizer makes of the text.
    pub prompt: Vec<i64>,
    /// The answer tokens followed by EOS (where the tokenizer has one); empty when the source has
    /// no reference answer.
    pub target: Vec<i64>,
    /// The sample's row in a fixed dataset (a JSONL file's prompts, in file order): where its
    /// other fields are (`JsonlPrompts::fields`). `None` for drawn task samples.
    pub row: Option<u64>,
}

/// The ids a source's text ends an answer and pads with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Specials {
    /// A response stops after it; `None`: responses run to `max_new`.
    pub eos: Option<i64>,
    pub pad: i64,
}

impl Specials {
    /// The task alphabet's `$` and `_`.
    pub const TASK: Specials = Specials {
        eos: Some(tokens::EOS),
        pad: tokens::PAD,
    };
}

/// Where a job's prompts come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Task(Task),
    Jsonl(JsonlPrompts),
}

impl Source {
    /// `task(kind: ..., digits: ...)`; an unknown kind is an error naming the kinds.
    pub fn task(kind: &str, digits: i64) -> Result<Source, DataError> {
        Task::new(kind, digits).map(Source::Task)
    }

    /// `jsonl(path, field)`: reads and encodes every line now; errors name the file, the line and
    /// what is wrong with it.
    pub fn jsonl(path: &Path, field: &str) -> Result<Source, DataError> {
        JsonlPrompts::load(path, field).map(Source::Jsonl)
    }

    /// `jsonl(path, field)` in the text of a Hugging Face model, encoded with its tokenizer.
    pub fn jsonl_with_tokenizer(
        path: &Path,
        field: &str,
        tokenizer: &crate::hf::HfTokenizer,
    ) -> Result<Source, DataError> {
        JsonlPrompts::load_with_tokenizer(path, field, tokenizer).map(Source::Jsonl)
    }

    /// `jsonl(path, field, keep: [...])`, in the task alphabet or through `tokenizer`, keeping
    /// the named fields of each line for verifiers.
    pub fn jsonl_keeping(
        path: &Path,
        field: &str,
        keep: &[String],
        tokenizer: Option<&crate::hf::HfTokenizer>,
    ) -> Result<Source, DataError> {
        JsonlPrompts::load_keeping(path, field, keep, tokenizer).map(Source::Jsonl)
    }

    /// The vocabulary the prompts are written in: the task's, or the tokenizer's.
    pub fn vocab(&self) -> i64 {
        match self {
            Source::Task(_) => tokens::VOCAB,
            Source::Jsonl(prompts) => prompts.vocab(),
        }
    }

    /// The end-of-answer and padding ids of the prompts' text.
    pub fn specials(&self) -> Specials {
        match self {
            Source::Task(_) => Specials::TASK,
            Source::Jsonl(prompts) => prompts.specials(),
        }
    }

    /// The longest prompt (task prompts all have the same length).
    pub fn prompt_len(&self) -> i64 {
        match self {
            Source::Task(task) => task.prompt_len(),
            Source::Jsonl(prompts) => prompts.prompt_len(),
        }
    }
}

#[cfg(test)]
mod tests;

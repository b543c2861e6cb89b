//! Hugging Face Llama / Qwen2 checkpoints: `config.json` plus safetensors weights, one file or
//! sharded with `model.safetensors.index.json`, loaded (`load_model`) and saved in the same layout
//! (`save::save_model`); `tokenizer.json` through the `tokenizers` crate (`HfTokenizer`).
//! Parameter names are the same on both sides, so loading and saving are name-for-name copies.

mod config;
pub mod save;
mod slices;
mod tokenizer;
mod weights;

pub use config::{Architecture, load_config, parse_config};
pub use save::{SaveOptions, Saved, config_json, save_model};
pub use slices::{HfSlices, open_slices};
pub use tokenizer::{HfTokenizer, TOKENIZER_FILE, TOKENIZER_MODELS};
pub use weights::load_weights;

use std::path::{Path, PathBuf};

use tch::{Device, nn};

use crate::model::{ConfigError, Heads, Transformer};

#[derive(Debug, thiserror::Error)]
pub enum HfError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "{path}: unsupported architecture `{name}` (supported: LlamaForCausalLM, Qwen2ForCausalLM)"
    )]
    UnsupportedArchitecture { path: PathBuf, name: String },
    #[error("{path}: unsupported setting: {setting}")]
    UnsupportedSetting { path: PathBuf, setting: String },
    #[error("{path}: {source}")]
    InvalidConfig { path: PathBuf, source: ConfigError },
    #[error("{dir}: no model.safetensors or model.safetensors.index.json")]
    NoWeights { dir: PathBuf },
    #[error(
        "{path}: the weight map names the file `{shard}`, which is not inside the model folder \
         (a shard is a relative path without `..`)"
    )]
    ShardOutside { path: PathBuf, shard: String },
    /// The folder is an rlc checkpoint (it has a `manifest.json`) whose files do not match it.
    #[error("{0}")]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    #[error("{path}: cannot read safetensors: {message}")]
    Safetensors { path: PathBuf, message: String },
    #[error("{path}: tensor `{name}` is missing")]
    MissingTensor { path: PathBuf, name: String },
    #[error("{path}: tensor `{name}` has shape {found:?}, the model expects {expected:?}")]
    ShapeMismatch {
        path: PathBuf,
        name: String,
        expected: Vec<i64>,
        found: Vec<i64>,
    },
    #[error("{path}: tensor `{name}` has no place in this model (wrong config or architecture?)")]
    UnexpectedTensor { path: PathBuf, name: String },
    #[error(
        "{path}: unknown tokenizer model `{name}` (the tokenizers crate reads BPE, WordPiece, \
         WordLevel and Unigram)"
    )]
    UnknownTokenizerModel { path: PathBuf, name: String },
    #[error("{path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("{path}: token id {id} is not in the vocabulary ({vocab} tokens)")]
    TokenOutOfRange { path: PathBuf, id: i64, vocab: i64 },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: cannot save: {message}")]
    Unsavable { path: PathBuf, message: String },
}

impl From<crate::tensor_file::TensorFileError> for HfError {
    fn from(error: crate::tensor_file::TensorFileError) -> Self {
        use crate::tensor_file::TensorFileError;
        match error {
            TensorFileError::Write { path, source } => HfError::Write { path, source },
            TensorFileError::Unsavable { path, message } => HfError::Unsavable { path, message },
        }
    }
}

/// Reads `dir/config.json` and the weights in `dir` into a new model on `device`. Heads that a
/// causal-LM checkpoint does not carry (value, score) keep their seeded random init. A folder
/// with an rlc `manifest.json` (a checkpoint, `hf("…/step-000050")`) is first verified against
/// it: every file's size and SHA-256.
pub fn load_model(
    dir: &Path,
    heads: Heads,
    device: Device,
) -> Result<(nn::VarStore, Transformer), HfError> {
    if dir.join(crate::checkpoint::MANIFEST_FILE).exists() {
        crate::checkpoint::verify(dir)?;
    }
    let (config, _) = load_config(dir)?;
    let mut vs = nn::VarStore::new(device);
    let model = Transformer::new(&vs.root(), &config, heads, 0).map_err(|source| {
        HfError::InvalidConfig {
            path: dir.join("config.json"),
            source,
        }
    })?;
    load_weights(&mut vs, dir)?;
    Ok((vs, model))
}

#[cfg(test)]
pub(crate) mod tests;

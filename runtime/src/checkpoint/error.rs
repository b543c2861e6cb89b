//! Errors name the checkpoint folder and the file, so a refused resume says what to look at.

use std::fmt;
use std::path::{Path, PathBuf};

use super::manifest::FORMAT_VERSION;

/// Why a checkpoint could not be saved, found or loaded.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint {dir} does not exist")]
    NotFound { dir: PathBuf },
    #[error("checkpoint {dir} has no manifest.json (an interrupted write?)")]
    NoManifest { dir: PathBuf },
    #[error("checkpoint {dir} is incomplete: {file} is missing")]
    Missing { dir: PathBuf, file: String },
    #[error("checkpoint {dir} is corrupt: {file} {problem}")]
    Corrupt {
        dir: PathBuf,
        file: String,
        problem: Corruption,
    },
    #[error(
        "checkpoint {dir} has format version {found}; this build reads version {FORMAT_VERSION}"
    )]
    UnknownVersion { dir: PathBuf, found: u64 },
    /// The checkpoint given to `save` cannot be stored faithfully.
    #[error("cannot save checkpoint {dir}: {reason}")]
    Unsavable { dir: PathBuf, reason: String },
    #[error("checkpoint {dir}: cannot {action} {path}: {source}")]
    Io {
        dir: PathBuf,
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("checkpoint {dir}: {file}: {source}")]
    Tensor {
        dir: PathBuf,
        file: String,
        source: tch::TchError,
    },
}

/// What is wrong with one file of a checkpoint; displayed after the file's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    Size {
        found: u64,
        expected: u64,
    },
    Sha256 {
        found: String,
        expected: String,
    },
    /// Anything else, phrased to follow the file name ("is not valid JSON: …").
    Invalid(String),
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Size { found, expected } => {
                write!(f, "is {found} bytes but the manifest says {expected}")
            }
            Self::Sha256 { found, expected } => write!(
                f,
                "has SHA-256 {} but the manifest says {}",
                abbreviate(found),
                abbreviate(expected)
            ),
            Self::Invalid(what) => f.write_str(what),
        }
    }
}

/// 16 hex digits tell two digests apart; the full 64 only clutter the message.
fn abbreviate(hex: &str) -> String {
    match hex.get(..16) {
        Some(prefix) if hex.len() > 16 => format!("{prefix}…"),
        _ => hex.to_string(),
    }
}

pub(super) fn corrupt(dir: &Path, file: &str, problem: Corruption) -> CheckpointError {
    CheckpointError::Corrupt {
        dir: dir.to_path_buf(),
        file: file.to_string(),
        problem,
    }
}

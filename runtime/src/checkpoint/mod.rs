//! Training checkpoints that resume bit-exactly and are refused when corrupt or partial.
//!
//! A checkpoint is one folder per role and step (`step-000050`) holding
//!
//! * `model.safetensors`: the weights, under the names given (Hugging Face names stay loadable
//!   by other tools), with the `{"format": "pt"}` metadata `transformers` checks;
//! * `config.json`, when the caller gives one: with it the folder is also a Hugging Face model
//!   folder (`hf("…/step-000050")`, `from_pretrained`);
//! * `optimizer.safetensors`: the optimiser's state tensors;
//! * `state.json`: the step and the caller's JSON state;
//! * `lagged.safetensors`, when the caller gives any: earlier versions of the weights, which a
//!   generator running steps behind training still needs (`v{version}/{name}`);
//! * `manifest.json`, written last: the format version and each file's size and SHA-256.
//!
//! `save` builds the folder under a hidden temporary name and renames it into place, so a folder
//! with a manifest is complete; `load` re-checks sizes and digests before trusting any byte.
//! The roles of one step commit together (`commit`): a marker `step-000050.complete` beside the
//! role folders is written once all of them are in place, and a resumed run starts from the
//! newest committed step.

mod commit;
mod error;
mod io;
mod load;
mod manifest;
mod save;
mod state;
mod tensors;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use commit::{
    Committed, MARKER_SUFFIX, Passed, clean_leftovers, commit, marker_path, newest_committed,
};
pub use error::{CheckpointError, Corruption};
pub use load::load;
pub use save::save;

pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
pub const STATE_FILE: &str = "state.json";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const CONFIG_FILE: &str = "config.json";
pub const LAGGED_FILE: &str = "lagged.safetensors";

/// Everything a resumed run needs, for one role (model) of one job.
#[derive(Debug)]
pub struct Checkpoint {
    /// Steps completed.
    pub step: u64,
    /// Model parameters by name, in the order they are to be restored.
    pub weights: Vec<(String, tch::Tensor)>,
    /// Optimiser state tensors by name (AdamW moments etc.).
    pub optimizer: Vec<(String, tch::Tensor)>,
    /// Optimiser step count, RNG states, data cursor, …. Round-trips exactly: integers (u64
    /// included) as JSON numbers, and floats bit for bit.
    pub state: serde_json::Value,
    /// The model's Hugging Face `config.json` (`crate::hf::config_json`), if it is to be written.
    pub config: Option<serde_json::Value>,
    /// Earlier versions of the weights, `v{version}/{name}` (empty: no `lagged.safetensors`).
    pub lagged: Vec<(String, tch::Tensor)>,
}

/// Checks the checkpoint folder `dir` as `load` does (its manifest, and the size and SHA-256 of
/// every file it lists) without reading the tensors; returns the step and the caller's state.
pub fn verify(dir: &Path) -> Result<(u64, serde_json::Value), CheckpointError> {
    let manifest = manifest::read(dir)?;
    manifest::verify(dir, &manifest)?;
    let path = dir.join(STATE_FILE);
    let bytes = std::fs::read(&path).map_err(io::context(dir, "read", &path))?;
    state::decode(dir, &bytes)
}

/// Checks that `dir` is a checkpoint folder: it exists and has a manifest of a known version
/// (its files are not verified: `verify` and `load` do that).
pub fn require_manifest(dir: &Path) -> Result<(), CheckpointError> {
    manifest::read(dir).map(drop)
}

/// The folder for `step` under `root`: `root/step-000050`.
pub fn step_dir(root: &Path, step: u64) -> PathBuf {
    root.join(format!("step-{step:06}"))
}

/// The newest checkpoint under `root` that has a manifest, if any; a missing `root` has none.
///
/// Temporary folders (`.step-….tmp-PID`) and folders without a manifest (interrupted writes) are
/// skipped. The files are not verified here; `load` does that.
pub fn latest(root: &Path) -> Result<Option<PathBuf>, CheckpointError> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io::context(root, "list", root)(error)),
    };
    let mut newest: Option<(u64, String)> = None;
    for entry in entries {
        let entry = entry.map_err(io::context(root, "list", root))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Some(step) = parse_step(&name) else {
            continue;
        };
        if !entry.path().join(MANIFEST_FILE).is_file() {
            continue;
        }
        // Ties (`step-50` beside `step-000050`) go to the greater name, for determinism.
        let candidate = (step, name);
        if newest.as_ref().is_none_or(|best| candidate > *best) {
            newest = Some(candidate);
        }
    }
    Ok(newest.map(|(_, name)| root.join(name)))
}

/// The step of a folder named `step-<digits>`.
fn parse_step(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("step-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

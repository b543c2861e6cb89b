//! Reading a checkpoint back, refusing it unless every file matches the manifest.

use std::path::Path;

use super::error::{Corruption, corrupt};
use super::io::context;
use super::{
    CONFIG_FILE, Checkpoint, CheckpointError, LAGGED_FILE, OPTIMIZER_FILE, STATE_FILE, WEIGHTS_FILE,
};
use super::{manifest, state, tensors};

/// Loads the checkpoint folder `dir`, after checking that its manifest is present and of a known
/// version and that every listed file has the recorded size and SHA-256.
pub fn load(dir: &Path) -> Result<Checkpoint, CheckpointError> {
    let manifest = manifest::read(dir)?;
    // Verify every file before parsing any, so a bad file is reported as corrupt by name rather
    // than as whatever a parser makes of it.
    manifest::verify(dir, &manifest)?;
    let weights = tensors::read(dir, &manifest, WEIGHTS_FILE)?;
    let optimizer = tensors::read(dir, &manifest, OPTIMIZER_FILE)?;
    let state_path = dir.join(STATE_FILE);
    let bytes = std::fs::read(&state_path).map_err(context(dir, "read", &state_path))?;
    let (step, state) = state::decode(dir, &bytes)?;
    let config = match manifest.entry(CONFIG_FILE) {
        None => None,
        Some(_) => {
            let path = dir.join(CONFIG_FILE);
            let bytes = std::fs::read(&path).map_err(context(dir, "read", &path))?;
            let config = serde_json::from_slice(&bytes).map_err(|error| {
                corrupt(
                    dir,
                    CONFIG_FILE,
                    Corruption::Invalid(format!("is not valid JSON ({error})")),
                )
            })?;
            Some(config)
        }
    };
    let lagged = match manifest.entry(LAGGED_FILE) {
        None => Vec::new(),
        Some(_) => tensors::read(dir, &manifest, LAGGED_FILE)?,
    };
    Ok(Checkpoint {
        step,
        weights,
        optimizer,
        state,
        config,
        lagged,
    })
}

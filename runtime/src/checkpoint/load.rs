//! Reading a checkpoint back, refusing it unless every file matches the manifest.

use std::path::Path;

use super::io::context;
use super::{Checkpoint, CheckpointError, OPTIMIZER_FILE, STATE_FILE, WEIGHTS_FILE};
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
    Ok(Checkpoint {
        step,
        weights,
        optimizer,
        state,
    })
}

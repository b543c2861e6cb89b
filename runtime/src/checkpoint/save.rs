//! Writing a checkpoint so that a crash at any moment leaves either the old folder or the new
//! one in place, never a partial folder that `latest` or `load` would accept.

use std::fs;
use std::path::{Path, PathBuf};

use super::io::{self, context};
use super::manifest::{FORMAT_VERSION, FileEntry, Manifest};
use super::{
    CONFIG_FILE, Checkpoint, CheckpointError, LAGGED_FILE, MANIFEST_FILE, OPTIMIZER_FILE,
    STATE_FILE, WEIGHTS_FILE,
};
use super::{state, tensors};

/// Saves `checkpoint` as the folder `dir`, replacing any folder already there.
///
/// Everything is written and synced in a hidden sibling `.NAME.tmp-PID`, the manifest last, and
/// the folder is then renamed into place.
pub fn save(dir: &Path, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
    let (parent, name) = split(dir)?;
    fs::create_dir_all(&parent).map_err(context(dir, "create", &parent))?;
    let pid = std::process::id();
    let temporary = parent.join(format!(".{name}.tmp-{pid}"));
    // Left behind by a crashed process that happened to have our pid.
    io::remove_if_present(dir, &temporary)?;
    fs::create_dir(&temporary).map_err(context(dir, "create", &temporary))?;
    let result = write_contents(dir, &temporary, checkpoint)
        .and_then(|()| install(dir, &temporary, &parent.join(format!(".{name}.old-{pid}"))));
    if result.is_err() {
        // Best effort: the error being returned matters more than a failed clean-up.
        let _ = fs::remove_dir_all(&temporary);
    }
    result
}

/// The folder `dir` lives in (`.` for a bare name) and its own name.
fn split(dir: &Path) -> Result<(PathBuf, String), CheckpointError> {
    let Some(name) = dir.file_name().and_then(|name| name.to_str()) else {
        return Err(CheckpointError::Unsavable {
            dir: dir.to_path_buf(),
            reason: "the path does not end in a UTF-8 folder name".to_string(),
        });
    };
    let parent = match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name.to_string()))
}

fn write_contents(
    dir: &Path,
    temporary: &Path,
    checkpoint: &Checkpoint,
) -> Result<(), CheckpointError> {
    let weight_names = tensors::write(dir, temporary, WEIGHTS_FILE, &checkpoint.weights)?;
    let optimizer_names = tensors::write(dir, temporary, OPTIMIZER_FILE, &checkpoint.optimizer)?;
    let state = state::encode(dir, checkpoint.step, &checkpoint.state)?;
    io::write_synced(dir, &temporary.join(STATE_FILE), &state)?;

    if let Some(config) = &checkpoint.config {
        let text = serde_json::to_vec_pretty(config).expect("a JSON value always serialises");
        io::write_synced(dir, &temporary.join(CONFIG_FILE), &text)?;
    }

    // Digests are taken from the files on disk, so they cover exactly what `load` will read.
    let mut files = vec![
        FileEntry::of(dir, temporary, WEIGHTS_FILE, Some(weight_names))?,
        FileEntry::of(dir, temporary, OPTIMIZER_FILE, Some(optimizer_names))?,
        FileEntry::of(dir, temporary, STATE_FILE, None)?,
    ];
    if checkpoint.config.is_some() {
        files.push(FileEntry::of(dir, temporary, CONFIG_FILE, None)?);
    }
    if !checkpoint.lagged.is_empty() {
        let names = tensors::write(dir, temporary, LAGGED_FILE, &checkpoint.lagged)?;
        files.push(FileEntry::of(dir, temporary, LAGGED_FILE, Some(names))?);
    }
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        files,
    };
    let manifest = serde_json::to_vec_pretty(&manifest).expect("a manifest always serialises");
    io::write_synced(dir, &temporary.join(MANIFEST_FILE), &manifest)?;
    io::sync_dir(dir, temporary)
}

/// Renames the finished `temporary` folder to `dir`. An existing `dir` is first moved aside to
/// `old` (a rename cannot replace a non-empty folder), and removed only once the new one is in.
fn install(dir: &Path, temporary: &Path, old: &Path) -> Result<(), CheckpointError> {
    let parent = temporary
        .parent()
        .expect("the temporary folder has a parent");
    let replacing = fs::symlink_metadata(dir).is_ok();
    if replacing {
        io::remove_if_present(dir, old)?;
        fs::rename(dir, old).map_err(context(dir, "move aside", dir))?;
    }
    if let Err(error) = fs::rename(temporary, dir) {
        if replacing {
            // Put the previous checkpoint back rather than leave the step without one.
            let _ = fs::rename(old, dir);
        }
        return Err(context(dir, "rename into place", temporary)(error));
    }
    io::sync_dir(dir, parent)?;
    if replacing {
        io::remove_if_present(dir, old)?;
    }
    Ok(())
}

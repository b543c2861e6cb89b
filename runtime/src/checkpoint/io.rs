//! File-system steps with the error context a checkpoint message needs, and the fsyncs that
//! make a renamed folder's contents durable before anything points at it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use super::CheckpointError;

/// Maps an I/O error of `action` on `path` into an error about checkpoint `dir`.
pub(super) fn context<'a>(
    dir: &'a Path,
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> CheckpointError + 'a {
    move |source| CheckpointError::Io {
        dir: dir.to_path_buf(),
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `path` with `bytes` and waits until they are on disk.
pub(super) fn write_synced(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let mut file = File::create(path).map_err(context(dir, "create", path))?;
    file.write_all(bytes).map_err(context(dir, "write", path))?;
    file.sync_all().map_err(context(dir, "fsync", path))
}

/// Flushes a file someone else wrote (safetensors' writer does not fsync).
pub(super) fn sync_file(dir: &Path, path: &Path) -> Result<(), CheckpointError> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|file| file.sync_all())
        .map_err(context(dir, "fsync", path))
}

/// Makes entries created in or renamed into `folder` durable; without it a crash can lose a
/// rename even though the files themselves were synced.
pub(super) fn sync_dir(dir: &Path, folder: &Path) -> Result<(), CheckpointError> {
    #[cfg(unix)]
    File::open(folder)
        .and_then(|handle| handle.sync_all())
        .map_err(context(dir, "fsync", folder))?;
    // Elsewhere a folder cannot be opened as a file; renames are as durable as the OS makes them.
    #[cfg(not(unix))]
    let _ = (dir, folder);
    Ok(())
}

/// Removes `path` (a folder) if it is there.
pub(super) fn remove_if_present(dir: &Path, path: &Path) -> Result<(), CheckpointError> {
    match fs::remove_dir_all(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            Err(context(dir, "remove", path)(error))
        }
        _ => Ok(()),
    }
}

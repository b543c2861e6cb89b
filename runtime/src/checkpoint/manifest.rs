//! `manifest.json`: written last, so its presence marks a complete checkpoint, and its sizes and
//! SHA-256 digests let `load` refuse files truncated or changed since.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::{CheckpointError, Corruption, corrupt};
use super::io::context;
use super::{MANIFEST_FILE, OPTIMIZER_FILE, STATE_FILE, WEIGHTS_FILE};

/// Bumped whenever the layout changes in a way an older reader would misread.
pub(super) const FORMAT_VERSION: u64 = 1;

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Manifest {
    pub format_version: u64,
    pub files: Vec<FileEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct FileEntry {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
    /// For safetensors files: the tensor names in the order given to `save`. The format stores
    /// them sorted and reads them back in hash order, and parameter order matters to optimisers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensors: Option<Vec<String>>,
}

impl FileEntry {
    /// Describes `dir/name` as it is on disk now.
    pub fn of(
        checkpoint: &Path,
        dir: &Path,
        name: &str,
        tensors: Option<Vec<String>>,
    ) -> Result<Self, CheckpointError> {
        let path = dir.join(name);
        let (bytes, sha256) = digest(&path).map_err(context(checkpoint, "read", &path))?;
        Ok(Self {
            name: name.to_string(),
            bytes,
            sha256,
            tensors,
        })
    }
}

impl Manifest {
    pub fn entry(&self, name: &str) -> Option<&FileEntry> {
        self.files.iter().find(|entry| entry.name == name)
    }
}

/// Byte count and lowercase hex SHA-256 of a file, read in chunks: weights can be gigabytes.
fn digest(path: &Path) -> io::Result<(u64, String)> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        bytes += read as u64;
    }
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((bytes, hex))
}

/// Reads `dir/manifest.json`. The version is checked before the structure so that a newer
/// writer's manifest is reported as a version mismatch, not as garbage.
pub(super) fn read(dir: &Path) -> Result<Manifest, CheckpointError> {
    let path = dir.join(MANIFEST_FILE);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(if dir.is_dir() {
                CheckpointError::NoManifest {
                    dir: dir.to_path_buf(),
                }
            } else {
                CheckpointError::NotFound {
                    dir: dir.to_path_buf(),
                }
            });
        }
        Err(error) => return Err(context(dir, "read", &path)(error)),
    };
    let invalid = |what: String| corrupt(dir, MANIFEST_FILE, Corruption::Invalid(what));
    let value: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|error| invalid(format!("is not valid JSON ({error})")))?;
    let version = value
        .get("format_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| invalid("has no format_version".to_string()))?;
    if version != FORMAT_VERSION {
        return Err(CheckpointError::UnknownVersion {
            dir: dir.to_path_buf(),
            found: version,
        });
    }
    serde_json::from_value(value).map_err(|error| invalid(format!("is malformed ({error})")))
}

/// Checks that the manifest lists every file a checkpoint needs, and that every listed file is
/// present with the recorded size and digest.
pub(super) fn verify(dir: &Path, manifest: &Manifest) -> Result<(), CheckpointError> {
    for required in [WEIGHTS_FILE, OPTIMIZER_FILE, STATE_FILE] {
        if manifest.entry(required).is_none() {
            let problem = Corruption::Invalid(format!("does not list {required}"));
            return Err(corrupt(dir, MANIFEST_FILE, problem));
        }
    }
    for entry in &manifest.files {
        verify_file(dir, entry)?;
    }
    Ok(())
}

fn verify_file(dir: &Path, entry: &FileEntry) -> Result<(), CheckpointError> {
    // A hand-edited or hostile manifest must not send us outside the folder.
    let mut components = Path::new(&entry.name).components();
    if !matches!(
        (components.next(), components.next()),
        (Some(Component::Normal(_)), None)
    ) {
        let problem = Corruption::Invalid(format!("lists `{}`, not a file name", entry.name));
        return Err(corrupt(dir, MANIFEST_FILE, problem));
    }
    let path = dir.join(&entry.name);
    let found_bytes = match std::fs::metadata(&path) {
        Ok(metadata) => metadata.len(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(CheckpointError::Missing {
                dir: dir.to_path_buf(),
                file: entry.name.clone(),
            });
        }
        Err(error) => return Err(context(dir, "read", &path)(error)),
    };
    // The size is free to check and catches truncation without hashing gigabytes.
    if found_bytes != entry.bytes {
        let problem = Corruption::Size {
            found: found_bytes,
            expected: entry.bytes,
        };
        return Err(corrupt(dir, &entry.name, problem));
    }
    let (_, found) = digest(&path).map_err(context(dir, "read", &path))?;
    if !found.eq_ignore_ascii_case(&entry.sha256) {
        let problem = Corruption::Sha256 {
            found,
            expected: entry.sha256.clone(),
        };
        return Err(corrupt(dir, &entry.name, problem));
    }
    Ok(())
}

//! Named tensors to and from safetensors files, keeping names, order, dtypes and bits.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use tch::{Device, TchError, Tensor};

use super::error::{CheckpointError, Corruption, corrupt};
use super::manifest::Manifest;
use super::{MANIFEST_FILE, io};

/// Writes `tensors` to `dir/file` and syncs it; returns the names in the caller's order for
/// the manifest. `checkpoint` is the destination folder, named in errors.
pub(super) fn write(
    checkpoint: &Path,
    dir: &Path,
    file: &str,
    tensors: &[(String, Tensor)],
) -> Result<Vec<String>, CheckpointError> {
    check_names(checkpoint, file, tensors)?;
    let tensor_error = |source| CheckpointError::Tensor {
        dir: checkpoint.to_path_buf(),
        file: file.to_string(),
        source,
    };
    // safetensors copies raw bytes, so it needs CPU memory laid out contiguously.
    let prepared = tensors
        .iter()
        .map(|(name, tensor)| {
            let cpu = tensor
                .f_detach()?
                .f_to_device(Device::Cpu)?
                .f_contiguous()?;
            Ok((name.as_str(), cpu))
        })
        .collect::<Result<Vec<_>, TchError>>()
        .map_err(tensor_error)?;
    let path = dir.join(file);
    // With the `format` metadata `transformers` checks, so the weights load there too.
    let named = prepared.iter().map(|(name, tensor)| (*name, tensor));
    crate::tensor_file::write_safetensors(&path, named).map_err(|error| match error {
        crate::tensor_file::TensorFileError::Write { source, .. } => CheckpointError::Io {
            dir: checkpoint.to_path_buf(),
            action: "write",
            path: path.clone(),
            source,
        },
        other => CheckpointError::Unsavable {
            dir: checkpoint.to_path_buf(),
            reason: format!("{file}: {other}"),
        },
    })?;
    io::sync_file(checkpoint, &path)?;
    Ok(tensors.iter().map(|(name, _)| name.clone()).collect())
}

/// safetensors keys its header by name, so a duplicate would silently drop a tensor; and
/// `__metadata__` is the header's own key.
fn check_names(
    checkpoint: &Path,
    file: &str,
    tensors: &[(String, Tensor)],
) -> Result<(), CheckpointError> {
    let mut seen = HashSet::new();
    for (name, _) in tensors {
        let reason = if name == "__metadata__" {
            "is reserved by safetensors"
        } else if !seen.insert(name.as_str()) {
            "appears twice"
        } else {
            continue;
        };
        return Err(CheckpointError::Unsavable {
            dir: checkpoint.to_path_buf(),
            reason: format!("{file}: tensor name `{name}` {reason}"),
        });
    }
    Ok(())
}

/// Reads `dir/file` (already verified against the manifest) in the order the manifest records.
pub(super) fn read(
    dir: &Path,
    manifest: &Manifest,
    file: &str,
) -> Result<Vec<(String, Tensor)>, CheckpointError> {
    let Some(order) = manifest
        .entry(file)
        .and_then(|entry| entry.tensors.as_ref())
    else {
        let problem = Corruption::Invalid(format!("does not list the tensors of {file}"));
        return Err(corrupt(dir, MANIFEST_FILE, problem));
    };
    let mut stored: HashMap<String, Tensor> = Tensor::read_safetensors(dir.join(file))
        .map_err(|source| CheckpointError::Tensor {
            dir: dir.to_path_buf(),
            file: file.to_string(),
            source,
        })?
        .into_iter()
        .collect();
    let mut ordered = Vec::with_capacity(order.len());
    for name in order {
        let Some(tensor) = stored.remove(name) else {
            let problem =
                Corruption::Invalid(format!("has no tensor `{name}`, which the manifest lists"));
            return Err(corrupt(dir, file, problem));
        };
        ordered.push((name.clone(), tensor));
    }
    if let Some(extra) = stored.keys().min() {
        let problem = Corruption::Invalid(format!(
            "holds tensor `{extra}`, which the manifest does not list"
        ));
        return Err(corrupt(dir, file, problem));
    }
    Ok(ordered)
}

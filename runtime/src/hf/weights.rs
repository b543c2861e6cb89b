//! Safetensors weights (single file or sharded) → the variables of a [`nn::VarStore`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tch::{Tensor, nn};

use super::HfError;

pub(super) const SINGLE_FILE: &str = "model.safetensors";
pub(super) const INDEX_FILE: &str = "model.safetensors.index.json";

/// Heads that causal-LM checkpoints do not carry; they keep their init when absent.
pub(super) const OPTIONAL: [&str; 2] = ["value_head.weight", "score.weight"];

#[derive(Debug, Deserialize)]
pub(super) struct ShardIndex {
    pub(super) weight_map: BTreeMap<String, String>,
}

/// A checkpoint tensor and the file it came from (for errors).
struct Stored {
    tensor: Tensor,
    file: PathBuf,
}

/// Copies every variable of `vs` from the checkpoint in `dir`. Everything is checked before
/// anything is copied, so on error `vs` is unchanged.
pub fn load_weights(vs: &mut nn::VarStore, dir: &Path) -> Result<(), HfError> {
    let (stored, listing) = read_checkpoint(dir)?;
    let variables = vs.variables();
    let mut stored_names: Vec<&String> = stored.keys().collect();
    stored_names.sort();
    if let Some(name) = stored_names
        .into_iter()
        .find(|name| !variables.contains_key(*name) && !ignorable(name))
    {
        return Err(HfError::UnexpectedTensor {
            path: stored[name].file.clone(),
            name: name.clone(),
        });
    }
    let mut names: Vec<&String> = variables.keys().collect();
    names.sort();
    let mut copies = Vec::with_capacity(names.len());
    for name in names {
        let variable = &variables[name];
        let Some(Stored { tensor, file }) = stored.get(name) else {
            if OPTIONAL.contains(&name.as_str()) {
                continue;
            }
            return Err(HfError::MissingTensor {
                path: listing.clone(),
                name: name.clone(),
            });
        };
        if tensor.size() != variable.size() {
            return Err(HfError::ShapeMismatch {
                path: file.clone(),
                name: name.clone(),
                expected: variable.size(),
                found: tensor.size(),
            });
        }
        copies.push((variable.shallow_clone(), tensor, file));
    }
    for (mut variable, tensor, file) in copies {
        tch::no_grad(|| variable.f_copy_(&tensor.to_kind(variable.kind()))).map_err(|e| {
            HfError::Safetensors {
                path: file.clone(),
                message: e.to_string(),
            }
        })?;
    }
    Ok(())
}

/// Tensors a checkpoint may hold that a model need not have: a tied or absent LM head, and the
/// rotary frequencies some old exports saved.
pub(super) fn ignorable(name: &str) -> bool {
    name == "lm_head.weight" || name.ends_with("rotary_emb.inv_freq")
}

/// The folder's shard index (`None` when it has none), its shard paths checked to stay in the
/// folder: relative, no `..`. Only the path is checked, not where symbolic links lead: the
/// Hugging Face cache links its snapshots' files to blobs outside the snapshot folder.
pub(super) fn read_index(dir: &Path) -> Result<Option<(PathBuf, ShardIndex)>, HfError> {
    let index_path = dir.join(INDEX_FILE);
    if !index_path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&index_path).map_err(|source| HfError::Io {
        path: index_path.clone(),
        source,
    })?;
    let index: ShardIndex = serde_json::from_str(&text).map_err(|source| HfError::Json {
        path: index_path.clone(),
        source,
    })?;
    if let Some(shard) = index.weight_map.values().find(|shard| !inside(shard)) {
        return Err(HfError::ShardOutside {
            path: index_path,
            shard: shard.clone(),
        });
    }
    Ok(Some((index_path, index)))
}

/// All tensors of the checkpoint by name, and the file that lists them (the index or the single
/// file), which a missing tensor is reported against.
fn read_checkpoint(dir: &Path) -> Result<(HashMap<String, Stored>, PathBuf), HfError> {
    let single_path = dir.join(SINGLE_FILE);
    if let Some((index_path, index)) = read_index(dir)? {
        let shards: std::collections::BTreeSet<&String> = index.weight_map.values().collect();
        let mut stored = HashMap::new();
        for shard in shards {
            let file = dir.join(shard);
            for (name, tensor) in read_file(&file)? {
                // The index is authoritative about which shard holds a name.
                if index.weight_map.get(&name) == Some(shard) {
                    stored.insert(
                        name,
                        Stored {
                            tensor,
                            file: file.clone(),
                        },
                    );
                }
            }
        }
        if let Some((name, shard)) = index
            .weight_map
            .iter()
            .find(|(name, _)| !stored.contains_key(*name))
        {
            return Err(HfError::MissingTensor {
                path: dir.join(shard),
                name: name.clone(),
            });
        }
        Ok((stored, index_path))
    } else if single_path.exists() {
        let stored = read_file(&single_path)?
            .into_iter()
            .map(|(name, tensor)| {
                (
                    name,
                    Stored {
                        tensor,
                        file: single_path.clone(),
                    },
                )
            })
            .collect();
        Ok((stored, single_path))
    } else {
        Err(HfError::NoWeights {
            dir: dir.to_path_buf(),
        })
    }
}

/// Whether the relative path `shard` names something inside the folder it is relative to.
pub(super) fn inside(shard: &str) -> bool {
    use std::path::Component;
    let path = Path::new(shard);
    path.components().next().is_some()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

fn read_file(path: &Path) -> Result<Vec<(String, Tensor)>, HfError> {
    Tensor::read_safetensors(path).map_err(|e| HfError::Safetensors {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

//! A Hugging Face folder read a shard at a time: the safetensors headers give each tensor's
//! dtype, shape and byte offsets, so a rank reads the byte ranges of its elements alone (a row
//! shard is one read, a column shard one read per row) and never the whole tensor.
//!
//! The folder is checked as [`load_weights`](super::load_weights) checks it (every tensor of the
//! model present with its shape, nothing unexpected) before anything is read; heads a causal-LM
//! checkpoint does not carry keep the seeded init that `load_model` gives them (seed 0).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tch::{Kind, Tensor};

use super::weights::{OPTIONAL, SINGLE_FILE, ignorable, read_index};
use super::{HfError, load_config};
use crate::model::init::{Parameter, parameters};
use crate::model::{Heads, ModelConfig};

/// A header larger than this is refused rather than read (safetensors itself caps it at 100 MB).
const MAX_HEADER: u64 = 100_000_000;

/// Where a stored tensor's bytes are.
struct Entry {
    file: usize,
    kind: Kind,
    /// Bytes per element.
    width: u64,
    /// Offset of its first byte in the file.
    start: u64,
}

/// The tensors of a Hugging Face folder, each readable a slice at a time (see the module docs).
pub struct HfSlices {
    files: Vec<(PathBuf, File)>,
    entries: BTreeMap<String, Entry>,
}

/// Reads `dir/config.json` and the safetensors headers of `dir`, and checks them against the
/// model of `heads` (after verifying an rlc checkpoint's manifest, as `load_model` does): the
/// config and the model's parameters (what `model::init::parameters` lists) with their source.
pub fn open_slices(
    dir: &Path,
    heads: Heads,
) -> Result<(ModelConfig, Vec<Parameter>, HfSlices), HfError> {
    if dir.join(crate::checkpoint::MANIFEST_FILE).exists() {
        crate::checkpoint::verify(dir)?;
    }
    let (config, _) = load_config(dir)?;
    config.validate().map_err(|source| HfError::InvalidConfig {
        path: dir.join("config.json"),
        source,
    })?;
    let params = parameters(&config, heads);
    let (listing, wanted) = listing(dir)?;
    let mut files = Vec::new();
    let mut entries = BTreeMap::new();
    let mut shapes = BTreeMap::new();
    for (path, names) in wanted {
        let file = File::open(&path).map_err(|source| HfError::Io {
            path: path.clone(),
            source,
        })?;
        for (name, (kind, width, shape, start)) in header(&file, &path)? {
            if names.as_ref().is_some_and(|names| !names.contains(&name)) {
                // The index is authoritative about which shard holds a name.
                continue;
            }
            let entry = Entry {
                file: files.len(),
                kind,
                width,
                start,
            };
            shapes.insert(name.clone(), (shape, path.clone()));
            entries.insert(name, entry);
        }
        if let Some(missing) = names.and_then(|n| n.into_iter().find(|n| !entries.contains_key(n)))
        {
            return Err(HfError::MissingTensor {
                path: path.clone(),
                name: missing,
            });
        }
        files.push((path, file));
    }
    let known: BTreeSet<&str> = params.iter().map(|p| p.name.as_str()).collect();
    if let Some((name, (_, path))) = shapes
        .iter()
        .find(|(name, _)| !known.contains(name.as_str()) && !ignorable(name))
    {
        return Err(HfError::UnexpectedTensor {
            path: path.clone(),
            name: name.clone(),
        });
    }
    let mut sorted: Vec<&Parameter> = params.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for param in sorted {
        match shapes.get(&param.name) {
            None if OPTIONAL.contains(&param.name.as_str()) => {}
            None => {
                return Err(HfError::MissingTensor {
                    path: listing,
                    name: param.name.clone(),
                });
            }
            Some((shape, path)) if *shape != param.shape => {
                return Err(HfError::ShapeMismatch {
                    path: path.clone(),
                    name: param.name.clone(),
                    expected: param.shape.clone(),
                    found: shape.clone(),
                });
            }
            Some(_) => {}
        }
    }
    Ok((config, params, HfSlices { files, entries }))
}

/// The file that lists the tensors (the index or the single file), and each weight file with
/// the names the index assigns it (`None`: a single file, all of its tensors).
#[allow(clippy::type_complexity)]
fn listing(dir: &Path) -> Result<(PathBuf, Vec<(PathBuf, Option<BTreeSet<String>>)>), HfError> {
    let single_path = dir.join(SINGLE_FILE);
    if let Some((index_path, index)) = read_index(dir)? {
        let mut by_file: BTreeMap<&String, BTreeSet<String>> = BTreeMap::new();
        for (name, shard) in &index.weight_map {
            by_file.entry(shard).or_default().insert(name.clone());
        }
        let files = by_file
            .into_iter()
            .map(|(shard, names)| (dir.join(shard), Some(names)))
            .collect();
        Ok((index_path, files))
    } else if single_path.exists() {
        Ok((single_path.clone(), vec![(single_path, None)]))
    } else {
        Err(HfError::NoWeights {
            dir: dir.to_path_buf(),
        })
    }
}

/// A tensor's kind, bytes per element, shape and first byte in the file.
type Described = (Kind, u64, Vec<i64>, u64);

/// The tensors a safetensors file describes in its header, each checked to lie inside the file.
fn header(file: &File, path: &Path) -> Result<BTreeMap<String, Described>, HfError> {
    let bad = |message: String| HfError::Safetensors {
        path: path.to_path_buf(),
        message,
    };
    let io = |source| HfError::Io {
        path: path.to_path_buf(),
        source,
    };
    let size = file.metadata().map_err(io)?.len();
    let mut prefix = [0u8; 8];
    file.read_exact_at(&mut prefix, 0)
        .map_err(|_| bad("shorter than its 8-byte header length".into()))?;
    let length = u64::from_le_bytes(prefix);
    if length > MAX_HEADER || length > size.saturating_sub(8) {
        return Err(bad(format!(
            "a header of {length} bytes in a file of {size}"
        )));
    }
    let mut text = vec![0u8; length as usize];
    file.read_exact_at(&mut text, 8).map_err(io)?;
    let json: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&text).map_err(|e| bad(format!("header: {e}")))?;
    let data = 8 + length;
    let mut out = BTreeMap::new();
    for (name, described) in json {
        if name == "__metadata__" {
            continue;
        }
        let field = |key: &str| {
            described
                .get(key)
                .ok_or_else(|| bad(format!("`{name}` has no `{key}`")))
        };
        let dtype = field("dtype")?.as_str().unwrap_or("");
        let (kind, width) = match dtype {
            "F64" => (Kind::Double, 8),
            "F32" => (Kind::Float, 4),
            "F16" => (Kind::Half, 2),
            "BF16" => (Kind::BFloat16, 2),
            other => return Err(bad(format!("`{name}` has dtype `{other}`, not a float"))),
        };
        let numbers = |key: &str| -> Result<Vec<u64>, HfError> {
            field(key)?
                .as_array()
                .and_then(|a| a.iter().map(serde_json::Value::as_u64).collect())
                .ok_or_else(|| bad(format!("`{name}`: `{key}` is not a list of integers")))
        };
        let shape = numbers("shape")?;
        let offsets = numbers("data_offsets")?;
        let numel = shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .and_then(|n| n.checked_mul(width));
        let fits = match (offsets.as_slice(), numel) {
            (&[begin, end], Some(bytes)) => {
                begin <= end && end - begin == bytes && end <= size - data
            }
            _ => false,
        };
        if !fits || shape.iter().any(|&d| d > i64::MAX as u64) {
            return Err(bad(format!(
                "`{name}`: offsets {offsets:?} do not hold a {dtype} tensor of shape {shape:?} \
                 inside the file"
            )));
        }
        let shape = shape.iter().map(|&d| d as i64).collect();
        out.insert(name, (kind, width, shape, data + offsets[0]));
    }
    Ok(out)
}

impl HfSlices {
    /// The element ranges `ranges` (of the flattened tensor, `numel` elements in all) of the
    /// tensor `name`, widened to f32; `None` when the folder has no such tensor.
    pub fn read_ranges(
        &self,
        name: &str,
        ranges: &[Range<i64>],
        numel: i64,
    ) -> Option<Result<Tensor, String>> {
        let entry = self.entries.get(name)?;
        let (path, file) = &self.files[entry.file];
        let failed = |e: String| format!("{}: {e}", path.display());
        let read = || -> Result<Tensor, String> {
            let mut bytes = vec![0u8; (numel as u64 * entry.width) as usize];
            let mut at = 0usize;
            for range in ranges {
                let len = ((range.end - range.start) as u64 * entry.width) as usize;
                let offset = entry.start + range.start as u64 * entry.width;
                file.read_exact_at(&mut bytes[at..at + len], offset)
                    .map_err(|e| failed(e.to_string()))?;
                at += len;
            }
            let stored = Tensor::f_from_data_size(&bytes, &[numel], entry.kind)
                .map_err(|e| failed(e.to_string()))?;
            Ok(stored.to_kind(Kind::Float))
        };
        Some(read())
    }
}

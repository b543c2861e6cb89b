//! Which slice of each Hugging Face weight a tensor-parallel rank holds, loading those slices
//! into a var store, and gathering them back into full weights.

use std::collections::BTreeMap;

use tch::{Tensor, nn};

use super::TpError;
use crate::collectives::{CollectiveError, Communicator};
use crate::model::{ModelConfig, RmsNorm};
use crate::parallel::shards::{TpSplit, tp_split};

/// How a weight is laid out over the TP group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Every rank holds the whole tensor (norms, value and score heads).
    Replicated,
    /// Rank `r` holds the `r`-th of `tp` equal slices along this dimension.
    Along(i64),
}

/// The split of a weight by its Hugging Face name, from [`tp_split`] (the one rule that the
/// re-sharding between layouts follows too): q/k/v, gate/up (column-parallel), the embedding and
/// the LM head (vocabulary rows) along dimension 0; o and down (row-parallel) along dimension 1;
/// everything else replicated. Splitting q/k/v rows evenly gives each rank contiguous whole
/// heads, since a head's rows are contiguous.
pub fn split_of(name: &str) -> Split {
    match tp_split(name) {
        TpSplit::Rows => Split::Along(0),
        TpSplit::Columns => Split::Along(1),
        TpSplit::Replicated => Split::Replicated,
    }
}

/// Refuses a group size that does not divide the heads, key/value heads, MLP width and
/// vocabulary (a typed error instead of uneven shards).
pub fn check_divisible(config: &ModelConfig, tp: usize) -> Result<(), TpError> {
    let counts = [
        ("query heads", config.heads),
        ("key/value heads", config.kv_heads),
        ("MLP width", config.ffn),
        ("vocabulary entries", config.vocab),
    ];
    match counts
        .into_iter()
        .find(|&(_, count)| count % tp as i64 != 0)
    {
        Some((what, count)) => Err(TpError::NotDivisible { what, count, tp }),
        None => Ok(()),
    }
}

/// A parameter of a TP model: its Hugging Face name, the rank's variable and how it is split.
#[derive(Debug)]
pub struct ShardedParam {
    pub name: String,
    pub tensor: Tensor,
    pub split: Split,
}

/// Reads full weights by name, keeps this rank's shard of each and registers it in a var store
/// under the same name, remembering every parameter for clipping and [`gather_full_weights`].
/// Built with [`ShardLoader::from_shards`] it reads this rank's shards instead (a re-shard's
/// output), so that no rank ever holds a full weight.
pub struct ShardLoader<'a, 'p> {
    root: &'a nn::Path<'p>,
    weights: &'a BTreeMap<String, Tensor>,
    rank: usize,
    size: usize,
    params: Vec<ShardedParam>,
    /// `weights` are this rank's shards (any shape, read in row-major order), not full tensors.
    local: bool,
    /// This rank's shards given away ([`ShardLoader::from_owned_shards`]): each becomes its
    /// variable as it is, without a copy (`weights` is then empty).
    owned: Option<BTreeMap<String, Tensor>>,
}

impl<'a, 'p> ShardLoader<'a, 'p> {
    /// `weights` are full tensors under Hugging Face names; `tp` says which shard is this rank's.
    pub fn new(
        root: &'a nn::Path<'p>,
        weights: &'a BTreeMap<String, Tensor>,
        tp: &Communicator,
    ) -> Self {
        Self {
            root,
            weights,
            rank: tp.rank(),
            size: tp.world_size(),
            params: Vec::new(),
            local: false,
            owned: None,
        }
    }

    /// `shards` are this rank's shards under Hugging Face names, each holding the elements of its
    /// local tensor in row-major order (any shape: the flat shards `parallel::reshard` returns
    /// do), which is the order `parallel::shards::holding` lists them in.
    pub fn from_shards(
        root: &'a nn::Path<'p>,
        shards: &'a BTreeMap<String, Tensor>,
        tp: &Communicator,
    ) -> Self {
        Self {
            local: true,
            ..Self::new(root, shards, tp)
        }
    }

    /// As [`ShardLoader::from_shards`] from shards the loader keeps: each becomes its variable
    /// without a copy, so that a rank materialising its shards holds each once (they must be
    /// float32 on the var store's device, or they are converted).
    pub fn from_owned_shards(
        root: &'a nn::Path<'p>,
        shards: BTreeMap<String, Tensor>,
        empty: &'a BTreeMap<String, Tensor>,
        tp: &Communicator,
    ) -> Self {
        Self {
            owned: Some(shards),
            ..Self::from_shards(root, empty, tp)
        }
    }

    /// This rank's shard of `name` given as such, reshaped to `local` (its shape on this rank);
    /// an owned one is taken out of the loader.
    fn local_shard(&mut self, name: &str, local: &[i64]) -> Result<Tensor, TpError> {
        let taken = self.owned.as_mut().and_then(|owned| owned.remove(name));
        let shard = taken
            .as_ref()
            .or_else(|| self.weights.get(name))
            .ok_or_else(|| TpError::MissingWeight(name.to_string()))?;
        if shard.numel() as i64 != local.iter().product::<i64>() {
            return Err(TpError::WeightShape {
                name: name.to_string(),
                expected: local.to_vec(),
                found: shard.size(),
            });
        }
        Ok(shard.reshape(local))
    }

    /// The full weight `name`, checked against the `shape` the config gives it.
    fn full(&self, name: &str, shape: &[i64]) -> Result<&'a Tensor, TpError> {
        let weight = self
            .weights
            .get(name)
            .ok_or_else(|| TpError::MissingWeight(name.to_string()))?;
        if weight.size() != shape {
            return Err(TpError::WeightShape {
                name: name.to_string(),
                expected: shape.to_vec(),
                found: weight.size(),
            });
        }
        Ok(weight)
    }

    /// The var-store path of `name`'s module and the variable's own name (`tch` forbids dots in
    /// a variable name), refusing a name that is already taken.
    fn place(&self, name: &str) -> Result<(nn::Path<'p>, String), TpError> {
        let (module, leaf) = name.rsplit_once('.').unwrap_or(("", name));
        let path = module
            .split('.')
            .filter(|part| !part.is_empty())
            .fold(self.root.clone(), |path, part| path / part);
        if path.get(leaf).is_some() {
            return Err(TpError::AlreadyRegistered(name.to_string()));
        }
        Ok((path, leaf.to_string()))
    }

    /// This rank's shard of `name` (full shape `shape`), registered as a trainable variable.
    pub fn load(&mut self, name: &str, shape: &[i64]) -> Result<Tensor, TpError> {
        // Full weights are checked against the config first; local shards once their shape is known.
        let full = match self.local {
            true => None,
            false => Some(self.full(name, shape)?),
        };
        let split = split_of(name);
        let shard = match split {
            Split::Replicated => match full {
                Some(full) => full.shallow_clone(),
                None => self.local_shard(name, shape)?,
            },
            Split::Along(dim) => {
                let (size, tp) = (self.size as i64, self.size);
                let uneven = || TpError::UnevenShard {
                    name: name.to_string(),
                    dim,
                    tp,
                };
                let extent = *shape.get(dim as usize).ok_or_else(uneven)?;
                if extent % size != 0 {
                    return Err(uneven());
                }
                let len = extent / size;
                match full {
                    Some(full) => full.narrow(dim, self.rank as i64 * len, len),
                    None => {
                        let mut local = shape.to_vec();
                        local[dim as usize] = len;
                        self.local_shard(name, &local)?
                    }
                }
            }
        };
        let (path, leaf) = self.place(name)?;
        let tensor = match self.owned {
            // The loader's own tensor becomes the variable.
            Some(_) => {
                let shard = shard.to_device(path.device()).to_kind(tch::Kind::Float);
                path.add(&leaf, shard.detach(), true)
            }
            None => path.var_copy(&leaf, &shard.detach()),
        };
        self.params.push(ShardedParam {
            name: name.to_string(),
            tensor: tensor.shallow_clone(),
            split,
        });
        Ok(tensor)
    }

    /// The replicated RMSNorm `{prefix}.weight`.
    pub fn load_norm(&mut self, prefix: &str, size: i64, eps: f64) -> Result<RmsNorm, TpError> {
        let name = format!("{prefix}.weight");
        let full = match self.local {
            true => self.local_shard(&name, &[size])?,
            false => self.full(&name, &[size])?.shallow_clone(),
        };
        let (path, leaf) = self.place(&name)?;
        let norm = RmsNorm::new(&path, size, eps);
        let mut weight = path
            .get(&leaf)
            .ok_or_else(|| TpError::AlreadyRegistered(name.clone()))?;
        tch::no_grad(|| weight.copy_(&full));
        self.params.push(ShardedParam {
            name,
            tensor: weight,
            split: Split::Replicated,
        });
        Ok(norm)
    }

    /// The parameters loaded so far, in load order.
    pub fn into_params(self) -> Vec<ShardedParam> {
        self.params
    }
}

/// Every parameter's full tensor under its name, on every rank: shards gathered over `tp` and
/// concatenated in rank order, replicated tensors copied.
pub fn gather_full_weights(
    params: &[ShardedParam],
    tp: &Communicator,
) -> Result<BTreeMap<String, Tensor>, CollectiveError> {
    params
        .iter()
        .map(|param| {
            let value = param.tensor.detach();
            let full = match param.split {
                Split::Replicated => value.copy(),
                Split::Along(dim) => Tensor::cat(&tp.all_gather(&value)?, dim),
            };
            Ok((param.name.clone(), full))
        })
        .collect()
}

//! A rank's shard of a role's initial weights, made without the whole model.
//!
//! The shard a rank holds under a layout is a list of row-major element ranges of each full
//! parameter ([`holding`]); a [`WeightSource`] produces exactly those elements: the seeded
//! random init draws them alone from its counter-addressable stream ([`Seeded`]), a Hugging
//! Face folder reads their byte ranges from the safetensors files (`hf::HfSlices`). The old
//! path — build the whole model, then cut each tensor ([`Cut`]) — stays as the oracle the
//! tests hold both to, bit for bit.

use std::collections::BTreeMap;

use rlc_plan::model::Layout;
use tch::{Device, Kind, Tensor};

use super::RankGroups;
use super::shards::{Coord, Holding, holding};
use crate::model::ModelConfig;
use crate::model::init::{Parameter, seeded};

/// A source could not give a parameter's elements.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{name}`: {message}")]
pub struct SourceError {
    pub name: String,
    pub message: String,
}

/// Where a role's initial weights come from, read a shard at a time.
pub trait WeightSource {
    /// The elements `held` of `param` (float32, flat, in `held`'s order), on the CPU.
    fn read(&self, param: &Parameter, held: &Holding) -> Result<Tensor, SourceError>;
}

/// The seeded random init of `Transformer::new(…, seed)`.
#[derive(Clone, Copy, Debug)]
pub struct Seeded {
    pub seed: u64,
}

impl WeightSource for Seeded {
    fn read(&self, param: &Parameter, held: &Holding) -> Result<Tensor, SourceError> {
        Ok(seeded(self.seed, param, held.ranges()))
    }
}

/// A Hugging Face folder read a shard at a time (`hf::open_slices`); a head the checkpoint does
/// not carry keeps its seed-0 init, as the whole load does.
impl WeightSource for crate::hf::HfSlices {
    fn read(&self, param: &Parameter, held: &Holding) -> Result<Tensor, SourceError> {
        match self.read_ranges(&param.name, held.ranges(), held.numel()) {
            None => Seeded { seed: 0 }.read(param, held),
            Some(read) => read.map_err(|message| SourceError {
                name: param.name.clone(),
                message,
            }),
        }
    }
}

/// The full-then-cut path: whole tensors by name, each cut to the rank's elements.
pub struct Cut<'a>(pub &'a BTreeMap<String, Tensor>);

impl WeightSource for Cut<'_> {
    fn read(&self, param: &Parameter, held: &Holding) -> Result<Tensor, SourceError> {
        let full = self.0.get(&param.name).ok_or_else(|| SourceError {
            name: param.name.clone(),
            message: "missing".into(),
        })?;
        if full.size() != param.shape {
            return Err(SourceError {
                name: param.name.clone(),
                message: format!("shape {:?}, the model's {:?}", full.size(), param.shape),
            });
        }
        Ok(held.take(&full.to_device(Device::Cpu).to_kind(Kind::Float)))
    }
}

/// A rank's coordinate in its instance's layout.
pub fn coord_of(groups: &RankGroups) -> Coord {
    Coord {
        pp: groups.pp_rank as i64,
        dp: groups.dp_rank as i64,
        fsdp: groups.fsdp_rank as i64,
        tp: groups.tp_rank as i64,
    }
}

/// The shards the rank at `coord` of `layout` holds of `params` (the model of `config`), by
/// name, flat in [`holding`]'s order, on `device`: parameters it holds nothing of are absent.
/// Only these elements are ever made.
pub fn rank_shards(
    source: &dyn WeightSource,
    params: &[Parameter],
    config: &ModelConfig,
    layout: &Layout,
    coord: Coord,
    device: Device,
) -> Result<BTreeMap<String, Tensor>, SourceError> {
    let mut shards = BTreeMap::new();
    for param in params {
        let Some(held) = holding(&param.name, &param.shape, config, layout, coord) else {
            continue;
        };
        let shard = source.read(param, &held)?;
        shards.insert(param.name.clone(), shard.to_device(device));
    }
    Ok(shards)
}

#[cfg(test)]
mod tests;

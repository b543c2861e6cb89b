//! FSDP over tensor-parallel shards: each rank of a TP group holds its TP-local shards, and those
//! are sharded again (flat, padded, 1/N each) over the rank's `fsdp` group, with their gradients
//! and AdamW moments.
//!
//! The whole TP-local model is one FSDP unit (PyTorch FSDP without an auto-wrap policy): a step
//! all-gathers every TP-local shard, runs the tape's forward and backward, reduce-scatters (sums)
//! the gradients into the flat shards and frees the gathered tensors. Between steps a rank holds
//! only its flat shards, their gradients and moments; during a step it holds its TP-local model
//! once, unlike `parallel::fsdp`, which gathers one layer at a time (its units are the
//! single-rank model's blocks, which cannot run TP shards).

use std::collections::BTreeMap;

use tch::{Device, Kind, Tensor, nn};

use super::CombinedError;
use crate::collectives::{CollectiveError, Communicator, ReduceOp};
use crate::model::{Heads, ModelConfig};
use crate::optim::{AdamW, AdamWConfig, clip_to, sum_of_squares};
use crate::parallel::RankGroups;
use crate::parallel::tape::Tape;
use crate::parallel::tp::{Split, TpTransformer};

/// One TP-local parameter, sharded over the FSDP group.
struct FlatParam {
    name: String,
    split: Split,
    /// Its TP-local shape.
    shape: Vec<i64>,
    /// This rank's chunk of the flattened, zero-padded tensor: a leaf whose gradient is the
    /// gradient shard.
    shard: Tensor,
    /// The model's variable, empty except while the model is gathered.
    var: Tensor,
}

impl FlatParam {
    fn numel(&self) -> i64 {
        self.shape.iter().product()
    }
}

fn empty(like: &Tensor) -> Tensor {
    Tensor::empty([0], (like.kind(), like.device()))
}

/// The model's variables while gathered; dropping it empties them (and their gradients) again.
struct Gathered<'a> {
    params: &'a [FlatParam],
}

impl Drop for Gathered<'_> {
    fn drop(&mut self) {
        for param in self.params {
            let mut var = param.var.shallow_clone();
            let mut grad = var.grad();
            if grad.defined() {
                grad.set_data(&empty(&grad));
            }
            var.set_data(&empty(&var));
        }
    }
}

/// A policy model split over a TP group and sharded over an FSDP group (and replicated over
/// `dp`, whose replicas' gradients are summed: HSDP × TP). Every rank of the layout calls the
/// same methods in the same order; each trains on its data rank's rows.
pub struct FsdpTp<'c> {
    model: TpTransformer<'c>,
    _vs: nn::VarStore,
    params: Vec<FlatParam>,
    tp: &'c Communicator,
    fsdp: &'c Communicator,
    dp: &'c Communicator,
    adam: AdamW,
}

impl<'c> FsdpTp<'c> {
    /// This rank's FSDP shards of its TP shards of the full `weights` (Hugging Face names).
    pub fn new(
        weights: &BTreeMap<String, Tensor>,
        config: &ModelConfig,
        groups: &'c RankGroups,
        adamw: AdamWConfig,
    ) -> Result<Self, CombinedError> {
        if groups.layout.pp != 1 {
            return Err(CombinedError::FsdpWithStages(groups.layout.pp));
        }
        let device = weights.values().next().map_or(Device::Cpu, Tensor::device);
        let vs = nn::VarStore::new(device);
        let model = TpTransformer::new(&vs.root(), weights, config, Heads::POLICY, &groups.tp)?;
        let (rank, world) = (groups.fsdp.rank() as i64, groups.fsdp.world_size() as i64);
        let params: Vec<FlatParam> = model
            .params()
            .iter()
            .map(|p| {
                let mut var = p.tensor.shallow_clone();
                let local = var.detach();
                let numel = local.numel() as i64;
                let chunk = (numel + world - 1) / world;
                let padding = Tensor::zeros([chunk * world - numel], (local.kind(), device));
                let flat = Tensor::cat(&[local.reshape([-1]), padding], 0);
                let shard = flat
                    .narrow(0, rank * chunk, chunk)
                    .copy()
                    .set_requires_grad(true);
                // A defined zero gradient from the start, accumulated into in place.
                (shard.sum(Kind::Float) * 0.0).backward();
                let shape = var.size();
                var.set_data(&empty(&var));
                FlatParam {
                    name: p.name.clone(),
                    split: p.split,
                    shape,
                    shard,
                    var,
                }
            })
            .collect();
        let adam = AdamW::with_decay(
            params
                .iter()
                .map(|p| (p.name.clone(), p.shard.shallow_clone(), p.shape.len() >= 2))
                .collect(),
            adamw,
        );
        Ok(Self {
            model,
            _vs: vs,
            params,
            tp: &groups.tp,
            fsdp: &groups.fsdp,
            dp: &groups.dp,
            adam,
        })
    }

    /// Fills the model's variables with their TP-local tensors, all-gathered over `fsdp`; a
    /// variable's gradient, if it has one, becomes zeros of its shape to accumulate into.
    fn gather(&self) -> Result<Gathered<'_>, CollectiveError> {
        for param in &self.params {
            let full = self.unshard(param)?;
            let mut var = param.var.shallow_clone();
            let mut grad = var.grad();
            tch::no_grad(|| {
                var.set_data(&full);
                if grad.defined() {
                    grad.set_data(&full.zeros_like());
                }
            });
        }
        Ok(Gathered {
            params: &self.params,
        })
    }

    /// The TP-local tensor of `param`, from every FSDP rank's chunk.
    fn unshard(&self, param: &FlatParam) -> Result<Tensor, CollectiveError> {
        let chunks = self.fsdp.all_gather(&param.shard.detach())?;
        Ok(Tensor::cat(&chunks, 0)
            .narrow(0, 0, param.numel())
            .reshape(param.shape.as_slice()))
    }

    /// Sums the variables' gradients over `fsdp` into the gradient shards (each rank its chunk),
    /// then over `dp`.
    fn scatter_gradients(&self) -> Result<(), CollectiveError> {
        let world = self.fsdp.world_size() as i64;
        for param in &self.params {
            let grad = param.var.grad();
            let chunk = param.shard.numel() as i64;
            let flat = match grad.defined() {
                true => grad.detach().reshape([-1]),
                false => Tensor::zeros([param.numel()], (param.shard.kind(), param.shard.device())),
            };
            let padding = Tensor::zeros(
                [chunk * world - param.numel()],
                (flat.kind(), flat.device()),
            );
            let padded = Tensor::cat(&[flat, padding], 0);
            let mine = self.fsdp.reduce_scatter(&padded, ReduceOp::Sum)?;
            let mine = self.dp.all_reduce(&mine, ReduceOp::Sum)?;
            let mut shard_grad = param.shard.grad();
            tch::no_grad(|| shard_grad.copy_(&(&shard_grad + mine)));
        }
        Ok(())
    }

    /// Logits `[B, T, vocab]` of this rank's rows, gathered over `tp`, without autograd.
    pub fn logits(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor, CombinedError> {
        let _gathered = self.gather()?;
        Ok(tch::no_grad(|| self.model.logits(&Tape::new(), ids, mask))?)
    }

    /// Runs `f` on the gathered TP model (e.g. `generate`, which it implements `Decode` for);
    /// every rank of the FSDP group must decode the same rows, since they share the gathers.
    pub fn with_model<T>(
        &self,
        f: impl FnOnce(&TpTransformer<'c>) -> T,
    ) -> Result<T, CombinedError> {
        let _gathered = self.gather()?;
        Ok(f(&self.model))
    }

    /// One step: zero gradients, forward on this rank's rows, `loss` of the log-probabilities
    /// (this rank's share of the global loss: gradients are summed over the data ranks), backward,
    /// clipping to `max_norm` and AdamW with learning rate `lr`. Returns the gradient norm before
    /// clipping.
    pub fn train_step(
        &mut self,
        ids: &Tensor,
        mask: &Tensor,
        loss: impl FnOnce(&Tensor) -> Tensor,
        max_norm: Option<f64>,
        lr: f64,
    ) -> Result<f64, CombinedError> {
        self.adam.zero_grad();
        {
            let _gathered = self.gather()?;
            let tape = Tape::new();
            let value = loss(&self.model.logprobs(&tape, ids, mask)?);
            tape.backward(&[(&value, None)])?;
            self.scatter_gradients()?;
        }
        let norm = self.clip_grad_norm(max_norm.unwrap_or(f64::INFINITY))?;
        self.adam.step(lr);
        Ok(norm)
    }

    /// Scales the gradient shards so that the whole model's gradient norm is at most `max_norm`;
    /// returns the norm before clipping. Squares are summed over `fsdp` (disjoint chunks, zero
    /// padding), then TP shards' over `tp`; replicated parameters' chunks are equal on every TP
    /// rank and counted once, and replicas (`dp`) hold equal gradients.
    pub fn clip_grad_norm(&self, max_norm: f64) -> Result<f64, CollectiveError> {
        let squares = |split: fn(&Split) -> bool| -> f64 {
            sum_of_squares(
                self.params
                    .iter()
                    .filter(|p| split(&p.split))
                    .map(|p| p.shard.grad()),
            )
        };
        let local = Tensor::from_slice(&[
            squares(|s| *s != Split::Replicated),
            squares(|s| *s == Split::Replicated),
        ]);
        let over_shards = self.fsdp.all_reduce(&local, ReduceOp::Sum)?;
        let sharded = self
            .tp
            .all_reduce(&over_shards.get(0), ReduceOp::Sum)?
            .double_value(&[]);
        let norm = (sharded + over_shards.double_value(&[1])).sqrt();
        clip_to(&self.adam.params(), norm, max_norm);
        Ok(norm)
    }

    /// Every full weight under its Hugging Face name, on every rank: chunks gathered over
    /// `fsdp`, then TP shards over `tp`.
    pub fn full_weights(&self) -> Result<BTreeMap<String, Tensor>, CollectiveError> {
        self.params
            .iter()
            .map(|param| {
                let local = self.unshard(param)?;
                let full = match param.split {
                    Split::Replicated => local,
                    Split::Along(dim) => Tensor::cat(&self.tp.all_gather(&local)?, dim),
                };
                Ok((param.name.clone(), full))
            })
            .collect()
    }
}

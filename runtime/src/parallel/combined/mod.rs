//! Combined layouts: tensor parallelism inside data-parallel replicas, pipeline stages and FSDP,
//! with the communicators [`process_groups`](super::process_groups) gives each rank.
//!
//! - **TP × DP**: each replica is a [`TpTransformer`] over `tp`, trained on its share of the batch
//!   rows ([`data_rows`]); after the tape's backward, [`sum_gradients`] over `data` gives every
//!   replica the whole batch's gradient, then the TP-aware global norm clips it.
//! - **TP × PP**: a [`TpPipeline`] is a [`PipelineModel`] whose stages are made of the TP pieces
//!   (the vocabulary-parallel embedding on the first stage, [`TpDecoderLayer`]s, the final norm and
//!   the vocabulary-parallel head, its logits gathered, on the last). Stage-to-stage traffic goes
//!   over `pp`, which links the same TP rank of adjacent stages; each TP rank of a stage sends and
//!   receives the replicated residual stream, so the pipeline never sees the sharding.
//! - **DP × TP × PP**: the two together, gradients summed over `data` after the pipeline's step.
//! - **FSDP × TP** (and HSDP × TP): [`FsdpTp`] shards each TP-local shard over `fsdp`, the whole
//!   TP-local model one unit.
//!
//! [`TpTransformer`]: super::tp::TpTransformer

mod fsdp_tp;

pub use fsdp_tp::FsdpTp;

use std::collections::BTreeMap;

use tch::{Device, Kind, Tensor, nn};

use super::RankGroups;
use super::pp::parts::{StageEmbedding, StageHead, StageLayer, StageParts};
use super::pp::{PipelineError, PipelineModel, Stage, gather_stages};
use super::tape::Tape;
use super::tp::{
    ShardLoader, ShardedParam, TpDecoderLayer, TpError, VocabParallelEmbedding, VocabParallelHead,
    check_divisible, gather_full_weights, tp_grad_norm,
};
use crate::collectives::{CollectiveError, Communicator, ReduceOp};
use crate::model::{LayerCache, ModelConfig, Positions, RmsNorm, RopeAngles, add_positions};
use crate::optim::clip_to;

/// The weight the first and the last stage both hold (shard-wise) when the LM head is tied to it.

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CombinedError {
    #[error(transparent)]
    Tp(#[from] TpError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("{rows} batch rows do not split evenly over {data_ranks} data ranks")]
    UnevenBatch { rows: i64, data_ranks: u32 },
    #[error("FSDP × TP runs without pipeline stages, got pp {0}")]
    FsdpWithStages(u32),
    #[error("across ranks of a combined layout: {0}")]
    Collective(#[from] CollectiveError),
}

/// The rows `(first, count)` of a batch of `rows` rows that this rank's data replica trains on
/// (`data_rank` of `data_ranks`, as the plan numbers them); every TP rank and stage of the replica
/// gets the same rows.
pub fn data_rows(groups: &RankGroups, rows: i64) -> Result<(i64, i64), CombinedError> {
    let data_ranks = groups.layout.data_ranks();
    if data_ranks == 0 || rows % i64::from(data_ranks) != 0 {
        return Err(CombinedError::UnevenBatch { rows, data_ranks });
    }
    let count = rows / i64::from(data_ranks);
    Ok((groups.data_rank() as i64 * count, count))
}

/// Sums the gradients of `params` over `data` (in one all-reduce of their concatenation), so that
/// replicas that each back-propagated their share of the global loss all hold the whole batch's
/// gradient. A parameter without a gradient joins with zeros and gets the sum.
pub fn sum_gradients(params: &[Tensor], data: &Communicator) -> Result<(), CollectiveError> {
    if data.world_size() == 1 || params.is_empty() {
        return Ok(());
    }
    let flat: Vec<Tensor> = params
        .iter()
        .map(|p| {
            let grad = p.grad();
            let grad = if grad.defined() { grad } else { p.zeros_like() };
            grad.detach().reshape([-1])
        })
        .collect();
    let summed = data.all_reduce(&Tensor::cat(&flat, 0), ReduceOp::Sum)?;
    let mut offset = 0;
    for param in params {
        let count = param.numel() as i64;
        let part = summed.narrow(0, offset, count).view_as(param);
        offset += count;
        let mut grad = param.grad();
        if grad.defined() {
            tch::no_grad(|| grad.copy_(&part));
        } else {
            // No gradient to overwrite yet: one backward gives exactly `part`.
            (param * part).sum(Kind::Float).backward();
        }
    }
    Ok(())
}

/// The first stage's vocabulary-parallel embedding and, for `Positions::Learned`, the
/// replicated position table.
struct TpStageEmbedding<'c> {
    tokens: VocabParallelEmbedding<'c>,
    positions: Option<Tensor>,
}

impl<'c> StageEmbedding<'c> for TpStageEmbedding<'c> {
    fn forward(
        &self,
        _: &Tape<'c>,
        ids: &Tensor,
        positions: &Tensor,
    ) -> Result<Tensor, CollectiveError> {
        Ok(add_positions(
            self.tokens.forward(ids)?,
            self.positions.as_ref(),
            positions,
        ))
    }
}

impl<'c> StageLayer<'c> for TpDecoderLayer<'c> {
    fn forward(
        &self,
        tape: &Tape<'c>,
        x: &Tensor,
        angles: &RopeAngles,
        bias: &Tensor,
        cache: Option<&mut LayerCache>,
    ) -> Result<Tensor, CollectiveError> {
        TpDecoderLayer::forward(self, tape, x, angles, bias, cache)
    }
}

/// The last stage's final norm (replicated) and vocabulary-parallel LM head. Its logits are
/// gathered over `tp`: the pipeline's loss sees full logits, and going backward each rank keeps
/// its own vocabulary slice's gradient.
struct TpStageHead<'c> {
    norm: RmsNorm,
    head: VocabParallelHead<'c>,
}

impl<'c> StageHead<'c> for TpStageHead<'c> {
    fn logits(&self, tape: &Tape<'c>, hidden: &Tensor) -> Result<Tensor, CollectiveError> {
        self.head.logits(tape, &self.norm.forward(hidden))
    }
}

/// One rank of a pipeline whose stages are split over a TP group: the stage is `pp`'s rank, the
/// shard `tp`'s. Train it with [`PipelineModel::forward_backward`] on [`TpPipeline::model`], then
/// [`TpPipeline::clip_grad_norm`]; generate with [`TpPipeline::model`] (it implements `Decode`).
/// Every rank of the stage's TP group and of its `pp` group calls the same methods in the same
/// order.
pub struct TpPipeline<'c> {
    model: PipelineModel<'c>,
    params: Vec<ShardedParam>,
    tp: &'c Communicator,
    pp: &'c Communicator,
}

impl<'c> TpPipeline<'c> {
    /// This rank's shards of its stage's weights, from the full `weights` (Hugging Face names).
    /// With tied embeddings the last stage holds its own copy of its embedding shard.
    pub fn new(
        weights: &BTreeMap<String, Tensor>,
        config: &ModelConfig,
        tp: &'c Communicator,
        pp: &'c Communicator,
    ) -> Result<Self, CombinedError> {
        config.validate().map_err(TpError::from)?;
        check_divisible(config, tp.world_size())?;
        let stage = Stage::new(config.layers, pp.world_size(), pp.rank())?;
        let device = weights.values().next().map_or(Device::Cpu, Tensor::device);
        let vs = nn::VarStore::new(device);
        let (parts, params) = {
            let root = vs.root();
            let mut loader = ShardLoader::new(&root, weights, tp);
            let parts = tp_parts(&mut loader, config, &stage, tp)?;
            (parts, loader.into_params())
        };
        let model = PipelineModel::from_parts(config, pp, vs, parts)?;
        Ok(Self {
            model,
            params,
            tp,
            pp,
        })
    }

    pub fn model(&self) -> &PipelineModel<'c> {
        &self.model
    }

    /// This rank's parameters with their names and splits, in load order.
    pub fn params(&self) -> &[ShardedParam] {
        &self.params
    }

    /// The trainable tensors (for [`sum_gradients`]).
    pub fn tensors(&self) -> Vec<Tensor> {
        self.params
            .iter()
            .map(|p| p.tensor.shallow_clone())
            .collect()
    }

    /// Scales the gradients so that the whole model's gradient norm is at most `max_norm`;
    /// returns the norm before clipping, the same on every rank. Each stage's norm is TP-aware
    /// (shards summed over `tp`, replicated parameters once), then the stages' squares are summed
    /// over `pp`, the tied embedding's second copy left out.
    pub fn clip_grad_norm(&self, max_norm: f64) -> Result<f64, CollectiveError> {
        let counted: Vec<ShardedParam> = self
            .params
            .iter()
            .filter(|p| !self.model.is_second_embedding_copy(&p.name))
            .map(|p| ShardedParam {
                name: p.name.clone(),
                tensor: p.tensor.shallow_clone(),
                split: p.split,
            })
            .collect();
        let stage_norm = tp_grad_norm(&counted, self.tp)?;
        let norm = self
            .pp
            .all_reduce(&Tensor::from(stage_norm.powi(2)), ReduceOp::Sum)?
            .double_value(&[])
            .sqrt();
        clip_to(&self.tensors(), norm, max_norm);
        Ok(norm)
    }

    /// The whole model's weights under their Hugging Face names, on every rank: shards gathered
    /// over `tp`, then stages over `pp`.
    pub fn full_weights(&self) -> Result<BTreeMap<String, Tensor>, CombinedError> {
        let stage = gather_full_weights(&self.params, self.tp)?;
        Ok(gather_stages(&stage, self.model.stage().index, self.pp)?)
    }
}

/// The TP pieces of `stage`, loaded through `loader` under their Hugging Face names.
fn tp_parts<'c>(
    loader: &mut ShardLoader,
    config: &ModelConfig,
    stage: &Stage,
    tp: &'c Communicator,
) -> Result<StageParts<'c>, TpError> {
    let embedding = match stage.is_first() {
        true => Some(VocabParallelEmbedding::load(loader, config, tp)?),
        false => None,
    };
    let position_table = match stage.is_first() && config.positions == Positions::Learned {
        true => Some(loader.load(
            "model.embed_positions.weight",
            &[config.max_len, config.hidden],
        )?),
        false => None,
    };
    let layers = stage
        .layers
        .clone()
        .map(|i| {
            TpDecoderLayer::load(loader, i, config, tp)
                .map(|layer| Box::new(layer) as Box<dyn StageLayer<'c> + 'c>)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let head = match stage.is_last() {
        false => None,
        true => {
            let norm = loader.load_norm("model.norm", config.hidden, config.norm_eps)?;
            let head = match (&embedding, config.tie_embeddings) {
                (Some(embedding), true) => VocabParallelHead::tied(embedding),
                // The last stage's own copy of its embedding shard; the pipeline sums the two
                // copies' gradients (same TP rank, same shard) so they stay identical.
                (None, true) => {
                    VocabParallelHead::tied(&VocabParallelEmbedding::load(loader, config, tp)?)
                }
                (_, false) => VocabParallelHead::load(loader, config, tp)?,
            };
            Some(Box::new(TpStageHead { norm, head }) as Box<dyn StageHead<'c> + 'c>)
        }
    };
    Ok(StageParts {
        embedding: embedding.map(|tokens| {
            Box::new(TpStageEmbedding {
                tokens,
                positions: position_table,
            }) as Box<dyn StageEmbedding<'c> + 'c>
        }),
        layers,
        head,
    })
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;
    use crate::collectives::Group;

    /// A rank whose parameter got no gradient (e.g. it was not used by its rows) still joins the
    /// sum and ends with it.
    #[test]
    fn sum_gradients_adds_over_ranks_and_fills_missing_gradients() {
        let grads: Vec<(Vec<f32>, Vec<f32>)> = thread::scope(|scope| {
            let handles: Vec<_> = Group::new(2)
                .into_iter()
                .map(|comm| {
                    scope.spawn(move || {
                        let a = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
                        let b = Tensor::from_slice(&[3.0f32, 4.0, 5.0])
                            .view([3, 1])
                            .set_requires_grad(true);
                        let r = comm.rank() as f64 + 1.0;
                        let loss = (&a * r).sum(Kind::Float);
                        let loss = match comm.rank() {
                            0 => loss + (&b * 10.0).sum(Kind::Float),
                            _ => loss,
                        };
                        loss.backward();
                        sum_gradients(&[a.shallow_clone(), b.shallow_clone()], &comm).unwrap();
                        let flat =
                            |t: &Tensor| Vec::<f32>::try_from(t.grad().reshape([-1])).unwrap();
                        (flat(&a), flat(&b))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (a, b) in grads {
            assert_eq!(a, [3.0, 3.0]);
            assert_eq!(b, [10.0, 10.0, 10.0]);
        }
    }
}

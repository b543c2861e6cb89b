//! Megatron-style tensor parallelism: one model split over the ranks of a TP group.
//!
//! Attention is split by heads (each rank holds a contiguous run of query heads and the key/value
//! heads they read), the MLP by its inner width, the embedding and the LM head by vocabulary rows;
//! norms and the value/score heads are replicated. Column-parallel layers (q/k/v, gate/up) take a
//! replicated input through Megatron's `f` ([`Tape::copy_to_group`]); row-parallel layers (o,
//! down) end with `g` ([`sum_over_group`]), so the residual stream stays replicated and every
//! rank computes the same loss. Log-probabilities are computed vocabulary-parallel, without ever
//! materialising full logits; full logits are gathered only where asked for (generation, tests).
//!
//! The pieces — [`VocabParallelEmbedding`], [`TpDecoderLayer`], [`VocabParallelHead`] — are each
//! loadable and callable on their own from a [`ShardLoader`], so a pipeline stage can build the
//! range of layers it runs; [`TpTransformer`] is the whole model built from them.
//!
//! [`Tape::copy_to_group`]: crate::parallel::Tape::copy_to_group
//! [`sum_over_group`]: crate::parallel::tape::sum_over_group

mod clip;
mod layers;
mod model;
mod shard;
mod vocab;

pub use clip::{tp_clip_grad_norm, tp_grad_norm, tp_norm_of};
pub use layers::{ColumnParallelLinear, RowParallelLinear, TpAttention, TpDecoderLayer, TpMlp};
pub use model::TpTransformer;
pub use shard::{ShardLoader, ShardedParam, Split, check_divisible, gather_full_weights, split_of};
pub use vocab::{VocabParallelEmbedding, VocabParallelHead, vocab_parallel_logprobs};

use crate::collectives::CollectiveError;
use crate::model::ConfigError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TpError {
    #[error(
        "tensor parallelism over {tp} ranks: the model's {what} ({count}) are not a multiple of {tp}"
    )]
    NotDivisible {
        what: &'static str,
        count: i64,
        tp: usize,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("weight `{0}` is missing")]
    MissingWeight(String),
    #[error("weight `{name}` has shape {found:?}, the model config needs {expected:?}")]
    WeightShape {
        name: String,
        expected: Vec<i64>,
        found: Vec<i64>,
    },
    #[error("weight `{name}` has no dimension {dim} that splits evenly over {tp} ranks")]
    UnevenShard { name: String, dim: i64, tp: usize },
    #[error("`{0}` is already a variable of the var store (build the model into an empty one)")]
    AlreadyRegistered(String),
    #[error("the model has no {0} head")]
    NoHead(&'static str),
    #[error("ids {ids:?} need a mask [B, {cached} cached + T new positions], got {mask:?}")]
    InputShape {
        ids: Vec<i64>,
        mask: Vec<i64>,
        cached: i64,
    },
    #[error("a KV cache of {found} layers for a model of {expected}")]
    CacheLayers { expected: usize, found: usize },
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfRange { id: i64, vocab: i64 },
    #[error("tensor-parallel collective: {0}")]
    Collective(#[from] CollectiveError),
}

#[cfg(test)]
mod tests;

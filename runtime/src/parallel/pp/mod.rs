//! Pipeline parallelism: the decoder layers split into consecutive stages, one per rank of the
//! `pp` group, activations sent forward and their gradients backward point to point.
//!
//! Stage `s` of `p` runs layers `[s·L/p, (s+1)·L/p)` (the plan's split); the first stage also
//! embeds the tokens, the last one applies the final norm and the LM head and computes the loss.
//! Training runs micro-batches in the 1F1B order ([`one_f_one_b`]): after a warm-up of forwards,
//! each stage alternates one forward with one backward, so at most `p − s` micro-batches hold
//! activations at stage `s`. Each micro-batch's backward on a stage runs on its own [`Tape`], so
//! a stage may be made of tensor-parallel layers that cut the graph themselves (`parts`).
//!
//! Models with an LM head only (no value or score head under PP yet). Gradient clipping sums over
//! the `pp` group alone; a stage of TP layers adds its group's sum ([`TpPipeline`]).
//!
//! With tied embeddings the first and the last stage both hold `model.embed_tokens.weight`; they
//! add their gradients in the same order, so both copies get the same update and stay identical.
//!
//! [`Tape`]: crate::parallel::Tape
//! [`TpPipeline`]: crate::parallel::combined::TpPipeline

mod decode;
mod model;
pub(crate) mod parts;
mod schedule;
mod stage;
mod train;

pub use model::PipelineModel;
pub(crate) use model::gather_stages;
pub use schedule::{Op, one_f_one_b};
pub use stage::Stage;
pub use train::MicroBatch;

use crate::collectives::CollectiveError;
use crate::model::ConfigError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PipelineError {
    #[error("{stages} pipeline stages cannot split {layers} layers: every stage needs one")]
    TooManyStages { stages: usize, layers: i64 },
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
    #[error("stage {stage} of {stages} was built with the wrong parts: {problem}")]
    StageParts {
        stage: usize,
        stages: usize,
        problem: String,
    },
    #[error("ids {ids:?} need a mask [B, {cached} cached + T new positions], got {mask:?}")]
    InputShape {
        ids: Vec<i64>,
        mask: Vec<i64>,
        cached: i64,
    },
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfRange { id: i64, vocab: i64 },
    #[error("a KV cache of {found} layers for a stage of {expected}")]
    CacheLayers { expected: usize, found: usize },
    #[error("{micro} micro-batches cannot split a batch of {rows} rows")]
    MicroBatches { micro: usize, rows: i64 },
    #[error("the loss of a micro-batch must be a scalar, got shape {0:?}")]
    LossShape(Vec<i64>),
    #[error("libtorch: {0}")]
    Torch(String),
    #[error("between pipeline stages: {0}")]
    Collective(#[from] CollectiveError),
}

impl From<tch::TchError> for PipelineError {
    fn from(e: tch::TchError) -> Self {
        Self::Torch(e.to_string())
    }
}

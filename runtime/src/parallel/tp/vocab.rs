//! The vocabulary split over a TP group: the embedding and the LM head hold contiguous rows of
//! the vocabulary, and log-probabilities are computed from the local logits alone plus three
//! reductions of `[B, T]` tensors (Megatron's parallel cross-entropy).

use tch::{Kind, Tensor};

use super::TpError;
use super::shard::ShardLoader;
use crate::collectives::{CollectiveError, Communicator};
use crate::model::ModelConfig;
use crate::parallel::tape::{Tape, gather_over_group, max_over_group, sum_over_group};

/// The first vocabulary row of this rank and how many it holds.
fn vocab_rows(config: &ModelConfig, tp: &Communicator) -> (i64, i64) {
    let rows = config.vocab / tp.world_size() as i64;
    (tp.rank() as i64 * rows, rows)
}

/// Where `ids` fall in this rank's rows: local indices (0 where not owned) and the mask of owned
/// ids.
fn local_ids(ids: &Tensor, start: i64, rows: i64) -> (Tensor, Tensor) {
    let local = ids - start;
    let owned = local.ge(0).logical_and(&local.lt(rows));
    (local.where_scalarother(&owned, 0), owned)
}

/// Token embedding over this rank's vocabulary rows: each rank embeds the ids it owns (zeros
/// elsewhere) and the sum over the group (`g`) is the full embedding.
#[derive(Debug)]
pub struct VocabParallelEmbedding<'c> {
    weight: Tensor,
    start: i64,
    rows: i64,
    tp: &'c Communicator,
}

impl<'c> VocabParallelEmbedding<'c> {
    /// `model.embed_tokens.weight`, this rank's rows.
    pub fn load(
        loader: &mut ShardLoader,
        config: &ModelConfig,
        tp: &'c Communicator,
    ) -> Result<Self, TpError> {
        let weight = loader.load("model.embed_tokens.weight", &[config.vocab, config.hidden])?;
        let (start, rows) = vocab_rows(config, tp);
        Ok(Self {
            weight,
            start,
            rows,
            tp,
        })
    }

    /// This rank's rows of the embedding matrix `[vocab / tp, hidden]`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// Embeddings `[B, T, hidden]` of `ids` (`[B, T]`), replicated on every rank.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor, CollectiveError> {
        let (local, owned) = local_ids(ids, self.start, self.rows);
        let embedded = Tensor::embedding(&self.weight, &local, -1, false, false)
            * owned.unsqueeze(-1).to_kind(self.weight.kind());
        sum_over_group(&embedded, self.tp)
    }
}

/// The LM head over this rank's vocabulary rows (its own `lm_head.weight` rows, or the
/// embedding's when tied).
#[derive(Debug)]
pub struct VocabParallelHead<'c> {
    weight: Tensor,
    start: i64,
    tp: &'c Communicator,
}

impl<'c> VocabParallelHead<'c> {
    /// `lm_head.weight`, this rank's rows.
    pub fn load(
        loader: &mut ShardLoader,
        config: &ModelConfig,
        tp: &'c Communicator,
    ) -> Result<Self, TpError> {
        let weight = loader.load("lm_head.weight", &[config.vocab, config.hidden])?;
        let (start, _) = vocab_rows(config, tp);
        Ok(Self { weight, start, tp })
    }

    /// The head tied to `embedding` (one variable, two uses; gradients of both accumulate).
    pub fn tied(embedding: &VocabParallelEmbedding<'c>) -> Self {
        Self {
            weight: embedding.weight.shallow_clone(),
            start: embedding.start,
            tp: embedding.tp,
        }
    }

    /// This rank's logits `[B, T, vocab / tp]` from the replicated hidden states.
    pub fn local_logits(&self, tape: &Tape<'c>, hidden: &Tensor) -> Tensor {
        tape.copy_to_group(hidden, self.tp)
            .linear(&self.weight, None::<&Tensor>)
    }

    /// Full logits `[B, T, vocab]`, gathered on every rank.
    pub fn logits(&self, tape: &Tape<'c>, hidden: &Tensor) -> Result<Tensor, CollectiveError> {
        gather_over_group(&self.local_logits(tape, hidden), -1, self.tp)
    }

    /// Log-probabilities `[B, T-1]` of each realised next token `ids[:, t+1]` given the hidden
    /// states `[B, T, hidden]`, as [`crate::model::token_logprobs`] on full logits computes them.
    pub fn token_logprobs(
        &self,
        tape: &Tape<'c>,
        hidden: &Tensor,
        ids: &Tensor,
    ) -> Result<Tensor, CollectiveError> {
        let steps = ids.size()[1];
        let local = self.local_logits(tape, &hidden.narrow(1, 0, steps - 1));
        vocab_parallel_logprobs(&local, &ids.narrow(1, 1, steps - 1), self.start, self.tp)
    }
}

/// `log_softmax(logits)[target]` from each rank's slice `local_logits` (`[…, V / tp]`, rows
/// `start..` of the vocabulary) and the full-vocabulary `targets` (`[…]`), in float32. The
/// group's maximum stabilises the exponentials (it cancels, so it carries no gradient); the sum
/// of exponentials and the target's logit (taken on the rank that owns it) are summed over the
/// group. Each rank's gradient reaches only its own slice.
pub fn vocab_parallel_logprobs(
    local_logits: &Tensor,
    targets: &Tensor,
    start: i64,
    tp: &Communicator,
) -> Result<Tensor, CollectiveError> {
    let logits = local_logits.to_kind(Kind::Float);
    let max = max_over_group(&logits.amax(-1, true), tp)?;
    let shifted = logits - max;
    let sum_exp = sum_over_group(&shifted.exp().sum_dim_intlist(-1, false, Kind::Float), tp)?;
    let rows = shifted.size().last().copied().unwrap_or(0);
    let (local, owned) = local_ids(targets, start, rows);
    let picked = shifted
        .gather(-1, &local.unsqueeze(-1), false)
        .squeeze_dim(-1)
        * owned.to_kind(Kind::Float);
    Ok(sum_over_group(&picked, tp)? - sum_exp.log())
}

//! Global gradient-norm clipping over a TP group: the norm of the whole model's gradient, which
//! no rank holds alone.

use tch::Tensor;

use super::shard::{ShardedParam, Split};
use crate::collectives::{CollectiveError, Communicator, ReduceOp};
use crate::optim::{clip_to, sum_of_squares};

/// Euclidean norm of the full model's gradient, the same on every rank: shards' squared norms
/// summed over `tp`, replicated parameters (whose gradients every rank holds identically) once.
pub fn tp_grad_norm(params: &[ShardedParam], tp: &Communicator) -> Result<f64, CollectiveError> {
    tp_norm_of(params.iter().map(|p| (p.tensor.grad(), p.split)), tp)
}

/// [`tp_grad_norm`] of gradients given with their parameters' splits (e.g. spans of one flat
/// gradient).
pub fn tp_norm_of(
    grads: impl IntoIterator<Item = (Tensor, Split)>,
    tp: &Communicator,
) -> Result<f64, CollectiveError> {
    let (sharded, replicated): (Vec<_>, Vec<_>) = grads
        .into_iter()
        .partition(|(_, split)| *split != Split::Replicated);
    let squared = |grads: Vec<(Tensor, Split)>| sum_of_squares(grads.into_iter().map(|(g, _)| g));
    let (sharded, replicated) = (squared(sharded), squared(replicated));
    let sharded = tp
        .all_reduce(&Tensor::from(sharded), ReduceOp::Sum)?
        .double_value(&[]);
    Ok((sharded + replicated).sqrt())
}

/// Scales every gradient so that the global norm is at most `max_norm`, as
/// [`crate::optim::clip_grad_norm`] does on one rank, and returns the norm before clipping.
pub fn tp_clip_grad_norm(
    params: &[ShardedParam],
    max_norm: f64,
    tp: &Communicator,
) -> Result<f64, CollectiveError> {
    let norm = tp_grad_norm(params, tp)?;
    let tensors: Vec<Tensor> = params.iter().map(|p| p.tensor.shallow_clone()).collect();
    clip_to(&tensors, norm, max_norm);
    Ok(norm)
}

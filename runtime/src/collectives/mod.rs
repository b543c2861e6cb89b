//! Collectives between ranks that are threads of one process, on CPU tensors.
//!
//! Every collective is one rendezvous: each rank deposits a copy of its input, the last to arrive
//! publishes all deposits, and each rank computes its own result from them. Reductions always
//! fold in rank order, so results are bit-identical from run to run and across ranks.
//!
//! Point-to-point messages (`send`, `recv`) go through per-pair FIFO mailboxes instead: a send
//! is buffered and never waits for its receiver.

mod group;

pub use group::{Communicator, Group};

use tch::Tensor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    /// Sum divided by the world size.
    Mean,
    Max,
    Min,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectiveError {
    #[error("a rank of the group exited (or panicked) before joining the collective")]
    PeerLost,
    #[error("rank {rank} contributed shape {found:?}, rank 0 contributed {expected:?}")]
    ShapeMismatch {
        rank: usize,
        expected: Vec<i64>,
        found: Vec<i64>,
    },
    #[error("rank {rank} cannot exchange messages with rank {peer} of a group of {world_size}")]
    InvalidPeer {
        peer: usize,
        rank: usize,
        world_size: usize,
    },
    #[error("root rank {root} is outside a group of {world_size}")]
    InvalidRoot { root: usize, world_size: usize },
    #[error(
        "the root rank {root} must provide {expected} tensor(s) for this collective, it gave {found}"
    )]
    MissingRootInput {
        root: usize,
        expected: usize,
        found: usize,
    },
    #[error(
        "reduce_scatter needs a first dimension divisible by the world size {world_size}, got {size}"
    )]
    NotDivisible { size: i64, world_size: usize },
}

/// Folds `inputs` in order with `op`; the single definition both the collectives and their tests use.
pub fn reduce_in_order(inputs: &[Tensor], op: ReduceOp) -> Tensor {
    let mut acc = inputs[0].copy();
    for next in &inputs[1..] {
        acc = match op {
            ReduceOp::Sum | ReduceOp::Mean => acc + next,
            ReduceOp::Max => acc.maximum(next),
            ReduceOp::Min => acc.minimum(next),
        };
    }
    if op == ReduceOp::Mean {
        acc /= inputs.len() as f64;
    }
    acc
}

#[cfg(test)]
mod tests;

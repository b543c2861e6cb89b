//! Reverse mode across collectives, without custom autograd functions (tch has none).
//!
//! Megatron's tensor parallelism needs an operator that is the identity going forward and sums
//! the gradient over the group going backward (`f`, before a column-parallel layer). libtorch's
//! autograd cannot call a collective in the middle of a backward pass from Rust, so the forward
//! pass *cuts* the graph there: the consumer gets a fresh leaf, and the tape remembers
//! `(source, leaf, group)`. [`Tape::backward`] runs the graph segment by segment in reverse order
//! of the cuts: each leaf's gradient, summed over its group where the cut asks for it, is pushed
//! into its source's segment. Since cuts are recorded in forward order, a leaf's gradient is
//! complete when its turn comes. Plain cuts (no group) only bound segments, so that each
//! operation's backward runs once even where the residual stream joins a later cut.
//!
//! The opposite operator (`g`: sum over the group forward, identity backward) and the all-gather
//! need no cut: their forward value is built from detached results plus `x - x.detach()`, which
//! is exactly zero but carries the identity gradient to `x`.

use std::cell::RefCell;

use tch::{Kind, Tensor};

use crate::collectives::{CollectiveError, Communicator, ReduceOp};

struct Cut<'c> {
    source: Tensor,
    leaf: Tensor,
    /// Sum the leaf's gradient over this group before it enters the source's segment.
    reduce: Option<&'c Communicator>,
}

/// The cuts of one forward pass, consumed by its backward pass.
#[derive(Default)]
pub struct Tape<'c> {
    cuts: RefCell<Vec<Cut<'c>>>,
}

impl<'c> Tape<'c> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of cuts recorded since the last backward pass or [`Tape::clear`].
    pub fn len(&self) -> usize {
        self.cuts.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the recorded cuts (a forward pass that will not be differentiated).
    pub fn clear(&self) {
        self.cuts.borrow_mut().clear();
    }

    /// `x` unchanged; its backward segment ends here (keeps each segment's backward to one run).
    pub fn cut(&self, x: &Tensor) -> Tensor {
        self.record(x, None)
    }

    /// Megatron's `f`: `x` unchanged going forward; going backward the gradient is summed over
    /// `group`. Put it where a replicated activation enters a column-parallel layer.
    pub fn copy_to_group(&self, x: &Tensor, group: &'c Communicator) -> Tensor {
        self.record(x, Some(group))
    }

    fn record(&self, x: &Tensor, reduce: Option<&'c Communicator>) -> Tensor {
        if !x.requires_grad() {
            return x.shallow_clone();
        }
        let leaf = x.detach().set_requires_grad(true);
        self.cuts.borrow_mut().push(Cut {
            source: x.shallow_clone(),
            leaf: leaf.shallow_clone(),
            reduce,
        });
        leaf
    }

    /// Backpropagates from `seeds` — scalars (`None`: gradient 1) or tensors with the gradient
    /// they receive — then through every recorded cut, newest first. Parameter gradients
    /// accumulate as with `Tensor::backward`. Every rank of a cut's group must call this with the
    /// same sequence of cuts.
    pub fn backward(&self, seeds: &[(&Tensor, Option<&Tensor>)]) -> Result<(), CollectiveError> {
        let cuts = std::mem::take(&mut *self.cuts.borrow_mut());
        backward_from(
            seeds
                .iter()
                .map(|(t, g)| (t.shallow_clone(), g.map(Tensor::shallow_clone))),
        );
        for cut in cuts.into_iter().rev() {
            let grad = cut.leaf.grad();
            let grad = match cut.reduce {
                Some(group) => {
                    // Every rank joins the sum, also one whose leaf got no gradient.
                    let local = if grad.defined() {
                        grad
                    } else {
                        cut.leaf.zeros_like()
                    };
                    group.all_reduce(&local, ReduceOp::Sum)?
                }
                None if grad.defined() => grad,
                None => continue,
            };
            backward_from([(cut.source, Some(grad))]);
        }
        Ok(())
    }
}

/// One backward pass from all seeds together.
fn backward_from(seeds: impl IntoIterator<Item = (Tensor, Option<Tensor>)>) {
    let total = seeds
        .into_iter()
        .filter(|(t, _)| t.requires_grad())
        .map(|(t, g)| match g {
            Some(g) => (t * g.detach()).sum(Kind::Float),
            None => t.sum(Kind::Float),
        })
        .reduce(|a, b| a + b);
    if let Some(total) = total {
        total.backward();
    }
}

/// `value` going forward, the identity gradient to `x` going backward: `x - x.detach()` is
/// exactly zero, so the forward value is bit-identical to `value`.
fn with_gradient_of(value: Tensor, x: &Tensor) -> Tensor {
    if x.requires_grad() {
        value + (x - x.detach())
    } else {
        value
    }
}

/// Megatron's `g`: the sum of `x` over `group` going forward, the identity going backward. Put it
/// where a row-parallel layer's partial results come together.
pub fn sum_over_group(x: &Tensor, group: &Communicator) -> Result<Tensor, CollectiveError> {
    let sum = group.all_reduce(&x.detach(), ReduceOp::Sum)?;
    Ok(with_gradient_of(sum, x))
}

/// Every rank's `x` concatenated along `dim` in rank order; going backward each rank keeps the
/// gradient of its own part.
pub fn gather_over_group(
    x: &Tensor,
    dim: i64,
    group: &Communicator,
) -> Result<Tensor, CollectiveError> {
    let mut parts = group.all_gather(&x.detach())?;
    if x.requires_grad() {
        let own = group.rank();
        parts[own] = with_gradient_of(parts[own].shallow_clone(), x);
    }
    Ok(Tensor::cat(&parts, dim))
}

/// The maximum of `x` over `group`, without gradient (a stabiliser, e.g. for a sharded softmax).
pub fn max_over_group(x: &Tensor, group: &Communicator) -> Result<Tensor, CollectiveError> {
    group.all_reduce(&x.detach(), ReduceOp::Max)
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;
    use crate::collectives::Group;
    use crate::rng::Rng;

    const HIDDEN: i64 = 6;
    const INNER: i64 = 8;

    struct Weights {
        norm: Tensor,
        up: Tensor,
        down: Tensor,
    }

    fn weights() -> Weights {
        let rng = |seed: u64, shape: &[i64]| Rng::new(seed).normal_tensor(shape, 1.0);
        Weights {
            norm: rng(1, &[HIDDEN]) + 1.0,
            up: rng(2, &[INNER, HIDDEN]) * 0.5,
            down: rng(3, &[HIDDEN, INNER]) * 0.5,
        }
    }

    fn input() -> Tensor {
        Rng::new(4).normal_tensor(&[3, HIDDEN], 1.0)
    }

    fn norm(x: &Tensor, weight: &Tensor) -> Tensor {
        x * (x.pow_tensor_scalar(2).mean_dim(-1, true, Kind::Float) + 1e-6).rsqrt() * weight
    }

    /// Two residual MLP blocks (shared weights): the second block's cut must see the gradient
    /// that came back through the first block's sum, which is where naive per-rank autograd fails.
    fn blocks<'c>(
        x: &Tensor,
        w: &Weights,
        up: &Tensor,
        down: &Tensor,
        tape: &Tape<'c>,
        comm: Option<&'c Communicator>,
    ) -> Tensor {
        let mut x = x.shallow_clone();
        for _ in 0..2 {
            let h = norm(&x, &w.norm);
            let h = match comm {
                Some(comm) => tape.copy_to_group(&h, comm),
                None => h,
            };
            let partial = h
                .linear(up, None::<&Tensor>)
                .tanh()
                .linear(down, None::<&Tensor>);
            let out = match comm {
                Some(comm) => sum_over_group(&partial, comm).unwrap(),
                None => partial,
            };
            x = tape.cut(&(x + out));
        }
        x.pow_tensor_scalar(2).sum(Kind::Float)
    }

    fn leaves(w: &Weights, up: Tensor, down: Tensor) -> [Tensor; 4] {
        [
            input().set_requires_grad(true),
            w.norm.copy().set_requires_grad(true),
            up.set_requires_grad(true),
            down.set_requires_grad(true),
        ]
    }

    #[test]
    fn column_then_row_parallel_blocks_match_one_rank_in_value_and_gradient() {
        let w = weights();
        let [x, n, up, down] = leaves(&w, w.up.copy(), w.down.copy());
        let single = Weights {
            norm: n.shallow_clone(),
            up: up.shallow_clone(),
            down: down.shallow_clone(),
        };
        let tape = Tape::new();
        let loss = blocks(&x, &single, &up, &down, &tape, None);
        tape.backward(&[(&loss, None)]).unwrap();
        let expected = [x.grad(), n.grad(), up.grad(), down.grad()];

        let results: Vec<(f64, [Tensor; 4])> = thread::scope(|scope| {
            let handles: Vec<_> = Group::new(2)
                .into_iter()
                .map(|comm| {
                    scope.spawn(move || {
                        let w = weights();
                        let r = comm.rank() as i64;
                        let up = w.up.narrow(0, r * INNER / 2, INNER / 2).copy();
                        let down = w.down.narrow(1, r * INNER / 2, INNER / 2).copy();
                        let [x, n, up, down] = leaves(&w, up, down);
                        let sharded = Weights {
                            norm: n.shallow_clone(),
                            up: up.shallow_clone(),
                            down: down.shallow_clone(),
                        };
                        let tape = Tape::new();
                        let loss = blocks(&x, &sharded, &up, &down, &tape, Some(&comm));
                        assert!(tape.len() >= 4, "two copies and two cuts recorded");
                        tape.backward(&[(&loss, None)]).unwrap();
                        assert!(tape.is_empty());
                        (
                            loss.double_value(&[]),
                            [x.grad(), n.grad(), up.grad(), down.grad()],
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let expected_loss = loss.double_value(&[]);
        for (rank, (loss, grads)) in results.iter().enumerate() {
            assert!(
                (loss - expected_loss).abs() < 1e-4 * expected_loss.abs(),
                "rank {rank}: loss {loss} vs {expected_loss}"
            );
            let r = rank as i64;
            let close = |a: &Tensor, b: &Tensor, what: &str| {
                let diff = (a - b).abs().max().double_value(&[]);
                assert!(diff < 1e-4, "rank {rank}: {what} differs by {diff}");
            };
            close(&grads[0], &expected[0], "input gradient");
            close(&grads[1], &expected[1], "replicated norm gradient");
            close(
                &grads[2],
                &expected[2].narrow(0, r * INNER / 2, INNER / 2),
                "column shard gradient",
            );
            close(
                &grads[3],
                &expected[3].narrow(1, r * INNER / 2, INNER / 2),
                "row shard gradient",
            );
        }
    }

    #[test]
    fn gather_keeps_each_ranks_gradient_and_inference_records_nothing() {
        let results: Vec<(Vec<f32>, Vec<f32>, usize)> = thread::scope(|scope| {
            let handles: Vec<_> = Group::new(2)
                .into_iter()
                .map(|comm| {
                    scope.spawn(move || {
                        let r = comm.rank() as f32;
                        let x = Tensor::from_slice(&[r, r + 10.0]).set_requires_grad(true);
                        let full = gather_over_group(&x, 0, &comm).unwrap();
                        let weights = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]);
                        (full * &weights).sum(Kind::Float).backward();
                        let tape = Tape::new();
                        let inference = tch::no_grad(|| tape.copy_to_group(&(&x * 1.0), &comm));
                        let values = Vec::<f32>::try_from(inference.detach()).unwrap();
                        (Vec::<f32>::try_from(x.grad()).unwrap(), values, tape.len())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results[0].0, [1.0, 2.0]);
        assert_eq!(results[1].0, [3.0, 4.0]);
        assert_eq!(results[1].1, [1.0, 11.0]);
        assert!(
            results.iter().all(|r| r.2 == 0),
            "no cut without a gradient to carry"
        );
    }
}

//! Training through the pipeline: the 1F1B executor, the tied embedding's gradient and
//! gradient clipping over all stages.

use std::ops::Range;

use tch::{Kind, Tensor};

use super::model::EMBEDDING;
use super::{Op, PipelineError, PipelineModel, one_f_one_b};
use crate::collectives::ReduceOp;
use crate::optim::{clip_to, sum_of_squares};
use crate::parallel::Tape;

/// The rows of one micro-batch, as the loss sees them.
pub struct MicroBatch {
    pub index: usize,
    /// Its rows in the whole batch (to slice per-row data such as advantages).
    pub rows: Range<i64>,
    pub ids: Tensor,
    pub mask: Tensor,
}

/// A micro-batch whose forward pass has run on this stage and whose backward has not.
struct Pending<'c> {
    tape: Tape<'c>,
    /// The stage's input leaf (not on the first stage): its gradient goes back a stage.
    input: Option<Tensor>,
    /// The loss on the last stage, the stage's output elsewhere.
    output: Tensor,
}

impl<'c> PipelineModel<'c> {
    /// Forward and backward passes of `micro` micro-batches of (`ids`, `mask`) in the 1F1B
    /// order; gradients accumulate into the stage's parameters (zero them before). `loss` maps
    /// a micro-batch's logits `[b, T, vocab]` to a scalar, and the micro-batches' losses add up,
    /// so a loss normalised by the whole batch's count gives the whole batch's gradient.
    ///
    /// Every stage passes the same batch (the first embeds it, all read its mask, the last
    /// computes the loss) and gets the summed loss back. With tied embeddings, the first and the
    /// last stage end with the sum of their two gradients.
    pub fn forward_backward(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        micro: usize,
        loss: impl Fn(&Tensor, &MicroBatch) -> Tensor,
    ) -> Result<f64, PipelineError> {
        self.check_input(ids, mask, 0)?;
        let rows = ids.size()[0];
        if micro == 0 || micro as i64 > rows {
            return Err(PipelineError::MicroBatches { micro, rows });
        }
        let batches: Vec<MicroBatch> = (0..micro)
            .map(|index| {
                let bound = |i: usize| i as i64 * rows / micro as i64;
                let (start, end) = (bound(index), bound(index + 1));
                MicroBatch {
                    index,
                    rows: start..end,
                    ids: ids.narrow(0, start, end - start),
                    mask: mask.narrow(0, start, end - start),
                }
            })
            .collect();
        let stage = self.stage();
        let mut pending: Vec<Option<Pending<'c>>> = (0..micro).map(|_| None).collect();
        let mut total = 0.0;
        for op in one_f_one_b(stage.count, stage.index, micro) {
            match op {
                Op::Forward(i) => pending[i] = Some(self.forward(&batches[i], &loss)?),
                Op::Backward(i) => {
                    let forwarded = pending[i].take().expect("1F1B runs a forward first");
                    total += self.backward(forwarded)?;
                }
            }
        }
        self.sum_tied_gradients()?;
        let last = stage.count - 1;
        let total = Tensor::from(total);
        let total = self
            .pp()
            .broadcast(stage.is_last().then_some(&total), last)?;
        Ok(total.double_value(&[]))
    }

    fn forward(
        &self,
        batch: &MicroBatch,
        loss: &impl Fn(&Tensor, &MicroBatch) -> Tensor,
    ) -> Result<Pending<'c>, PipelineError> {
        let tape = Tape::new();
        let x = self.stage_input(&tape, &batch.ids, &batch.mask, 0)?;
        let (x, input) = if self.stage().is_first() {
            (x, None)
        } else {
            let leaf = x.set_requires_grad(true);
            (leaf.shallow_clone(), Some(leaf))
        };
        let y = self.run_layers(&tape, &x, &batch.mask, None)?;
        let output = match self.stage_output(&tape, &y)? {
            Some(logits) => {
                let value = loss(&logits, batch);
                if value.numel() != 1 {
                    return Err(PipelineError::LossShape(value.size()));
                }
                value
            }
            None => y,
        };
        Ok(Pending {
            tape,
            input,
            output,
        })
    }

    /// Runs a micro-batch's backward on this stage; returns its loss on the last stage, 0
    /// elsewhere.
    fn backward(&self, pending: Pending<'c>) -> Result<f64, PipelineError> {
        let Pending {
            tape,
            input,
            output,
        } = pending;
        let stage = self.stage();
        let loss = if stage.is_last() {
            tape.backward(&[(&output, None)])?;
            output.double_value(&[])
        } else {
            let grad = self.pp().recv(stage.index + 1)?;
            tape.backward(&[(&output, Some(&grad))])?;
            0.0
        };
        if let Some(input) = input {
            let grad = input.grad();
            let grad = if grad.defined() {
                grad
            } else {
                input.zeros_like()
            };
            self.pp().send(&grad, stage.index - 1)?;
        }
        Ok(loss)
    }

    /// With a tied LM head on two stages, gives both copies of the embedding the sum of their
    /// gradients, added in the same order on both, so the optimiser keeps them identical.
    fn sum_tied_gradients(&self) -> Result<(), PipelineError> {
        let stage = self.stage();
        if !self.config().tie_embeddings
            || stage.count == 1
            || !(stage.is_first() || stage.is_last())
        {
            return Ok(());
        }
        let weight = self
            .var_store()
            .variables()
            .remove(EMBEDDING)
            .ok_or_else(|| PipelineError::MissingWeight(EMBEDDING.to_string()))?;
        let peer = if stage.is_first() { stage.count - 1 } else { 0 };
        let own = weight.grad();
        let own = if own.defined() {
            own
        } else {
            weight.zeros_like()
        };
        self.pp().send(&own, peer)?;
        let theirs = self.pp().recv(peer)?;
        let sum = if stage.is_first() {
            &own + &theirs
        } else {
            &theirs + &own
        };
        let mut grad = weight.grad();
        if grad.defined() {
            tch::no_grad(|| grad.f_copy_(&sum))?;
        } else {
            // No gradient to overwrite yet: one backward gives exactly `sum`.
            (&weight * sum).sum(Kind::Float).backward();
        }
        Ok(())
    }

    /// Scales the stage's gradients so that the norm of all stages' gradients together is at most
    /// `max_norm` (as `torch.nn.utils.clip_grad_norm_`), the tied embedding counted once; returns
    /// the norm before clipping, on every stage.
    pub fn clip_grad_norm(&self, max_norm: f64) -> Result<f64, PipelineError> {
        let params: Vec<(String, Tensor)> = self
            .var_store()
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        let norm = self.grad_norm_of(params.iter().map(|(name, t)| (name.as_str(), t.grad())))?;
        let all: Vec<Tensor> = params.into_iter().map(|(_, t)| t).collect();
        clip_to(&all, norm, max_norm);
        Ok(norm)
    }

    /// The norm of all stages' gradients together, from this stage's gradients by parameter
    /// name (its variables', or spans of one flat gradient), the tied embedding counted once;
    /// every stage must call it.
    pub fn grad_norm_of<'a>(
        &self,
        grads: impl IntoIterator<Item = (&'a str, Tensor)>,
    ) -> Result<f64, PipelineError> {
        let counted = grads
            .into_iter()
            .filter(|(name, _)| !self.is_second_embedding_copy(name))
            .map(|(_, g)| g);
        let squared = Tensor::from(sum_of_squares(counted));
        Ok(self
            .pp()
            .all_reduce(&squared, ReduceOp::Sum)?
            .double_value(&[])
            .sqrt())
    }
}

//! `role.update(batch, epochs, minibatch) { logp -> loss }`: the loss closure (the plan's
//! kernel of it) evaluated on micro-batches — a fused kernel giving the loss and its gradient
//! w.r.t. `logp`, which seeds the model's backward pass, or the kernel run eagerly with
//! autograd where the fused back end cannot differentiate it or its tensors are off the CPU —
//! gradients averaged over micro-batches and data ranks, clipped, and one optimizer step per
//! minibatch.
//!
//! Rows of a minibatch: minibatch `k` of `M` is every row `g` of the step's batch with
//! `g mod M = k`, so each data rank holds its share of every minibatch. The rows of a
//! minibatch are cut, in batch order, into `data ranks × accumulation` micro-batches of equal
//! size; the loss is evaluated per micro-batch. One rank with two micro-batches therefore
//! computes exactly what two data ranks with one each do.

use rlc_plan::model::{Op, OpKind, RoleKind};
use tch::{Kind, Tensor};

use super::error::{Result, RunError};
use super::kernel::compiled_once;
use super::rank::Rank;
use super::roles::Model;
use super::rollout::{self, Output};
use super::values::{Rollout, Val};
use crate::collectives::ReduceOp;
use crate::kernels::args::Bound;
use crate::kernels::eager::Eager;
use crate::kernels::fused::{Fused, FusedError};
use crate::model::token_logprobs;
use crate::optim::AdamW;
use crate::parallel::Tape;
use crate::parallel::pp::PipelineModel;
use rlc_kernel::KernelError;
use rlc_kernel::ir::Kernel;
use std::cell::RefCell;
use std::rc::Rc;

impl Rank<'_> {
    pub(super) fn update(&mut self, op: &Op, step: u64) -> Result<()> {
        let OpKind::Update {
            role,
            epochs,
            minibatches,
            accumulation,
            loss,
            ..
        } = &op.kind
        else {
            unreachable!("update() runs update ops")
        };
        let batch = whole(self.rollout_input(op)?, self.device);
        let rows = batch.rows();
        let (index, _) = self.data_rank(op)?;
        let first = index as i64 * rows;
        let minibatches = minibatches.unwrap_or(1).max(1) as i64;
        let accumulation = accumulation.unwrap_or(1).max(1) as i64;
        // Values the closure reads, whole records where it reads a field.
        let mut captures: Vec<(String, Capture)> = Vec::new();
        for input in &loss.captures {
            match (&input.field, self.value(op, input.value)?) {
                (Some(_), Val::Rollout(r)) => {
                    if !captures.iter().any(|(n, _)| *n == input.name) {
                        let fields = r
                            .fields
                            .iter()
                            .map(|(n, t)| (n.clone(), t.shallow_clone()))
                            .collect();
                        captures.push((input.name.clone(), Capture::Record(fields)));
                    }
                }
                _ => captures.push((input.name.clone(), Capture::Tensor(self.tensor(op, input)?))),
            }
        }
        let mut state = self
            .roles
            .remove(role)
            .ok_or_else(|| RunError::Plan(format!("rank {} does not hold `{role}`", self.rank)))?;
        let result = (|| {
            let kind = self.job.plan.role(role).map(|r| r.kind);
            let what = Output::of_kind(kind.unwrap_or(RoleKind::CausalLM));
            if state.training.is_none() {
                return Err(RunError::Plan(format!(
                    "`{role}` is updated but has no optimizer"
                )));
            }
            let data_ranks = self.comm(op)?.world_size() as f64;
            for _ in 0..*epochs {
                for k in 0..minibatches {
                    let mine: Vec<i64> = (0..rows)
                        .filter(|i| (first + i) % minibatches == k)
                        .collect();
                    if let Some(adam) = state.adam_mut() {
                        adam.zero_grad();
                    }
                    for chunk in mine.chunks(mine.len().div_ceil(accumulation as usize).max(1)) {
                        let idx = Tensor::from_slice(chunk).to_device(self.device);
                        let part = batch.select(&idx);
                        if let Model::Pp(m, _) = &state.model {
                            let how = PpLoss {
                                op,
                                step,
                                kernel: loss.kernel,
                                param: &loss.param,
                                captures: &captures,
                                micro_batches: accumulation as f64,
                            };
                            self.pp_backward(m, &part, &idx, &how)?;
                            continue;
                        }
                        // A tensor-parallel model records its cuts here for the backward pass.
                        let tape = Tape::new();
                        // An FSDP model's forward pass, kept for its backward pass.
                        let (output, mut pass) = match &state.model {
                            Model::Fsdp(m) if what == Output::Logprobs => {
                                let pass = m.forward(&part.ids, &part.attention)?;
                                let logp = pass.logprobs().narrow(
                                    1,
                                    part.prompt_len - 1,
                                    part.response_len,
                                );
                                (logp, Some(pass))
                            }
                            model => (rollout::output(model, what, &part, &tape)?, None),
                        };
                        let mut scope: Vec<(&str, Bound)> =
                            vec![(loss.param.as_str(), Bound::Tensor(output.shallow_clone()))];
                        for (name, capture) in &captures {
                            scope.push((name.as_str(), capture.rows(&idx)));
                        }
                        // FSDP sums gradients over the data ranks; the others average them below.
                        let over = match &state.model {
                            Model::Fsdp(_) => data_ranks,
                            _ => 1.0,
                        };
                        let how = LossWeight {
                            micro_batches: accumulation as f64,
                            data_ranks: over,
                        };
                        let value = self.surrogate_loss(
                            op,
                            step,
                            loss.kernel,
                            &loss.param,
                            &scope,
                            &output,
                            how,
                        )?;
                        match &mut state.model {
                            Model::Whole(_) => value.f_backward().map_err(|e| {
                                RunError::Unsupported(format!("the loss of `{}`: {e}", op.label))
                            })?,
                            Model::Tp(_) => tape.backward(&[(&value, None)])?,
                            Model::Pp(..) => return Err(RunError::Plan(PP_ELSEWHERE.into())),
                            Model::Fsdp(m) => {
                                let pass = pass
                                    .take()
                                    .ok_or_else(|| RunError::Plan("no FSDP forward pass".into()))?;
                                m.backward(pass, &value)?;
                            }
                        }
                    }
                    let Some((clip, schedule)) = state
                        .training
                        .as_ref()
                        .map(|t| (t.clip, t.schedule.clone()))
                    else {
                        continue;
                    };
                    let comm = self.comm(op)?;
                    // One flat gradient (float32 under mixed precision, whatever the model
                    // computes in): one all-reduce over the data ranks, one norm over the
                    // layout, one fused step. FSDP reduces and clips its own shards.
                    if !matches!(state.model, Model::Fsdp(_))
                        && let Some(mut grads) = state.adam().and_then(AdamW::flat_grads)
                    {
                        if comm.world_size() > 1 {
                            grads = comm.all_reduce(&grads, ReduceOp::Mean)?;
                        }
                        let norm = state.flat_grad_norm(&grads)?;
                        crate::optim::clip_flat_to(&mut grads, norm, clip);
                        if let Some(adam) = state.adam_mut() {
                            adam.step_flat(schedule.lr(adam.steps()), &grads);
                        }
                        continue;
                    }
                    let params = state
                        .training
                        .as_ref()
                        .map_or_else(Vec::new, |t| t.optimizer.params());
                    // FSDP reduced its gradient shards over the data ranks in its backward pass.
                    if comm.world_size() > 1 && !matches!(state.model, Model::Fsdp(_)) {
                        tch::no_grad(|| -> Result<()> {
                            for p in &params {
                                let mut grad = p.grad();
                                if grad.defined() {
                                    grad.copy_(&comm.all_reduce(&grad, ReduceOp::Mean)?);
                                }
                            }
                            Ok(())
                        })?;
                    }
                    state.clip_grad_norm(&params, clip)?;
                    if let Some(adam) = state.adam_mut() {
                        let lr = schedule.lr(adam.steps());
                        adam.step(lr);
                    }
                }
            }
            Ok(())
        })();
        self.roles.insert(role.clone(), state);
        result
    }
}

const PP_ELSEWHERE: &str = "a pipeline stage's loss runs through `pp_backward`";

/// How one micro-batch's loss counts in the optimizer step's gradient.
#[derive(Clone, Copy)]
struct LossWeight {
    micro_batches: f64,
    /// Ranks whose gradients the model sums rather than averages (FSDP's data ranks), else 1.
    data_ranks: f64,
}

/// What a pipeline stage's loss needs of an `update`.
struct PpLoss<'a> {
    op: &'a Op,
    step: u64,
    /// The loss's entry in the plan's kernel table.
    kernel: u32,
    param: &'a str,
    captures: &'a [(String, Capture)],
    /// Micro-batches accumulated per optimizer step.
    micro_batches: f64,
}

impl Rank<'_> {
    /// Forward and backward passes of one micro-batch (rows `idx` of the batch) through the
    /// pipeline: the last stage turns its logits into the response log-probs and the loss (the
    /// fused kernel's gradient as the surrogate `(logp · grad).sum()`, or the kernel run
    /// eagerly); every stage's gradients accumulate.
    fn pp_backward(
        &self,
        m: &PipelineModel,
        part: &Rollout,
        idx: &Tensor,
        how: &PpLoss,
    ) -> Result<()> {
        let failed: RefCell<Option<RunError>> = RefCell::new(None);
        m.forward_backward(&part.ids, &part.attention, 1, |logits, _| {
            let logp =
                token_logprobs(logits, &part.ids).narrow(1, part.prompt_len - 1, part.response_len);
            match self.pp_loss(&logp, idx, how) {
                Ok(loss) => loss,
                Err(e) => {
                    failed.borrow_mut().get_or_insert(e);
                    logits.sum(Kind::Float) * 0.0
                }
            }
        })?;
        match failed.into_inner() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The loss whose gradient w.r.t. `logp` is the closure's, weighted for its micro-batch.
    fn pp_loss(&self, logp: &Tensor, idx: &Tensor, how: &PpLoss) -> Result<Tensor> {
        let mut scope: Vec<(&str, Bound)> = vec![(how.param, Bound::Tensor(logp.shallow_clone()))];
        for (name, capture) in how.captures {
            scope.push((name.as_str(), capture.rows(idx)));
        }
        let weight = LossWeight {
            micro_batches: how.micro_batches,
            data_ranks: 1.0,
        };
        self.surrogate_loss(
            how.op, how.step, how.kernel, how.param, &scope, logp, weight,
        )
    }

    /// A scalar whose gradient w.r.t. `output` (the model's output bound to the closure's
    /// parameter in `scope`) is the loss closure's (the plan's kernel `kernel`), divided by
    /// `weight`'s micro-batches and data ranks: from one fused kernel, the surrogate
    /// `(output · ∂loss/∂output).sum()`; where the fused back end cannot differentiate the
    /// loss or the rank is not on the CPU, the kernel run eagerly with autograd.
    #[allow(clippy::too_many_arguments)]
    fn surrogate_loss(
        &self,
        op: &Op,
        step: u64,
        kernel: u32,
        param: &str,
        scope: &[(&str, Bound)],
        output: &Tensor,
        weight: LossWeight,
    ) -> Result<Tensor> {
        let finite = |x: f64| {
            if x.is_finite() {
                Ok(())
            } else {
                Err(RunError::NonFinite { step, value: x })
            }
        };
        let k = self.plan_kernel(kernel)?;
        if self.device == tch::Device::Cpu
            && let Some(fused) = self.loss_kernel(kernel, k, param)
        {
            match fused.run_scope(scope, 1) {
                Ok(out) => {
                    finite(out[0].double_value(&[]))?;
                    let scale = 1.0 / weight.micro_batches / weight.data_ranks;
                    let g = out[1].f_to_kind(output.kind())?.f_mul_scalar(scale)?;
                    return Ok(output.f_mul(&g.detach())?.f_sum(output.kind())?);
                }
                Err(FusedError::Kernel(KernelError::Inputs(_)) | FusedError::Input(_)) => {}
                Err(e) => {
                    return Err(RunError::Unsupported(format!(
                        "the fused loss of `{}`: {e}",
                        op.label
                    )));
                }
            }
        }
        let value = Eager::default()
            .run_scope(k, scope, self.device)
            .map_err(|source| RunError::Kernel {
                function: format!("the loss of `{}`", op.label),
                step,
                source,
            })?
            .remove(0);
        finite(value.double_value(&[]))?;
        Ok(value / weight.micro_batches / weight.data_ranks)
    }

    /// The loss kernel `index` (`k`) with its gradient w.r.t. `param`, compiled on first use
    /// (cached with the kernel ops'); `None` where the fused back end cannot differentiate it.
    fn loss_kernel(&self, index: u32, k: &Kernel, param: &str) -> Option<Rc<Fused>> {
        compiled_once(&self.fused, format!("loss {index} d{param}"), || {
            Fused::with_gradient(k, param).ok()
        })
    }
}

/// A value the loss closure reads.
enum Capture {
    Tensor(Tensor),
    Record(Vec<(String, Tensor)>),
}

impl Capture {
    /// The capture restricted to rows `idx` (a scalar is every row's).
    fn rows(&self, idx: &Tensor) -> Bound {
        let select = |t: &Tensor| {
            if t.dim() == 0 {
                t.shallow_clone()
            } else {
                t.index_select(0, idx)
            }
        };
        match self {
            Capture::Tensor(t) => Bound::Tensor(select(t)),
            Capture::Record(fields) => {
                Bound::Record(fields.iter().map(|(n, t)| (n.clone(), select(t))).collect())
            }
        }
    }
}

/// Every row of a rollout, as an owned value the update can keep while it changes the model.
fn whole(r: &Rollout, device: tch::Device) -> Rollout {
    r.select(&Tensor::arange(r.rows(), (Kind::Int64, device)))
}

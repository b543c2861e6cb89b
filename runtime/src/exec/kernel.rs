//! Kernel ops: a plan's kernel (a `fn` of the program, a builtin or an operator, lowered to
//! the kernel IR by the compiler) on this rank's rows, as a fused kernel (`kernels::fused`,
//! compiled once per rank) where the fused back end covers it, run eagerly otherwise. A batch
//! reduction (`mean(reward)`) first gathers every data rank's rows, so each rank computes the
//! value of the whole batch, as one rank would.

use rlc_kernel::ir::Kernel;
use rlc_plan::model::{Op, OpKind};
use tch::{Device, Kind, Tensor};

use super::error::{Result, RunError};
use super::rank::Rank;
use crate::data::{self, tokens};
use crate::kernels::args::Arg;
use crate::kernels::eager::Eager;
use crate::kernels::fused::{Fused, FusedError};
use crate::kernels::fused_cuda::FusedCuda;
use rlc_kernel::KernelError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

impl Rank<'_> {
    pub(super) fn kernel(&self, op: &Op, step: u64) -> Result<Tensor> {
        let OpKind::Kernel {
            function,
            attrs,
            batch_reduction,
            kernel,
            ..
        } = &op.kind
        else {
            unreachable!("kernel() runs kernel ops")
        };
        let Some(index) = *kernel else {
            if let Some((dataset, "score")) = function.rsplit_once('.')
                && self.job.sources.contains_key(dataset)
            {
                return self.task_score(op, dataset);
            }
            return Err(RunError::Plan(format!(
                "the op `{}` carries no kernel",
                op.label
            )));
        };
        let k = self.plan_kernel(index)?;
        let mut args: Vec<(&str, Arg)> = Vec::new();
        for input in &op.inputs {
            let t = self.tensor(op, input)?;
            let t = if *batch_reduction {
                self.all_rows(op, &t)?
            } else {
                t
            };
            args.push((&input.name, Arg::Tensor(t)));
        }
        for (name, text) in attrs {
            let x: f64 = text.parse().map_err(|_| {
                RunError::Plan(format!("`{function}`: argument `{name}` = `{text}`"))
            })?;
            args.push((name, Arg::Number(x)));
        }
        let fail = |source| RunError::Kernel {
            function: function.clone(),
            step,
            source,
        };
        let ran = match self.device {
            Device::Cuda(ordinal) => self
                .fused_cuda_kernel(index, k, ordinal)
                .map(|fused| fused.run(&args)),
            // Ranks are already one thread per core: the kernel's rows stay on this one.
            _ => self.fused_kernel(index, k).map(|fused| fused.run(&args, 1)),
        };
        match ran {
            Some(Ok(mut out)) => return Ok(out.remove(0)),
            None | Some(Err(FusedError::Kernel(KernelError::Inputs(_)) | FusedError::Input(_))) => {
            }
            Some(Err(e)) => return Err(fail(e)),
        }
        let mut out = Eager::default()
            .run_args(k, &args, self.device)
            .map_err(fail)?;
        Ok(out.remove(0))
    }

    /// Entry `index` of the plan's kernel table.
    pub(super) fn plan_kernel(&self, index: u32) -> Result<&Kernel> {
        self.job
            .plan
            .kernels
            .get(index as usize)
            .ok_or_else(|| RunError::Plan(format!("the plan has no kernel {index}")))
    }

    /// The plan's kernel `index` compiled on first use; `None` where the fused back end does not
    /// cover it (it runs eagerly then).
    fn fused_kernel(&self, index: u32, k: &Kernel) -> Option<Rc<Fused>> {
        compiled_once(&self.fused, format!("kernel {index}"), || {
            Fused::compile(k).ok()
        })
    }

    /// As [`Self::fused_kernel`], compiled by NVRTC for CUDA device `ordinal`.
    fn fused_cuda_kernel(&self, index: u32, k: &Kernel, ordinal: usize) -> Option<Rc<FusedCuda>> {
        compiled_once(&self.fused_cuda, format!("kernel {index}"), || {
            FusedCuda::compile(k, ordinal).ok()
        })
    }

    /// `dataset.score(rollout)`: the rule-based reward of std's tasks ([`data::score`]) on each
    /// row, against the answer as far as the response reaches.
    fn task_score(&self, op: &Op, dataset: &str) -> Result<Tensor> {
        let rollout = self.rollout_input(op)?;
        let rows = |name: &str| -> Result<Vec<Vec<i64>>> {
            let t = rollout
                .field(name)
                .ok_or_else(|| RunError::Plan(format!("a rollout has no field `{name}`")))?;
            Ok(Vec::<Vec<i64>>::try_from(t.to_kind(Kind::Int64))?)
        };
        let mut scores = Vec::new();
        for (response, target) in rows("response")?.iter().zip(rows("target")?) {
            let target: Vec<i64> = target.into_iter().filter(|&t| t != tokens::PAD).collect();
            if target.is_empty() {
                return Err(RunError::Dataset {
                    name: dataset.to_string(),
                    message: "some prompts have no answer to score against (a JSONL line \
                              needs a `target` field)"
                        .into(),
                });
            }
            let sample = data::Sample {
                prompt: Vec::new(),
                target,
                row: None,
            };
            scores.push(data::score(response, &sample) as f32);
        }
        Ok(Tensor::from_slice(&scores).to_device(self.device))
    }
}

/// The entry of `cache` under `key`, made by `compile` on first use.
pub(super) fn compiled_once<T>(
    cache: &RefCell<HashMap<String, Option<Rc<T>>>>,
    key: String,
    compile: impl FnOnce() -> Option<T>,
) -> Option<Rc<T>> {
    cache
        .borrow_mut()
        .entry(key)
        .or_insert_with(|| compile().map(Rc::new))
        .clone()
}

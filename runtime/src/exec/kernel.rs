//! Kernel ops: a `fn` of the program (or a builtin) on this rank's rows, as a fused kernel
//! (`kernels::fused`, compiled once per rank) where the fused back end covers it, through the
//! reference evaluator otherwise. A batch reduction (`mean(reward)`) first gathers every data rank's
//! rows, so each rank computes the value of the whole batch, as one rank would.

use rlc_plan::model::{Op, OpKind};
use rlc_syntax::ast::{self, BinaryOp, Expr, ExprKind, Ident, Span, UnaryOp};
use tch::{Device, Kind, Tensor};

use super::error::{Result, RunError};
use super::rank::Rank;
use crate::data::{self, tokens};
use crate::kernels::fused::{Fused, FusedError};
use crate::kernels::fused_cuda::FusedCuda;
use crate::kernels::reference::{Arg, Bound, Evaluator};
use rlc_kernel::KernelError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

impl Rank<'_> {
    pub(super) fn kernel(&self, op: &Op, step: u64) -> Result<Tensor> {
        let OpKind::Kernel {
            function,
            module,
            attrs,
            batch_reduction,
            ..
        } = &op.kind
        else {
            unreachable!("kernel() runs kernel ops")
        };
        if let Some((dataset, "score")) = function.rsplit_once('.')
            && self.job.sources.contains_key(dataset)
        {
            return self.task_score(op, dataset);
        }
        let mut bindings: Vec<(&str, Bound)> = Vec::new();
        for input in &op.inputs {
            let t = self.tensor(op, input)?;
            let t = if *batch_reduction {
                self.all_rows(op, &t)?
            } else {
                t
            };
            bindings.push((&input.name, Bound::Tensor(t)));
        }
        for (name, text) in attrs {
            let x: f64 = text.parse().map_err(|_| {
                RunError::Unsupported(format!("`{function}`: argument `{name}` = `{text}`"))
            })?;
            bindings.push((name, Bound::Number(x)));
        }
        let fail = |source| RunError::Kernel {
            function: function.clone(),
            step,
            source,
        };
        let eval = Evaluator::new(self.job.modules).with_device(self.device);
        // A `fn` of a loaded module by its full name; otherwise the name as the root module
        // sees it (its own `fn`s, imported ones and the builtins).
        let loaded = module.as_deref().is_some_and(|m| {
            self.job
                .modules
                .modules
                .iter()
                .any(|l| l.name == m && l.items.contains_key(function))
        });
        if let (true, Some(m)) = (loaded, module) {
            let args: Vec<(&str, Arg)> = bindings
                .into_iter()
                .map(|(n, b)| match b {
                    Bound::Number(x) => (n, Arg::Number(x)),
                    Bound::Tensor(t) => (n, Arg::Tensor(t)),
                    Bound::Record(_) => unreachable!("kernel inputs are tensors"),
                })
                .collect();
            let name = format!("{m}.{function}");
            let ran = match self.device {
                Device::Cuda(ordinal) => self
                    .fused_cuda_kernel(&name, &args, ordinal)
                    .map(|fused| fused.run(&args)),
                // Ranks are already one thread per core: the kernel's rows stay on this one.
                _ => self
                    .fused_kernel(&name, &args)
                    .map(|fused| fused.run(&args, 1)),
            };
            match ran {
                Some(Ok(mut out)) => return Ok(out.remove(0)),
                None
                | Some(Err(FusedError::Kernel(KernelError::Inputs(_)) | FusedError::Input(_))) => {}
                Some(Err(e)) => {
                    return Err(RunError::Unsupported(format!("fused `{name}`: {e}")));
                }
            }
            return eval.call(&name, &args).map_err(fail);
        }
        let expr = operator_expr(function)
            .unwrap_or_else(|| call_expr(function, bindings.iter().map(|(n, _)| *n)));
        eval.eval(&expr, &bindings).map_err(fail)
    }

    /// The fused kernel of `function` on these arguments, compiled on first use; `None` where
    /// the fused back end does not cover it (the reference evaluator runs it then).
    fn fused_kernel(&self, function: &str, args: &[(&str, Arg)]) -> Option<Rc<Fused>> {
        compiled_once(&self.fused, function, args, |given| {
            Fused::new(self.job.modules, function, given, &[]).ok()
        })
    }

    /// As [`Self::fused_kernel`], compiled by NVRTC for CUDA device `ordinal`.
    fn fused_cuda_kernel(
        &self,
        function: &str,
        args: &[(&str, Arg)],
        ordinal: usize,
    ) -> Option<Rc<FusedCuda>> {
        compiled_once(&self.fused_cuda, function, args, |given| {
            FusedCuda::new(self.job.modules, function, given, &[], ordinal).ok()
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

/// The entry of `cache` for `function` on arguments of these names, made by `compile` (from the
/// names) on first use.
fn compiled_once<T>(
    cache: &RefCell<HashMap<String, Option<Rc<T>>>>,
    function: &str,
    args: &[(&str, Arg)],
    compile: impl FnOnce(&[&str]) -> Option<T>,
) -> Option<Rc<T>> {
    let given: Vec<&str> = args.iter().map(|(n, _)| *n).collect();
    let key = format!("{function}({})", given.join(","));
    cache
        .borrow_mut()
        .entry(key)
        .or_insert_with(|| compile(&given).map(Rc::new))
        .clone()
}

/// The expression of an operator kernel (`sub` is `lhs - rhs`, `neg` is `-x`), as lowering
/// names them.
fn operator_expr(function: &str) -> Option<Expr> {
    let name = |n: &str| {
        Box::new(Expr {
            kind: ExprKind::Name(Ident {
                name: n.to_string(),
                span: Span::default(),
            }),
            span: Span::default(),
        })
    };
    let unary = |op| ExprKind::Unary {
        op,
        op_span: Span::default(),
        operand: name("x"),
    };
    let binary = |op| ExprKind::Binary {
        op,
        op_span: Span::default(),
        lhs: name("lhs"),
        rhs: name("rhs"),
    };
    let kind = match function {
        "neg" => unary(UnaryOp::Neg),
        "not" => unary(UnaryOp::Not),
        "add" => binary(BinaryOp::Add),
        "sub" => binary(BinaryOp::Sub),
        "mul" => binary(BinaryOp::Mul),
        "div" => binary(BinaryOp::Div),
        "rem" => binary(BinaryOp::Rem),
        "eq" => binary(BinaryOp::Eq),
        "ne" => binary(BinaryOp::Ne),
        "lt" => binary(BinaryOp::Lt),
        "le" => binary(BinaryOp::Le),
        "gt" => binary(BinaryOp::Gt),
        "ge" => binary(BinaryOp::Ge),
        "and" => binary(BinaryOp::And),
        "or" => binary(BinaryOp::Or),
        _ => return None,
    };
    Some(Expr {
        kind,
        span: Span::default(),
    })
}

/// `function(a: a, b: b, …)`: a call whose arguments are the bound names.
pub(super) fn call_expr<'a>(function: &str, params: impl Iterator<Item = &'a str>) -> Expr {
    let name = |n: &str| Expr {
        kind: ExprKind::Name(Ident {
            name: n.to_string(),
            span: Span::default(),
        }),
        span: Span::default(),
    };
    Expr {
        kind: ExprKind::Call {
            callee: Box::new(name(function)),
            args: params
                .map(|p| ast::Arg {
                    name: Some(Ident {
                        name: p.to_string(),
                        span: Span::default(),
                    }),
                    value: name(p),
                    span: Span::default(),
                })
                .collect(),
            closure: None,
        },
        span: Span::default(),
    }
}

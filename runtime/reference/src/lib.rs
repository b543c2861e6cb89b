//! The reference evaluator: runs any `fn` of a checked program on tch tensors, one tch
//! operation per builtin, so that the fused kernels have something plain to be compared with.
//! Autograd flows through every operation (except `stop_grad`), so the derivative of a loss
//! `fn` is `backward()` on its result.
//!
//! ```ignore
//! let eval = Evaluator::new(&checked.modules).with_float(Kind::Double);
//! let loss = eval.call("token_mean", &[("loss", l.into()), ("m", mask.into())])?;
//! ```
//!
//! Semantics, where the language reference leaves room:
//! - **Parameters.** A tensor parameter `x: f32[B, T]` takes a tensor of that rank; its axes are
//!   named by the signature (`B`, `T`) and a name must have one size across the parameters. A
//!   float parameter takes any float tensor (f64 inputs give f64 results), an integer one any
//!   integer tensor, `bool`/`Mask` a `bool` tensor. A scalar parameter takes a number (or a 0-d
//!   tensor). Left-out parameters take their defaults.
//! - **Numbers** are weak: next to a tensor they take its element type. `f32(x)` keeps a float
//!   tensor's precision and turns integers and masks into the evaluator's float type
//!   ([`Evaluator::with_float`], f32 by default), as `count` does.
//! - **Broadcasting**: equal dimensions, a scalar against anything, and `[B]` against
//!   `[B, T]` along the leading axis (any prefix of the other's dimensions).
//! - **Masked reductions** keep only the true positions, chosen with `where`: NaN or inf in a
//!   padded position never leaks into the value, nor into the gradient at real positions. (The
//!   gradient *at* a padded position is 0 unless element-wise math before the reduction is
//!   not finite there: `0 · ∂exp(NaN)` is NaN, as in torch.) An empty selection gives 0 for
//!   `sum`, `mean`, `max`, `min` and `count`. `mean(x, over: A, mask: m)` is
//!   `Σ_A x·m / Σ_A m` — the mean over the real entries, not std's `/(Σm + 1e-8)`, which
//!   std writes out itself (`masked_mean`). Reductions of integer or `bool` tensors give
//!   floats of the evaluator's float type.
//! - **Group reductions** (`by:` integer ids, one per row; equal ids form a group, whatever
//!   the values): `group_sum`, `group_mean`, `group_count` (as a float), and `group_std`, the
//!   unbiased standard deviation, 0 for a group of one and exactly 0 for a group of equal
//!   values (deviations are taken from a member, not from a rounded mean; std's
//!   `informative_groups` tests `group_std > 0`). Its gradient, as torch's `std`, is not finite
//!   where a group's values are all equal.
//! - **Scans** run the body once per position, in the scan's order, and stack the emitted
//!   columns along a new **last** axis named after the scanned one.
//! - `%` is torch's `remainder` (the sign of the divisor); `/` on integers is true division.

mod builtins;
mod error;
mod frame;
mod interp;
mod value;

pub use error::EvalError;
pub use value::Named;

use error::Result;
use frame::Frame;
use interp::Interp;
use rlc_check::modules::Modules;
use rlc_syntax::ast::{Block, Expr};
use tch::{Device, Kind, Tensor};
use value::{Numeric, Value};

// The runtime's argument and binding types: what the kernels it is compared with take.
pub use rlc_runtime::kernels::args::{Arg, Bound};

/// Evaluates the `fn`s of a checked program (`Checked.modules`; module 0 is the root).
pub struct Evaluator<'m> {
    modules: &'m Modules,
    num: Numeric,
}

impl<'m> Evaluator<'m> {
    pub fn new(modules: &'m Modules) -> Self {
        Evaluator {
            modules,
            num: Numeric {
                float: Kind::Float,
                device: Device::Cpu,
            },
        }
    }

    /// The float type of casts, counts and number-only results (f32 by default).
    pub fn with_float(mut self, kind: Kind) -> Self {
        self.num.float = kind;
        self
    }

    /// The device of tensors made from numbers alone (the CPU by default).
    pub fn with_device(mut self, device: Device) -> Self {
        self.num.device = device;
        self
    }

    /// Calls `function` — a name in the root module's scope (defined or imported), or
    /// `module.fn` with a loaded module's full name (`std.algo.gae`) — with arguments by
    /// parameter name. Returns the result as a tensor (0-d for a scalar).
    pub fn call(&self, function: &str, args: &[(&str, Arg)]) -> Result<Tensor> {
        Ok(self.call_named(function, args)?.tensor)
    }

    /// [`Evaluator::call`], with the dimension names of the result.
    pub fn call_named(&self, function: &str, args: &[(&str, Arg)]) -> Result<Named> {
        let (module, index) = self.resolve(function)?;
        let interp = Interp {
            modules: self.modules,
            num: self.num,
        };
        let def = interp
            .fn_def(module, index)
            .ok_or_else(|| EvalError::UnknownFunction(function.to_string()))?;
        let mut values: Vec<Option<Value>> = def.params.iter().map(|_| None).collect();
        for (name, arg) in args {
            let i = def
                .params
                .iter()
                .position(|p| p.name.name == *name)
                .ok_or_else(|| EvalError::UnknownArgument {
                    function: function.to_string(),
                    name: name.to_string(),
                })?;
            if values[i].is_some() {
                return Err(EvalError::RepeatedArgument {
                    function: function.to_string(),
                    name: name.to_string(),
                });
            }
            values[i] = Some(match arg {
                Arg::Tensor(t) => Value::Tensor(Named::new(t.shallow_clone(), Vec::new())),
                Arg::Number(x) => Value::Number(*x),
            });
        }
        let (value, _) = interp.call_fn(module, def, values, 0)?;
        match value {
            Value::Tensor(t) => Ok(t),
            Value::Number(x) => self.num.literal(x, None),
            _ => Err(EvalError::Unsupported {
                function: function.to_string(),
                what: "a result that is not a tensor".into(),
            }),
        }
    }

    /// Evaluates an expression of the root module (a pipeline's loss closure, a `log` field)
    /// with `bindings` in scope; a reduction without `over:` reduces every axis.
    pub fn eval(&self, expr: &Expr, bindings: &[(&str, Bound)]) -> Result<Tensor> {
        let (interp, mut frame) = self.pipeline_scope(bindings);
        let value = interp.expr(&mut frame, expr, 0)?;
        self.pipeline_result(value)
    }

    /// [`Evaluator::eval`] for a block (a closure body: `let`s, then the value).
    pub fn eval_block(&self, block: &Block, bindings: &[(&str, Bound)]) -> Result<Tensor> {
        let (interp, mut frame) = self.pipeline_scope(bindings);
        let value = interp.block(&mut frame, block, 0)?;
        self.pipeline_result(value)
    }

    /// An interpreter and a root-module frame with `bindings` in scope.
    fn pipeline_scope(&self, bindings: &[(&str, Bound)]) -> (Interp<'m>, Frame) {
        let interp = Interp {
            modules: self.modules,
            num: self.num,
        };
        let mut frame = Frame::new(0, "<pipeline>");
        // Axes are named by position (`_0` rows, `_1` tokens…): the bound values of a pipeline
        // share their leading axes, and a `fn` they are passed to renames them.
        let unnamed = |t: &Tensor| {
            let dims = (0..t.dim()).map(|i| format!("_{i}")).collect();
            Named::new(t.shallow_clone(), dims)
        };
        for (name, binding) in bindings {
            let value = match binding {
                Bound::Tensor(t) => Value::Tensor(unnamed(t)),
                Bound::Number(x) => Value::Number(*x),
                Bound::Record(fields) => Value::Record(std::rc::Rc::new(
                    fields
                        .iter()
                        .map(|(field, t)| (field.clone(), unnamed(t)))
                        .collect(),
                )),
            };
            frame.bind(name, value);
        }
        (interp, frame)
    }

    fn pipeline_result(&self, value: Value) -> Result<Tensor> {
        match value {
            Value::Tensor(t) => Ok(t.tensor),
            Value::Number(x) => Ok(self.num.literal(x, None)?.tensor),
            _ => Err(EvalError::Unsupported {
                function: "<pipeline>".into(),
                what: "a result that is not a tensor".into(),
            }),
        }
    }

    /// The `fn` called `function` — a name the root module sees, or `module.fn` with a
    /// module's full name (`std.algo.gae`) — as (module, item).
    fn resolve(&self, function: &str) -> Result<(usize, usize)> {
        let modules = self.modules;
        let found = match function.rsplit_once('.') {
            Some((module, name)) => modules
                .modules
                .iter()
                .position(|m| m.name == module)
                .and_then(|m| modules.get(m).items.get(name).map(|&i| (m, i))),
            None => match modules.get(0).lookup(0, function) {
                Some(rlc_check::modules::Binding::Item { module, index }) => Some((module, index)),
                _ => None,
            },
        };
        found
            .filter(|&(m, i)| {
                matches!(
                    modules.get(m).item(i).kind,
                    rlc_syntax::ast::ItemKind::Fn(_)
                )
            })
            .ok_or_else(|| EvalError::UnknownFunction(function.to_string()))
    }
}

//! The builtin tensor functions on tch: element-wise math, `where`, casts, reductions over a
//! named axis (optionally masked), `logsumexp`/`softmax`, and the group reductions.
//!
//! Semantics (documented in `super`'s module doc, kept here next to the code):
//! - a masked reduction takes only the positions where the mask is true, chosen with `where`
//!   so that padded NaN or inf never leak in; an empty selection reduces to 0 for `sum`,
//!   `mean`, `max`, `min` and `count`;
//! - `mean(x, over: A, mask: m) = Σ_A x·m / Σ_A m` (0 for an empty row);
//! - group reductions treat equal ids as one group, whatever their values; `group_std` of a
//!   group of equal values is exactly 0 (std's `informative_groups` relies on it).

use super::error::{EvalError, Result};
use super::frame::Frame;
use super::interp::{Interp, match_args};
use super::value::{Named, Value, is_float};
use rlc_syntax::ast::{Arg, Expr, ExprKind};
use tch::{Kind, Tensor};

pub use rlc_kernel::builtins::{Builtin, Cast, Unary, lookup, params};

/// The arguments of one builtin call, matched to its parameters.
struct Args<'a> {
    name: &'a str,
    slots: Vec<Option<&'a Expr>>,
    names: &'static [&'static str],
}

impl<'a> Args<'a> {
    fn slot(&self, param: &str) -> Option<&'a Expr> {
        let i = self.names.iter().position(|p| *p == param)?;
        self.slots[i]
    }

    fn required(&self, param: &str) -> Result<&'a Expr> {
        self.slot(param).ok_or_else(|| EvalError::MissingArgument {
            function: self.name.to_string(),
            name: param.to_string(),
        })
    }
}

impl Interp<'_> {
    pub(super) fn builtin(
        &self,
        frame: &mut Frame,
        name: &str,
        b: Builtin,
        args: &[Arg],
        depth: usize,
    ) -> Result<Value> {
        let names = params(b);
        let args = Args {
            name,
            slots: match_args(name, names, args)?,
            names,
        };
        let arg = |frame: &mut Frame, p: &str| -> Result<Value> {
            let e = args.required(p)?;
            self.expr(frame, e, depth)
        };
        match b {
            Builtin::Unary(u) => {
                let x = arg(frame, "x")?;
                self.unary_fn(frame, u, x)
            }
            Builtin::Cast(c) => {
                let x = arg(frame, "x")?;
                self.cast(frame, c, x)
            }
            Builtin::Where => {
                let c = arg(frame, "cond")?;
                let a = arg(frame, "then")?;
                let o = arg(frame, "otherwise")?;
                self.where_(frame, c, a, o)
            }
            Builtin::Pow => {
                let x = arg(frame, "x")?;
                let p = arg(frame, "p")?;
                let (ts, dims) = self.aligned(frame, &[&x, &p])?;
                Ok(tensor(ts[0].f_pow(&ts[1])?, dims))
            }
            Builtin::Clamp => {
                let x = arg(frame, "x")?;
                let lo = arg(frame, "lo")?;
                let hi = arg(frame, "hi")?;
                let (ts, dims) = self.aligned(frame, &[&x, &lo, &hi])?;
                // `min(max(x, lo), hi)`, as the language defines it.
                Ok(tensor(ts[0].f_maximum(&ts[1])?.f_minimum(&ts[2])?, dims))
            }
            Builtin::Min | Builtin::Max if args.slot("y").is_some() => {
                let x = arg(frame, "x")?;
                let y = arg(frame, "y")?;
                let (ts, dims) = self.aligned(frame, &[&x, &y])?;
                let t = if b == Builtin::Max {
                    ts[0].f_maximum(&ts[1])?
                } else {
                    ts[0].f_minimum(&ts[1])?
                };
                Ok(tensor(t, dims))
            }
            Builtin::Min | Builtin::Max | Builtin::Sum | Builtin::Mean => {
                let x = arg(frame, "x")?;
                let x = self.tensor(frame, &x, None)?;
                let mask = match args.slot("mask") {
                    Some(e) => Some(self.expr(frame, e, depth)?),
                    None => None,
                };
                let over = axis_name(frame, args.slot("over"))?;
                self.reduce(frame, b, x, mask, over.as_deref())
            }
            Builtin::Count => {
                let m = arg(frame, "m")?;
                let m = self.mask(frame, &m)?;
                let over = axis_name(frame, args.slot("over"))?;
                let dims = reduce_axes(frame, &m, over.as_deref())?;
                let counted = m.tensor.f_to_kind(self.num.float)?;
                Ok(tensor(sum_over(&counted, &dims.0)?, dims.1))
            }
            Builtin::LogSumExp | Builtin::Softmax => {
                let z = arg(frame, "z")?;
                let z = self.tensor(frame, &z, None)?;
                let over = axis_name(frame, args.slot("over"))?.ok_or_else(|| {
                    EvalError::MissingArgument {
                        function: name.to_string(),
                        name: "over".into(),
                    }
                })?;
                let dim = z.axis(&over, &frame.function)?;
                if b == Builtin::Softmax {
                    let t = z.tensor.f_softmax(dim as i64, None::<Kind>)?;
                    Ok(tensor(t, z.dims))
                } else {
                    let mut dims = z.dims.clone();
                    dims.remove(dim);
                    Ok(tensor(z.tensor.f_logsumexp([dim as i64], false)?, dims))
                }
            }
            Builtin::GroupSum | Builtin::GroupMean | Builtin::GroupStd | Builtin::GroupCount => {
                let by = arg(frame, "by")?;
                let by = self.tensor(frame, &by, None)?;
                let x = if b == Builtin::GroupCount {
                    None
                } else {
                    let x = arg(frame, "x")?;
                    Some(self.tensor(frame, &x, Some(&by))?)
                };
                self.group(frame, b, x, by)
            }
        }
    }

    fn unary_fn(&self, frame: &Frame, u: Unary, x: Value) -> Result<Value> {
        if let Value::Number(v) = x {
            return Ok(Value::Number(match u {
                Unary::Exp => v.exp(),
                Unary::Log => v.ln(),
                Unary::Abs => v.abs(),
                Unary::Sqrt => v.sqrt(),
                Unary::Rsqrt => 1.0 / v.sqrt(),
                Unary::Sigmoid => 1.0 / (1.0 + (-v).exp()),
                Unary::Tanh => v.tanh(),
                Unary::StopGrad => v,
            }));
        }
        let x = self.tensor(frame, &x, None)?;
        let t = &x.tensor;
        let out = match u {
            Unary::Exp => t.f_exp()?,
            Unary::Log => t.f_log()?,
            Unary::Abs => t.f_abs()?,
            Unary::Sqrt => t.f_sqrt()?,
            Unary::Rsqrt => t.f_rsqrt()?,
            Unary::Sigmoid => t.f_sigmoid()?,
            Unary::Tanh => t.f_tanh()?,
            Unary::StopGrad => t.f_detach()?,
        };
        Ok(tensor(out, x.dims))
    }

    fn cast(&self, frame: &Frame, c: Cast, x: Value) -> Result<Value> {
        if let (Cast::Float, Value::Number(v)) = (c, &x) {
            return Ok(Value::Number(*v));
        }
        let x = self.tensor(frame, &x, None)?;
        let kind = x.kind()?;
        let t = match c {
            // A float tensor keeps its precision (f64 inputs stay f64); others take the
            // evaluator's float type.
            Cast::Float if is_float(kind) => x.tensor.shallow_clone(),
            Cast::Float => x.tensor.f_to_kind(self.num.float)?,
            Cast::Int => x.tensor.f_to_kind(Kind::Int)?,
            Cast::Bool => x.tensor.f_ne(0)?,
        };
        Ok(tensor(t, x.dims))
    }

    fn where_(&self, frame: &Frame, c: Value, a: Value, o: Value) -> Result<Value> {
        let cond = self.mask(frame, &c)?;
        // Numbers in the branches take the other branch's type.
        let like = match (&a, &o) {
            (Value::Tensor(t), _) | (_, Value::Tensor(t)) => Some(t.clone()),
            _ => None,
        };
        let a = Value::Tensor(self.tensor(frame, &a, like.as_ref())?);
        let o = Value::Tensor(self.tensor(frame, &o, like.as_ref())?);
        let (ts, dims) = self.aligned(frame, &[&Value::Tensor(cond), &a, &o])?;
        Ok(tensor(ts[1].f_where_self(&ts[0], &ts[2])?, dims))
    }

    fn mask(&self, frame: &Frame, v: &Value) -> Result<Named> {
        match v {
            Value::Tensor(t) if t.kind()? == Kind::Bool => Ok(t.clone()),
            _ => Err(EvalError::DtypeMismatch {
                function: frame.function.clone(),
                detail: "a mask (`bool` tensor) is needed here".into(),
            }),
        }
    }

    /// `sum`/`mean`/`max`/`min` of `x` over axis `over` (every axis when `None`), only where
    /// `mask` is true.
    fn reduce(
        &self,
        frame: &Frame,
        b: Builtin,
        x: Named,
        mask: Option<Value>,
        over: Option<&str>,
    ) -> Result<Value> {
        let mut x = x;
        if !is_float(x.kind()?) {
            x.tensor = x.tensor.f_to_kind(self.num.float)?;
        }
        let (axes, out_dims) = reduce_axes(frame, &x, over)?;
        let mask = match mask {
            None => None,
            Some(m) => {
                let m = self.mask(frame, &m)?;
                let (ts, dims) = super::value::align(&[&x, &m], &frame.function)?;
                if dims != x.dims {
                    return Err(EvalError::ShapeMismatch {
                        function: frame.function.clone(),
                        detail: format!(
                            "the mask [{}] does not fit the reduced [{}]",
                            m.dims.join(", "),
                            x.dims.join(", ")
                        ),
                    });
                }
                Some(ts[1].f_expand(x.tensor.size().as_slice(), false)?)
            }
        };
        let xt = &x.tensor;
        let count = match &mask {
            Some(m) => sum_over(&m.f_to_kind(xt.f_kind()?)?, &axes)?,
            None => {
                let size = x.tensor.size();
                let n: i64 = axes.iter().map(|&a| size[a as usize]).product();
                Tensor::f_scalar_tensor(n as f64, (xt.f_kind()?, xt.device()))?
            }
        };
        let t = match b {
            Builtin::Sum | Builtin::Mean => {
                let kept = match &mask {
                    Some(m) => xt.f_where_self(m, &xt.f_zeros_like()?)?,
                    None => xt.shallow_clone(),
                };
                let s = sum_over(&kept, &axes)?;
                if b == Builtin::Sum {
                    s
                } else {
                    s.f_div(&count.f_clamp_min(1.0)?)?
                }
            }
            _ => {
                let fill = if b == Builtin::Max {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                };
                let kept = match &mask {
                    Some(m) => xt.f_masked_fill(&m.f_logical_not()?, fill)?,
                    None => xt.shallow_clone(),
                };
                let r = if b == Builtin::Max {
                    kept.f_amax(axes.as_slice(), false)?
                } else {
                    kept.f_amin(axes.as_slice(), false)?
                };
                // An empty selection reduces to 0, not to ∓inf.
                r.f_where_self(&count.f_gt(0.0)?, &r.f_zeros_like()?)?
            }
        };
        Ok(tensor(t, out_dims))
    }

    /// Group reductions: rows with equal ids in `by` form a group; each row gets its group's
    /// sum, mean, unbiased std (0 for a group of one) or size.
    fn group(&self, frame: &Frame, b: Builtin, x: Option<Named>, by: Named) -> Result<Value> {
        if by.dims.len() != 1 || is_float(by.kind()?) || by.kind()? == Kind::Bool {
            return Err(EvalError::DtypeMismatch {
                function: frame.function.clone(),
                detail: "`by:` takes one integer group id per row".into(),
            });
        }
        let kind = match &x {
            Some(x) => x.kind()?,
            None => self.num.float,
        };
        // same[i, j] = 1 when rows i and j share a group.
        let same = by
            .tensor
            .f_unsqueeze(1)?
            .f_eq_tensor(&by.tensor.f_unsqueeze(0)?)?
            .f_to_kind(kind)?;
        let count = sum_over(&same, &[1])?;
        let Some(x) = x else {
            return Ok(tensor(count, by.dims));
        };
        if x.dims != by.dims {
            return Err(EvalError::ShapeMismatch {
                function: frame.function.clone(),
                detail: format!(
                    "a group reduction needs one value per row: [{}] against ids [{}]",
                    x.dims.join(", "),
                    by.dims.join(", ")
                ),
            });
        }
        let sum = same.f_matmul(&x.tensor)?;
        let t = match b {
            Builtin::GroupSum => sum,
            Builtin::GroupMean => sum.f_div(&count)?,
            _ => {
                // Deviations are taken from the group's first member (shifted data), so that a
                // group of equal values has a std of exactly 0: `sum / count` of equal values
                // need not give that value back (three 0.1 give 0.10000000000000002).
                let first = same.f_argmax(1, false)?;
                let shift = x.tensor.f_gather(0, &first, false)?;
                let d = x.tensor.f_unsqueeze(0)?.f_sub(&shift.f_unsqueeze(1)?)?;
                let mean_d = sum_over(&same.f_mul(&d)?, &[1])?.f_div(&count)?;
                let dev = d.f_sub(&mean_d.f_unsqueeze(1)?)?;
                let sq = sum_over(&same.f_mul(&dev.f_mul(&dev)?)?, &[1])?;
                let several = count.f_gt(1.0)?;
                let var = sq.f_div(&count.f_sub_scalar(1.0)?.f_clamp_min(1.0)?)?;
                // The unselected branch is kept finite so that no NaN reaches the gradient.
                let var = var.f_where_self(&several, &var.f_ones_like()?)?;
                let std = var.f_sqrt()?;
                std.f_where_self(&several, &std.f_zeros_like()?)?
            }
        };
        Ok(tensor(t, x.dims))
    }
}

fn tensor(t: Tensor, dims: Vec<String>) -> Value {
    Value::Tensor(Named::new(t, dims))
}

/// The dimension named by `over:` (a bare name, not a value).
fn axis_name(frame: &Frame, e: Option<&Expr>) -> Result<Option<String>> {
    match e.map(|e| &e.kind) {
        None => Ok(None),
        Some(ExprKind::Name(id)) => Ok(Some(id.name.clone())),
        Some(_) => Err(EvalError::Unsupported {
            function: frame.function.clone(),
            what: "`over:` with anything but a dimension name".into(),
        }),
    }
}

/// The axes a reduction removes and the dimensions left.
fn reduce_axes(frame: &Frame, x: &Named, over: Option<&str>) -> Result<(Vec<i64>, Vec<String>)> {
    match over {
        None => Ok(((0..x.dims.len() as i64).collect(), Vec::new())),
        Some(axis) => {
            let d = x.axis(axis, &frame.function)?;
            let mut dims = x.dims.clone();
            dims.remove(d);
            Ok((vec![d as i64], dims))
        }
    }
}

fn sum_over(t: &Tensor, axes: &[i64]) -> Result<Tensor> {
    if axes.is_empty() {
        return Ok(t.shallow_clone());
    }
    Ok(t.f_sum_dim_intlist(axes, false, None::<Kind>)?)
}

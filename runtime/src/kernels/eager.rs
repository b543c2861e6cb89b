//! The kernel IR run one libtorch operation per node: on any device, with autograd through
//! every node but `stop_grad`. It is what runs a plan's kernel where the fused back ends do
//! not (a derivative the kernel IR has no rule for, a device without a fused back end), so the
//! runtime needs nothing but the plan.
//!
//! Semantics are the kernel IR's (`rlc_kernel::ir`): a node is a tensor over a prefix of the
//! kernel's axes, broadcast along missing trailing axes; reductions drop the last axis, over
//! the masked positions, an empty selection giving 0; `rem` takes the sign of the divisor;
//! group statistics are over rows with equal ids, the std unbiased and 0 for a group of one.

use rlc_kernel::ir::{Bin, Elem, GroupOp, Kernel, Node, NodeId, Op, Red, Scan, Un};
use tch::{Device, Kind, Tensor};

use super::args::{Arg, Bound, axis_sizes, ordered, scope_args};
use super::fused::FusedError;

/// Runs kernels eagerly, floats in `float` (f32 unless asked).
#[derive(Clone, Copy, Debug)]
pub struct Eager {
    float: Kind,
}

impl Default for Eager {
    fn default() -> Self {
        Eager { float: Kind::Float }
    }
}

type Result<T> = std::result::Result<T, FusedError>;

/// What a scan body reads besides its own nodes.
struct ScanFrame<'a> {
    carries: Vec<Tensor>,
    /// The outer graph's values.
    outer: &'a [Tensor],
    /// The scanned axis (the body's level) and the position.
    axis: usize,
    at: i64,
}

impl Eager {
    pub fn with_float(float: Kind) -> Eager {
        Eager { float }
    }

    /// The kernel's outputs, in order, for `inputs` (in the kernel's input order, each with
    /// the number of dimensions its level gives); floats keep their autograd history.
    pub fn run(&self, k: &Kernel, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if inputs.len() != k.inputs.len() {
            return Err(FusedError::Input(format!(
                "`{}` takes {} inputs, not {}",
                k.name,
                k.inputs.len(),
                inputs.len()
            )));
        }
        let sizes = axis_sizes(k, inputs).map_err(FusedError::Input)?;
        let device = inputs.first().map_or(Device::Cpu, Tensor::device);
        let ctx = Ctx {
            eager: self,
            inputs,
            sizes: &sizes,
            device,
        };
        let values = ctx.graph(&k.nodes, None)?;
        k.outputs
            .iter()
            .map(|o| {
                let node = &k.nodes[o.node];
                let t = lift(&values[o.node], node.level, o.level)?;
                let shape: Vec<i64> = sizes[..o.level].to_vec();
                let t = t.f_expand(shape.as_slice(), false)?.f_contiguous()?;
                // Integers come out as the fused back ends give them.
                Ok(match node.elem {
                    Elem::I32 => t.f_to_kind(Kind::Int)?,
                    _ => t,
                })
            })
            .collect()
    }

    /// [`Eager::run`] on named arguments (numbers as scalars).
    pub fn run_args(
        &self,
        k: &Kernel,
        args: &[(&str, Arg)],
        device: Device,
    ) -> Result<Vec<Tensor>> {
        let inputs = ordered(k, args, device).map_err(FusedError::Input)?;
        self.run(k, &inputs)
    }

    /// [`Eager::run`] on a loss closure's scope, keeping autograd's history.
    pub fn run_scope(
        &self,
        k: &Kernel,
        scope: &[(&str, Bound)],
        device: Device,
    ) -> Result<Vec<Tensor>> {
        let args = scope_args(k, scope, false);
        let named: Vec<(&str, Arg)> = args
            .iter()
            .map(|(n, a)| (n.as_str(), a.shallow()))
            .collect();
        self.run_args(k, &named, device)
    }

    fn kind(&self, elem: Elem) -> Kind {
        match elem {
            Elem::F32 => self.float,
            Elem::I32 => Kind::Int64,
            Elem::Bool => Kind::Bool,
        }
    }
}

struct Ctx<'a> {
    eager: &'a Eager,
    inputs: &'a [Tensor],
    sizes: &'a [i64],
    device: Device,
}

/// `t` (over `from` axes) with singleton axes appended up to `to`, so that libtorch's trailing
/// broadcasting is the IR's leading-axis broadcasting.
fn lift(t: &Tensor, from: usize, to: usize) -> Result<Tensor> {
    if to <= from {
        return Ok(t.shallow_clone());
    }
    let mut shape = t.size();
    shape.resize(shape.len() + (to - from), 1);
    Ok(t.f_reshape(shape.as_slice())?)
}

impl Ctx<'_> {
    /// The values of `nodes` in order (a scan body's when `scan` is given).
    fn graph(&self, nodes: &[Node], mut scan: Option<&mut ScanFrame>) -> Result<Vec<Tensor>> {
        let mut values: Vec<Tensor> = Vec::with_capacity(nodes.len());
        for node in nodes {
            let v = self.node(nodes, &values, node, scan.as_deref_mut())?;
            values.push(v);
        }
        Ok(values)
    }

    /// Operand `id` of `node`, at `node`'s level and in `kind`.
    fn operand(
        &self,
        nodes: &[Node],
        values: &[Tensor],
        id: NodeId,
        level: usize,
        kind: Option<Kind>,
    ) -> Result<Tensor> {
        let t = lift(&values[id], nodes[id].level, level)?;
        Ok(match kind {
            Some(kind) if t.kind() != kind => t.f_to_kind(kind)?,
            _ => t,
        })
    }

    fn node(
        &self,
        nodes: &[Node],
        values: &[Tensor],
        node: &Node,
        scan: Option<&mut ScanFrame>,
    ) -> Result<Tensor> {
        let kind = self.eager.kind(node.elem);
        let level = node.level;
        let arg = |id: NodeId, kind: Option<Kind>| self.operand(nodes, values, id, level, kind);
        Ok(match &node.op {
            Op::Input(i) => {
                let t = &self.inputs[*i];
                if t.kind() == kind {
                    t.shallow_clone()
                } else {
                    t.f_to_kind(kind)?
                }
            }
            Op::Const(x) => Tensor::f_full(&[] as &[i64], *x, (kind, self.device))?,
            Op::AxisSize(a) => {
                Tensor::f_full(&[] as &[i64], self.sizes[*a] as f64, (kind, self.device))?
            }
            Op::Unary(u, x) => self.unary(*u, &arg(*x, None)?, kind)?,
            Op::Binary(b, x, y) => {
                let (x, y) = (arg(*x, None)?, arg(*y, None)?);
                binary(*b, x, y, kind, self.eager.float)?
            }
            Op::Select(c, a, b) => {
                let c = arg(*c, Some(Kind::Bool))?;
                arg(*a, Some(kind))?.f_where_self(&c, &arg(*b, Some(kind))?)?
            }
            Op::Reduce { op, x, mask } => {
                // Over the axis after the node's level: `x` (a constant, for `count`) and the
                // mask broadcast to every position of it.
                let shape = &self.sizes[..=level];
                let x = self
                    .operand(nodes, values, *x, level + 1, Some(kind))?
                    .f_expand(shape, false)?;
                let mask = match mask {
                    Some(m) => Some(
                        self.operand(nodes, values, *m, level + 1, Some(Kind::Bool))?
                            .f_expand(shape, false)?,
                    ),
                    None => None,
                };
                reduce(*op, &x, mask.as_ref())?
            }
            Op::Group { op, x, by } => {
                let by = arg(*by, None)?;
                let x = match x {
                    Some(x) => Some(arg(*x, Some(kind))?),
                    None => None,
                };
                group(*op, x.as_ref(), &by, kind)?
            }
            Op::Scan(s) => self.scan(nodes, values, s, level)?,
            Op::Carry(i) => {
                let frame = scan.ok_or_else(|| outside("a carry"))?;
                frame.carries[*i].shallow_clone()
            }
            Op::Column(n) => {
                let frame = scan.ok_or_else(|| outside("a column"))?;
                // Expanded first: a value broadcast along the scanned axis has one column.
                let shape = &self.sizes[..=frame.axis];
                let outer = lift(&frame.outer[*n], frame.outer[*n].dim(), shape.len())?;
                outer
                    .f_expand(shape, false)?
                    .f_select(frame.axis as i64, frame.at)?
            }
            Op::Outer(n) => {
                let frame = scan.ok_or_else(|| outside("an outer value"))?;
                frame.outer[*n].shallow_clone()
            }
        })
    }

    fn unary(&self, u: Un, x: &Tensor, kind: Kind) -> Result<Tensor> {
        let float = |x: &Tensor| -> Result<Tensor> {
            Ok(if x.kind() == kind {
                x.shallow_clone()
            } else {
                x.f_to_kind(kind)?
            })
        };
        Ok(match u {
            Un::Neg => float(x)?.f_neg()?,
            Un::Not => x.f_to_kind(Kind::Bool)?.f_logical_not()?,
            Un::Exp => float(x)?.f_exp()?,
            Un::Log => float(x)?.f_log()?,
            Un::Abs => float(x)?.f_abs()?,
            Un::Sqrt => float(x)?.f_sqrt()?,
            Un::Rsqrt => float(x)?.f_rsqrt()?,
            Un::Sigmoid => float(x)?.f_sigmoid()?,
            Un::Tanh => float(x)?.f_tanh()?,
            Un::StopGrad => float(x)?.f_detach()?,
            Un::Cast => float(x)?,
        })
    }

    /// `scan` along the axis after its body's level (`level - 1`): the emitted values stacked.
    fn scan(&self, nodes: &[Node], values: &[Tensor], s: &Scan, level: usize) -> Result<Tensor> {
        let axis = level - 1;
        let len = self.sizes[axis];
        let mut frame = ScanFrame {
            carries: s
                .inits
                .iter()
                .map(|&i| lift(&values[i], nodes[i].level, axis))
                .collect::<Result<_>>()?,
            outer: values,
            axis,
            at: 0,
        };
        let mut emitted: Vec<Tensor> = Vec::with_capacity(len as usize);
        let order: Vec<i64> = if s.reverse {
            (0..len).rev().collect()
        } else {
            (0..len).collect()
        };
        for t in order {
            frame.at = t;
            let body = self.graph(&s.body, Some(&mut frame))?;
            let emit = lift(&body[s.emit], s.body[s.emit].level, axis)?;
            let shape: Vec<i64> = self.sizes[..axis].to_vec();
            emitted.push(emit.f_expand(shape.as_slice(), false)?);
            frame.carries = s
                .next
                .iter()
                .map(|&n| lift(&body[n], s.body[n].level, axis))
                .collect::<Result<_>>()?;
        }
        if s.reverse {
            emitted.reverse();
        }
        Ok(Tensor::f_stack(&emitted, axis as i64)?)
    }
}

fn outside(what: &str) -> FusedError {
    FusedError::Input(format!("{what} outside a scan body"))
}

fn binary(b: Bin, x: Tensor, y: Tensor, kind: Kind, float: Kind) -> Result<Tensor> {
    // Comparisons and logic compare their operands in a common kind; arithmetic computes in
    // the node's.
    let common = |x: &Tensor, y: &Tensor| -> Result<(Tensor, Tensor)> {
        let k = if x.kind() == y.kind() {
            x.kind()
        } else if is_float(x.kind()) || is_float(y.kind()) {
            float
        } else {
            Kind::Int64
        };
        Ok((x.f_to_kind(k)?, y.f_to_kind(k)?))
    };
    if b.is_comparison() {
        let (x, y) = common(&x, &y)?;
        return Ok(match b {
            Bin::Eq => x.f_eq_tensor(&y)?,
            Bin::Ne => x.f_ne_tensor(&y)?,
            Bin::Lt => x.f_lt_tensor(&y)?,
            Bin::Le => x.f_le_tensor(&y)?,
            Bin::Gt => x.f_gt_tensor(&y)?,
            _ => x.f_ge_tensor(&y)?,
        });
    }
    let x = x.f_to_kind(kind)?;
    let y = y.f_to_kind(kind)?;
    Ok(match b {
        Bin::Add => x.f_add(&y)?,
        Bin::Sub => x.f_sub(&y)?,
        Bin::Mul => x.f_mul(&y)?,
        Bin::Div => x.f_div(&y)?,
        Bin::Rem => x.f_remainder_tensor(&y)?,
        Bin::Pow => x.f_pow(&y)?,
        Bin::Min => x.f_minimum(&y)?,
        Bin::Max => x.f_maximum(&y)?,
        Bin::And => x.f_logical_and(&y)?.f_to_kind(kind)?,
        Bin::Or => x.f_logical_or(&y)?.f_to_kind(kind)?,
        Bin::Eq | Bin::Ne | Bin::Lt | Bin::Le | Bin::Gt | Bin::Ge => {
            unreachable!("comparisons return above")
        }
    })
}

fn is_float(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16
    )
}

/// A reduction of the last axis of `x` over the positions `mask` selects; 0 where none is.
fn reduce(op: Red, x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
    let last = x.dim() as i64 - 1;
    let Some(mask) = mask else {
        return Ok(match op {
            Red::Sum => x.f_sum_dim_intlist(Some(&[last][..]), false, x.kind())?,
            Red::Max => x.f_amax(&[last][..], false)?,
            Red::Min => x.f_amin(&[last][..], false)?,
        });
    };
    // The unselected positions are replaced, never multiplied: a NaN there must not leak into
    // the value or the gradient.
    let fill = |v: f64| -> Result<Tensor> { Ok(x.f_where_scalarother(mask, v)?) };
    let any = mask.f_any_dim(last, false)?;
    let picked = match op {
        Red::Sum => return Ok(fill(0.0)?.f_sum_dim_intlist(Some(&[last][..]), false, x.kind())?),
        Red::Max => fill(f64::NEG_INFINITY)?.f_amax(&[last][..], false)?,
        Red::Min => fill(f64::INFINITY)?.f_amin(&[last][..], false)?,
    };
    Ok(picked.f_where_scalarother(&any, 0.0)?)
}

/// Each row's group statistic of `x` (rows with equal `by` form a group).
fn group(op: GroupOp, x: Option<&Tensor>, by: &Tensor, kind: Kind) -> Result<Tensor> {
    let stat_kind = x.map_or(kind, Tensor::kind);
    // same[i, j] = 1 when rows i and j share a group.
    let same = by
        .f_unsqueeze(1)?
        .f_eq_tensor(&by.f_unsqueeze(0)?)?
        .f_to_kind(stat_kind)?;
    let count = same.f_sum_dim_intlist(Some(&[1i64][..]), false, stat_kind)?;
    let Some(x) = x else {
        return Ok(count.f_to_kind(kind)?);
    };
    Ok(match op {
        GroupOp::Count => count.f_to_kind(kind)?,
        GroupOp::Sum => same.f_matmul(x)?,
        GroupOp::Mean => same.f_matmul(x)?.f_div(&count)?,
        GroupOp::Std => {
            // Deviations from the group's first member (shifted data), so that a group of equal
            // values has a std of exactly 0, as the reference evaluator computes it.
            let first = same.f_argmax(1, false)?;
            let shift = x.f_gather(0, &first, false)?;
            let d = x.f_unsqueeze(0)?.f_sub(&shift.f_unsqueeze(1)?)?;
            let mean_d = same
                .f_mul(&d)?
                .f_sum_dim_intlist(Some(&[1i64][..]), false, stat_kind)?
                .f_div(&count)?;
            let dev = d.f_sub(&mean_d.f_unsqueeze(1)?)?;
            let sq = same.f_mul(&dev.f_mul(&dev)?)?.f_sum_dim_intlist(
                Some(&[1i64][..]),
                false,
                stat_kind,
            )?;
            let several = count.f_gt(1.0)?;
            let var = sq.f_div(&count.f_sub_scalar(1.0)?.f_clamp_min(1.0)?)?;
            // The unselected branch is kept finite so that no NaN reaches the gradient.
            let var = var.f_where_self(&several, &var.f_ones_like()?)?;
            let std = var.f_sqrt()?;
            std.f_where_self(&several, &std.f_zeros_like()?)?
        }
    })
}

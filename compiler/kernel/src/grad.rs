//! Derivatives: reverse mode on the kernel graph. [`differentiate`] appends the adjoint of a
//! scalar output with respect to chosen inputs as new outputs `d_<input>`, so the fused
//! kernel returns the loss and the gradient that seeds the model's backward pass in one run.
//!
//! The rules follow torch's autograd where it makes a choice: `max`/`min` of two values split
//! the gradient evenly on ties, a reduction's `max`/`min` shares it among the tied maxima,
//! `clamp` (lowered to selects) passes it at the bounds, `stop_grad` blocks it. Adjoints keep
//! the prefix shapes: a broadcast operand receives the sum over the axes it was broadcast
//! along. Group reductions and scans have no derivative here (the per-token losses of std do
//! not need one); a loss that differentiates through one is an error, not a silent zero.

use crate::error::{KernelError, Result};
use crate::ir::{Bin, Elem, Kernel, Node, NodeId, Op, Output, Red, Un};
use std::collections::HashMap;

pub fn differentiate(k: &Kernel, output: &str, wrt: &[&str]) -> Result<Kernel> {
    let out = k
        .output(output)
        .ok_or_else(|| KernelError::NoDerivative(format!("no output `{output}`")))?
        .node;
    if k.node(out).level != 0 || k.node(out).elem != Elem::F32 {
        return Err(KernelError::NoDerivative(format!(
            "`{}` does not return a float scalar",
            k.name
        )));
    }
    let mut inputs = Vec::new();
    for name in wrt {
        let i = k.input_index(name).ok_or_else(|| {
            KernelError::NoDerivative(format!("`{name}` is not an input of `{}`", k.name))
        })?;
        if k.inputs[i].elem != Elem::F32 {
            return Err(KernelError::NoDerivative(format!(
                "`{name}` is not a float tensor"
            )));
        }
        inputs.push(i);
    }
    let mut g = Grad {
        k: k.clone(),
        adj: HashMap::new(),
    };
    let active = g.active(&inputs);
    let one = g.push(Op::Const(1.0), 0);
    g.adj.insert(out, one);
    for n in (0..=out).rev() {
        if !active[n] {
            continue;
        }
        let Some(&a) = g.adj.get(&n) else { continue };
        g.back(n, a, &active)?;
    }
    for (name, &i) in wrt.iter().zip(&inputs) {
        let node =
            g.k.nodes
                .iter()
                .position(|x| x.op == Op::Input(i))
                .and_then(|id| g.adj.get(&id).copied());
        let node = match node {
            Some(n) => n,
            None => g.push(Op::Const(0.0), 0),
        };
        let level = g.k.inputs[i].level;
        g.k.outputs.push(Output {
            name: format!("d_{name}"),
            node,
            level,
        });
    }
    Ok(g.k)
}

struct Grad {
    k: Kernel,
    adj: HashMap<NodeId, NodeId>,
}

impl Grad {
    fn level(&self, n: NodeId) -> usize {
        self.k.nodes[n].level
    }

    fn push(&mut self, op: Op, level: usize) -> NodeId {
        let elem = match op {
            Op::Binary(b, ..) if b.is_comparison() || matches!(b, Bin::And | Bin::Or) => Elem::Bool,
            _ => Elem::F32,
        };
        self.k.nodes.push(Node { op, elem, level });
        self.k.nodes.len() - 1
    }

    fn c(&mut self, x: f64) -> NodeId {
        self.push(Op::Const(x), 0)
    }

    fn bin(&mut self, b: Bin, x: NodeId, y: NodeId) -> NodeId {
        let level = self.level(x).max(self.level(y));
        self.push(Op::Binary(b, x, y), level)
    }

    fn un(&mut self, u: Un, x: NodeId) -> NodeId {
        let level = self.level(x);
        self.push(Op::Unary(u, x), level)
    }

    fn select(&mut self, c: NodeId, x: NodeId, y: NodeId) -> NodeId {
        let level = self.level(c).max(self.level(x)).max(self.level(y));
        self.push(Op::Select(c, x, y), level)
    }

    /// Which nodes depend on the inputs through differentiable operations.
    fn active(&self, inputs: &[usize]) -> Vec<bool> {
        let mut active = vec![false; self.k.nodes.len()];
        for (id, n) in self.k.nodes.iter().enumerate() {
            active[id] = match &n.op {
                Op::Input(i) => inputs.contains(i),
                Op::Unary(Un::StopGrad | Un::Not | Un::Cast, _) => false,
                Op::Binary(b, ..) if b.is_comparison() || matches!(b, Bin::And | Bin::Or) => false,
                Op::Select(_, x, y) => active[*x] || active[*y],
                Op::Reduce { x, .. } => active[*x],
                op => n.elem == Elem::F32 && crate::ir::operands(op).iter().any(|&o| active[o]),
            };
        }
        active
    }

    /// Adds `contribution` (an adjoint at `from` level, the consumer's) to `operand`'s,
    /// summed over the axes the operand was broadcast along.
    fn accumulate(&mut self, operand: NodeId, contribution: NodeId, from: usize) {
        let mut a = contribution;
        for l in (self.level(operand)..from).rev() {
            a = self.push(
                Op::Reduce {
                    op: Red::Sum,
                    x: a,
                    mask: None,
                },
                l,
            );
        }
        let total = match self.adj.get(&operand) {
            Some(&prev) => self.bin(Bin::Add, prev, a),
            None => a,
        };
        self.adj.insert(operand, total);
    }

    fn back(&mut self, n: NodeId, a: NodeId, active: &[bool]) -> Result<()> {
        let level = self.level(n);
        let op = self.k.nodes[n].op.clone();
        match op {
            Op::Input(_) | Op::Const(_) | Op::AxisSize(_) => {}
            Op::Unary(u, x) => {
                let d = match u {
                    Un::Neg => self.un(Un::Neg, a),
                    Un::Exp => self.bin(Bin::Mul, a, n),
                    Un::Log => self.bin(Bin::Div, a, x),
                    Un::Abs => {
                        let zero = self.c(0.0);
                        let pos = self.bin(Bin::Gt, x, zero);
                        let neg = self.bin(Bin::Lt, x, zero);
                        let na = self.un(Un::Neg, a);
                        let inner = self.select(neg, na, zero);
                        self.select(pos, a, inner)
                    }
                    Un::Sqrt => {
                        let half = self.c(0.5);
                        let h = self.bin(Bin::Mul, a, half);
                        self.bin(Bin::Div, h, n)
                    }
                    Un::Rsqrt => {
                        let k = self.c(-0.5);
                        let n2 = self.bin(Bin::Mul, n, n);
                        let n3 = self.bin(Bin::Mul, n2, n);
                        let s = self.bin(Bin::Mul, n3, k);
                        self.bin(Bin::Mul, a, s)
                    }
                    Un::Sigmoid => {
                        let one = self.c(1.0);
                        let m = self.bin(Bin::Sub, one, n);
                        let s = self.bin(Bin::Mul, n, m);
                        self.bin(Bin::Mul, a, s)
                    }
                    Un::Tanh => {
                        let one = self.c(1.0);
                        let n2 = self.bin(Bin::Mul, n, n);
                        let m = self.bin(Bin::Sub, one, n2);
                        self.bin(Bin::Mul, a, m)
                    }
                    Un::StopGrad | Un::Not | Un::Cast => return Ok(()),
                };
                if active[x] {
                    self.accumulate(x, d, level);
                }
            }
            Op::Binary(b, x, y) => {
                let (dx, dy) = match b {
                    Bin::Add => (a, a),
                    Bin::Sub => (a, self.un(Un::Neg, a)),
                    Bin::Mul => (self.bin(Bin::Mul, a, y), self.bin(Bin::Mul, a, x)),
                    Bin::Div => {
                        let dx = self.bin(Bin::Div, a, y);
                        let q = self.bin(Bin::Div, n, y);
                        let m = self.bin(Bin::Mul, a, q);
                        (dx, self.un(Un::Neg, m))
                    }
                    Bin::Rem => {
                        let q = self.bin(Bin::Div, x, y);
                        // ⌊q⌋ = q − rem(q, 1).
                        let one = self.c(1.0);
                        let frac = self.bin(Bin::Rem, q, one);
                        let fl = self.bin(Bin::Sub, q, frac);
                        let m = self.bin(Bin::Mul, a, fl);
                        (a, self.un(Un::Neg, m))
                    }
                    Bin::Pow => {
                        let one = self.c(1.0);
                        let pm1 = self.bin(Bin::Sub, y, one);
                        let xp = self.bin(Bin::Pow, x, pm1);
                        let t = self.bin(Bin::Mul, y, xp);
                        let dx = self.bin(Bin::Mul, a, t);
                        let lx = self.un(Un::Log, x);
                        let t = self.bin(Bin::Mul, n, lx);
                        (dx, self.bin(Bin::Mul, a, t))
                    }
                    Bin::Min | Bin::Max => {
                        let wins = if b == Bin::Max { Bin::Gt } else { Bin::Lt };
                        let half = self.c(0.5);
                        let zero = self.c(0.0);
                        let ha = self.bin(Bin::Mul, a, half);
                        let tie = self.bin(Bin::Eq, x, y);
                        let tied = self.select(tie, ha, zero);
                        let xw = self.bin(wins, x, y);
                        let yw = self.bin(wins, y, x);
                        (self.select(xw, a, tied), self.select(yw, a, tied))
                    }
                    _ => return Ok(()),
                };
                if active[x] {
                    self.accumulate(x, dx, level);
                }
                if active[y] {
                    self.accumulate(y, dy, level);
                }
            }
            Op::Select(c, x, y) => {
                let zero = self.c(0.0);
                if active[x] {
                    let d = self.select(c, a, zero);
                    self.accumulate(x, d, level);
                }
                if active[y] {
                    let d = self.select(c, zero, a);
                    self.accumulate(y, d, level);
                }
            }
            Op::Reduce { op, x, mask } => {
                if !active[x] {
                    return Ok(());
                }
                let zero = self.c(0.0);
                let d = match op {
                    Red::Sum => match mask {
                        Some(m) => self.select(m, a, zero),
                        None => a,
                    },
                    Red::Max | Red::Min => {
                        let mut eq = self.bin(Bin::Eq, x, n);
                        if let Some(m) = mask {
                            eq = self.bin(Bin::And, eq, m);
                        }
                        let one = self.c(1.0);
                        let ties = self.push(
                            Op::Reduce {
                                op: Red::Sum,
                                x: one,
                                mask: Some(eq),
                            },
                            level,
                        );
                        let share = self.bin(Bin::Div, a, ties);
                        self.select(eq, share, zero)
                    }
                };
                self.accumulate(x, d, level + 1);
            }
            Op::Group { .. } => {
                return Err(KernelError::NoDerivative(format!(
                    "`{}` differentiates through a group reduction",
                    self.k.name
                )));
            }
            Op::Scan(_) => {
                return Err(KernelError::NoDerivative(format!(
                    "`{}` differentiates through a scan",
                    self.k.name
                )));
            }
            Op::Carry(_) | Op::Column(_) | Op::Outer(_) => {}
        }
        Ok(())
    }
}

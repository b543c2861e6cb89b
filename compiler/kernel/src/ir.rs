//! The kernel IR: a `fn` as an SSA graph of tensor operations.
//!
//! Every value is a tensor over a **prefix** of the kernel's axes: with axes `[B, T]` a value
//! has level 0 (a scalar), 1 (`[B]`) or 2 (`[B, T]`). An operand of a lower level is
//! broadcast along the missing trailing axes — the language's leading-axis broadcasting —
//! so element-wise nodes need no explicit broadcast. Reductions remove the last axis of their
//! operand; a scan runs along the axis after its body's level.

use serde::{Deserialize, Serialize};
use std::fmt;

pub type NodeId = usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Elem {
    F32,
    I32,
    Bool,
}

impl Elem {
    pub fn name(self) -> &'static str {
        match self {
            Elem::F32 => "f32",
            Elem::I32 => "i32",
            Elem::Bool => "bool",
        }
    }

    /// The element type a kernel holds a value of the language's element type `name` in
    /// (`bf16` computes in `f32`, `Tokens` are `i32`, a `Mask` is `bool`).
    pub fn of_type_name(name: &str) -> Option<Elem> {
        Some(match name {
            "f32" | "f16" | "bf16" => Elem::F32,
            "i32" | "i64" | "Tokens" => Elem::I32,
            "bool" | "Mask" => Elem::Bool,
            _ => return None,
        })
    }

    /// Bytes per element in memory (masks are one byte).
    pub fn bytes(self) -> usize {
        match self {
            Elem::F32 | Elem::I32 => 4,
            Elem::Bool => 1,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Un {
    Neg,
    Not,
    Exp,
    Log,
    Abs,
    Sqrt,
    Rsqrt,
    Sigmoid,
    Tanh,
    /// The identity whose derivative is zero.
    StopGrad,
    /// A conversion to the node's element type.
    Cast,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    /// Remainder with the sign of the divisor.
    Rem,
    Pow,
    Min,
    Max,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl Bin {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            Bin::Eq | Bin::Ne | Bin::Lt | Bin::Le | Bin::Gt | Bin::Ge
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Red {
    Sum,
    Max,
    Min,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupOp {
    Sum,
    Mean,
    /// The unbiased standard deviation; 0 for a group of one.
    Std,
    Count,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// The kernel's input of this index.
    Input(usize),
    Const(f64),
    /// The size of an axis (an `f32` scalar).
    AxisSize(usize),
    Unary(Un, NodeId),
    Binary(Bin, NodeId, NodeId),
    /// `where(cond, then, otherwise)`.
    Select(NodeId, NodeId, NodeId),
    /// A reduction of the last axis of `x`, over the positions where `mask` is true (every
    /// position without one). An empty selection gives 0.
    Reduce {
        op: Red,
        x: NodeId,
        mask: Option<NodeId>,
    },
    /// Rows with equal ids (`by`, level 1) form a group; each row gets its group's statistic
    /// of `x` (level 1).
    Group {
        op: GroupOp,
        x: Option<NodeId>,
        by: NodeId,
    },
    /// A scan along the axis after the body's level: the emitted values stacked.
    Scan(Box<Scan>),
    /// In a scan body: the value of a carry before this position's update.
    Carry(usize),
    /// In a scan body: the column at the current position of an outer node one level deeper
    /// than the body (`x[t]`).
    Column(NodeId),
    /// In a scan body: an outer node of the body's level or lower.
    Outer(NodeId),
}

/// `scan forward|reverse over A with (c = init, …) { t -> … emit v }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scan {
    pub reverse: bool,
    /// Outer nodes: the carries' initial values.
    pub inits: Vec<NodeId>,
    /// The body's own graph: `Carry`, `Column` and `Outer` reach outside it.
    pub body: Vec<Node>,
    /// Body nodes: each carry's value after a position.
    pub next: Vec<NodeId>,
    /// The body node emitted at each position.
    pub emit: NodeId,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub op: Op,
    pub elem: Elem,
    pub level: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    pub elem: Elem,
    pub level: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Output {
    pub name: String,
    pub node: NodeId,
    /// The output's level; a node of a lower level is broadcast to it.
    pub level: usize,
}

/// A `fn` (or a derivative of one) as a graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    /// The iteration axes, outermost first.
    pub axes: Vec<String>,
    pub inputs: Vec<Param>,
    pub nodes: Vec<Node>,
    pub outputs: Vec<Output>,
}

impl Kernel {
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    pub fn input_index(&self, name: &str) -> Option<usize> {
        self.inputs.iter().position(|p| p.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&Output> {
        self.outputs.iter().find(|o| o.name == name)
    }
}

/// The operands of an operation (inside one graph; a scan's inits are its operands, its body
/// reaches the outer graph through `Column`/`Outer`, listed by [`outer_uses`]).
pub fn operands(op: &Op) -> Vec<NodeId> {
    match op {
        Op::Input(_) | Op::Const(_) | Op::AxisSize(_) | Op::Carry(_) => vec![],
        Op::Column(_) | Op::Outer(_) => vec![],
        Op::Unary(_, a) => vec![*a],
        Op::Binary(_, a, b) => vec![*a, *b],
        Op::Select(c, a, b) => vec![*c, *a, *b],
        Op::Reduce { x, mask, .. } => std::iter::once(*x).chain(*mask).collect(),
        Op::Group { x, by, .. } => x.iter().copied().chain(std::iter::once(*by)).collect(),
        Op::Scan(s) => {
            let mut v = s.inits.clone();
            v.extend(outer_uses(s));
            v
        }
    }
}

/// Bounds `[lo, hi]` of the values of `n` other than NaN, as far as constants and clamps (a
/// select of a bound where a comparison with it fails: how `lower` writes `clamp`) show;
/// `(-inf, inf)` where they do not. Looks `depth` selects deep.
pub fn value_range(k: &Kernel, n: NodeId, depth: usize) -> (f64, f64) {
    const ANY: (f64, f64) = (f64::NEG_INFINITY, f64::INFINITY);
    let constant = |m: NodeId| match k.node(m).op {
        Op::Const(c) => Some(c),
        _ => None,
    };
    match k.node(n).op {
        Op::Const(c) => (c, c),
        Op::Select(c, a, b) if depth > 0 => {
            let (lo, hi) = value_range(k, b, depth - 1);
            // `select(b < K, K, b)` raises b to K; `select(b > K, K, b)` caps it at K.
            match (&k.node(c).op, constant(a)) {
                (&Op::Binary(Bin::Lt, x, y), Some(bound)) if x == b && y == a => {
                    (lo.max(bound), hi)
                }
                (&Op::Binary(Bin::Gt, x, y), Some(bound)) if x == b && y == a => {
                    (lo, hi.min(bound))
                }
                _ => {
                    let (alo, ahi) = value_range(k, a, depth - 1);
                    (lo.min(alo), hi.max(ahi))
                }
            }
        }
        _ => ANY,
    }
}

/// The outer nodes a scan's body reads.
pub fn outer_uses(s: &Scan) -> Vec<NodeId> {
    s.body
        .iter()
        .filter_map(|n| match n.op {
            Op::Column(o) | Op::Outer(o) => Some(o),
            _ => None,
        })
        .collect()
}

impl fmt::Display for Kernel {
    /// A readable listing, one node per line (for snapshots and `--emit ir`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kernel {} over [{}]", self.name, self.axes.join(", "))?;
        for (i, p) in self.inputs.iter().enumerate() {
            writeln!(
                f,
                "  in{i} {}: {}{}",
                p.name,
                p.elem.name(),
                self.dims(p.level)
            )?;
        }
        write_nodes(f, self, &self.nodes, "  ")?;
        for o in &self.outputs {
            writeln!(f, "  out {} = %{}", o.name, o.node)?;
        }
        Ok(())
    }
}

impl Kernel {
    fn dims(&self, level: usize) -> String {
        format!("[{}]", self.axes[..level.min(self.axes.len())].join(", "))
    }
}

fn write_nodes(
    f: &mut fmt::Formatter<'_>,
    k: &Kernel,
    nodes: &[Node],
    indent: &str,
) -> fmt::Result {
    for (i, n) in nodes.iter().enumerate() {
        write!(f, "{indent}%{i}: {}{} = ", n.elem.name(), k.dims(n.level))?;
        match &n.op {
            Op::Input(j) => writeln!(f, "input {}", k.inputs[*j].name)?,
            Op::Const(x) => writeln!(f, "const {x}")?,
            Op::AxisSize(a) => writeln!(f, "size {}", k.axes[*a])?,
            Op::Unary(u, a) => writeln!(f, "{u:?} %{a}")?,
            Op::Binary(b, x, y) => writeln!(f, "{b:?} %{x}, %{y}")?,
            Op::Select(c, a, b) => writeln!(f, "select %{c}, %{a}, %{b}")?,
            Op::Reduce { op, x, mask } => match mask {
                Some(m) => writeln!(f, "reduce {op:?} %{x} mask %{m}")?,
                None => writeln!(f, "reduce {op:?} %{x}")?,
            },
            Op::Group { op, x, by } => match x {
                Some(x) => writeln!(f, "group {op:?} %{x} by %{by}")?,
                None => writeln!(f, "group {op:?} by %{by}")?,
            },
            Op::Carry(c) => writeln!(f, "carry {c}")?,
            Op::Column(o) => writeln!(f, "column %{o}")?,
            Op::Outer(o) => writeln!(f, "outer %{o}")?,
            Op::Scan(s) => {
                let inits: Vec<String> = s.inits.iter().map(|i| format!("%{i}")).collect();
                writeln!(
                    f,
                    "scan {} ({}) {{",
                    if s.reverse { "reverse" } else { "forward" },
                    inits.join(", ")
                )?;
                write_nodes(f, k, &s.body, &format!("{indent}    "))?;
                let next: Vec<String> = s.next.iter().map(|i| format!("%{i}")).collect();
                writeln!(f, "{indent}    next ({}) emit %{}", next.join(", "), s.emit)?;
                writeln!(f, "{indent}  }}")?;
            }
        }
    }
    Ok(())
}

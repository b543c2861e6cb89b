//! Lowering a checked `fn` to the kernel IR: calls inlined (dimension names translated by
//! position, which prefix broadcasting makes unambiguous), defaults applied, numbers folded,
//! builtins expanded into IR primitives (`mean` is a sum over a count, `logsumexp` a shifted
//! sum of exponentials), equal nodes shared.
//!
//! Semantics follow the reference evaluator (`rlc_runtime::kernels::reference`): weak
//! numbers take the type of the tensor next to them, reductions of integers or masks give
//! `f32`, an empty masked selection reduces to 0, `/` on integers is true division.

use crate::builtins::{self, ArgError, Builtin, Cast, Unary};
use crate::error::{KernelError, Result};
use crate::ir::{Bin, Elem, GroupOp, Kernel, Node, NodeId, Op, Output, Param, Red, Scan, Un};
use rlc_check::body::{
    self, Arg, BinaryOp, Block, Bodies, Dim, Expr, ExprKind, FnBody, Item, Name, ParamType,
    Resolved, ScanDirection, Stmt, UnaryOp,
};
use std::collections::HashMap;

/// Calls nested deeper than this are reported instead of overflowing the stack.
const MAX_DEPTH: usize = 64;

/// Lowers `function` (a root-scope name or `module.fn`) to a kernel whose inputs are the
/// parameters named in `given`, in the signature's order; the other parameters take their
/// defaults. Its one output, `result`, is the `fn`'s value.
pub fn lower_fn(bodies: &Bodies, function: &str, given: &[&str]) -> Result<Kernel> {
    let ((module, _), def) = bodies
        .function(function)
        .ok_or_else(|| KernelError::UnknownFunction(function.to_string()))?;
    for name in given {
        if !def.params.iter().any(|p| p.name == *name) {
            return Err(builtins::ArgError::Unknown {
                function: function.to_string(),
                name: name.to_string(),
            }
            .into());
        }
    }
    let mut lw = Lowerer::new(bodies, &def.name);
    let mut frame = Frame::new(module, &def.name);
    // Axes first: every given tensor's dimension names, by position.
    for param in def
        .params
        .iter()
        .filter(|p| given.contains(&p.name.as_str()))
    {
        let ty = param_type(&frame, param)?;
        if let Some(dims) = &ty.dims {
            lw.bind_dims(&mut frame, dims)?;
        }
    }
    let mut axes = vec![String::new(); frame.dims.len()];
    for (name, &pos) in &frame.dims {
        axes[pos].clone_from(name);
    }
    lw.kernel.axes = axes;
    for param in &def.params {
        let value = if given.contains(&param.name.as_str()) {
            let ty = param_type(&frame, param)?;
            let elem = elem_of(&frame, ty)?;
            let level = ty.dims.as_ref().map_or(0, Vec::len);
            lw.kernel.inputs.push(Param {
                name: param.name.clone(),
                elem,
                level,
            });
            let i = lw.kernel.inputs.len() - 1;
            LVal::Node(lw.push(Op::Input(i), elem, level))
        } else {
            lw.default_of(&frame, def, param, 0)?
        };
        frame.bind(&param.name, value);
    }
    let value = lw.block(&mut frame, &def.body, 0)?;
    lw.output_result(&frame, value)?;
    Ok(lw.kernel)
}

/// A value a pipeline expression reads: a tensor, by its element type and number of
/// dimensions, or a record of such tensors, read as `name.field`.
#[derive(Clone, Debug, PartialEq)]
pub enum Scoped {
    Tensor { elem: Elem, level: usize },
    Record(Vec<(String, Elem, usize)>),
}

/// Lowers a block of `module` — the body of an `update` loss closure, in the root module or
/// in a recipe's — with `scope` bound, and `consts` (the pipeline's parameters the block reads)
/// as numbers, as the reference evaluator's pipeline scope binds them: axes named by position (`_0`
/// rows, `_1` tokens…), a reduction without `over:` reducing every axis. The kernel's inputs
/// are the scope's tensors, in order, then each record field the block reads, as the input
/// `name.field` in order of first use (a record's other fields are not read, so they need not
/// share the kernel's axes). Its one output, `result`, is the block's value.
pub fn lower_block(
    bodies: &Bodies,
    module: usize,
    name: &str,
    block: &Block,
    scope: &[(&str, Scoped)],
    consts: &[(String, f64)],
) -> Result<Kernel> {
    let mut lw = Lowerer::new(bodies, name);
    let mut frame = Frame::new(module, name);
    for (c, x) in consts {
        frame.bind(c, LVal::Number(*x));
    }
    let levels = scope.iter().flat_map(|(_, s)| match s {
        Scoped::Tensor { level, .. } => vec![*level],
        Scoped::Record(fields) => fields.iter().map(|f| f.2).collect(),
    });
    for i in 0..levels.max().unwrap_or(0) {
        frame.dims.insert(format!("_{i}"), i);
    }
    for (var, scoped) in scope {
        let value = match scoped {
            Scoped::Tensor { elem, level } => LVal::Node(lw.input(var.to_string(), *elem, *level)),
            Scoped::Record(fields) => {
                lw.records.push(Record {
                    name: var.to_string(),
                    fields: fields
                        .iter()
                        .map(|(f, e, l)| (f.clone(), *e, *l, None))
                        .collect(),
                });
                LVal::Record(lw.records.len() - 1)
            }
        };
        frame.bind(var, value);
    }
    let value = lw.block(&mut frame, block, 0)?;
    lw.output_result(&frame, value)?;
    // The axes the inputs and values span (a scan adds its axis to its operands').
    let axes = lw
        .kernel
        .inputs
        .iter()
        .map(|p| p.level)
        .chain(lw.kernel.nodes.iter().map(|n| n.level))
        .max()
        .unwrap_or(0);
    lw.kernel.axes = (0..axes).map(|i| format!("_{i}")).collect();
    Ok(lw.kernel)
}

/// Lowers a call of `function` — a builtin (`mean`), an operator by name (`sub` is
/// `lhs - rhs`, `neg` is `-x`) or a `fn` in the root module's scope — whose arguments are the
/// names of `scope`, passed by name: what a pipeline's kernel op computes. Its one output,
/// `result`, is the call's value.
pub fn lower_call(bodies: &Bodies, function: &str, scope: &[(&str, Scoped)]) -> Result<Kernel> {
    let names: Vec<&str> = scope.iter().map(|(n, _)| *n).collect();
    let expr = operator_expr(function).unwrap_or_else(|| call_expr(bodies, function, &names));
    let block = Block {
        stmts: vec![Stmt::Expr(expr)],
    };
    lower_block(bodies, 0, function, &block, scope, &[])
}

/// An expression made here, not written: it has no place in a file and no checked type.
fn made(kind: ExprKind) -> Expr {
    Expr {
        id: Default::default(),
        ty: None,
        kind,
    }
}

fn name_expr(name: &str, resolved: Resolved) -> Expr {
    made(ExprKind::Name(Name {
        name: name.to_string(),
        resolved,
    }))
}

/// `lhs - rhs` for `sub`, `-x` for `neg`, … (the operator kernels' names).
fn operator_expr(function: &str) -> Option<Expr> {
    let local = |n: &str| Box::new(name_expr(n, Resolved::Local));
    if let Some(op) = UnaryOp::from_kernel_name(function) {
        return Some(made(ExprKind::Unary {
            op,
            operand: local("x"),
        }));
    }
    let op = BinaryOp::from_kernel_name(function)?;
    Some(made(ExprKind::Binary {
        op,
        lhs: local("lhs"),
        rhs: local("rhs"),
    }))
}

/// `function(p1: p1, p2: p2, …)`, `function` named in the root module's scope.
fn call_expr(bodies: &Bodies, function: &str, params: &[&str]) -> Expr {
    let resolved = match bodies.root_scope.get(function) {
        Some(&(module, index)) => Resolved::Item { module, index },
        None if builtins::lookup(function).is_some() => Resolved::Builtin,
        None => Resolved::Free,
    };
    made(ExprKind::Call {
        callee: Box::new(name_expr(function, resolved)),
        args: params
            .iter()
            .map(|p| Arg {
                name: Some(p.to_string()),
                value: name_expr(p, Resolved::Local),
            })
            .collect(),
        closure: false,
    })
}

/// Matches a call's arguments, given by their names (`None` for a positional one), to
/// parameter names as the checker does (`rlc_check::args`): the index of each parameter's
/// argument, `None` where it is left out; the call's first mistake as an error.
pub fn match_arg_names(
    function: &str,
    params: &[&str],
    args: &[Option<&str>],
) -> std::result::Result<Vec<Option<usize>>, ArgError> {
    use rlc_check::args::Issue;
    let matched = rlc_check::args::match_args(params, args);
    let function = function.to_string();
    match matched.issues.first() {
        None => Ok(matched.slots),
        Some(Issue::Surplus { .. }) => Err(ArgError::TooMany {
            function,
            max: params.len(),
        }),
        Some(Issue::Unknown { arg }) => Err(ArgError::Unknown {
            function,
            name: args[*arg].unwrap_or_default().to_string(),
        }),
        Some(Issue::Repeated { param, .. }) => Err(ArgError::Repeated {
            function,
            name: params[*param].to_string(),
        }),
    }
}

/// Each parameter's argument expression, `None` where the call leaves it out.
fn match_args<'a>(
    function: &str,
    params: &[&str],
    args: &'a [Arg],
) -> std::result::Result<Vec<Option<&'a Expr>>, ArgError> {
    let names: Vec<Option<&str>> = args.iter().map(|a| a.name.as_deref()).collect();
    let slots = match_arg_names(function, params, &names)?;
    Ok(slots
        .into_iter()
        .map(|s| s.map(|i| &args[i].value))
        .collect())
}

/// A node of the graph being built: the kernel's (`inner == false`) or the current scan
/// body's.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Val {
    id: NodeId,
    inner: bool,
}

#[derive(Clone, Debug)]
enum LVal {
    Node(Val),
    /// A number: weak, it takes the type of the tensor next to it.
    Number(f64),
    Fn {
        module: usize,
        index: usize,
    },
    Module(usize),
    /// The position of the scan over this axis.
    Position(usize),
    /// A record of the block's scope ([`lower_block`]), by index in `Lowerer::records`.
    Record(usize),
}

struct Frame {
    module: usize,
    function: String,
    scopes: Vec<HashMap<String, LVal>>,
    /// Dimension name → axis position.
    dims: HashMap<String, usize>,
}

impl Frame {
    fn new(module: usize, function: &str) -> Self {
        Frame {
            module,
            function: function.to_string(),
            scopes: vec![HashMap::new()],
            dims: HashMap::new(),
        }
    }

    fn bind(&mut self, name: &str, v: LVal) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(name.to_string(), v);
        }
    }

    fn get(&self, name: &str) -> Option<&LVal> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    fn assign(&mut self, name: &str, v: LVal) -> bool {
        for s in self.scopes.iter_mut().rev() {
            if let Some(slot) = s.get_mut(name) {
                *slot = v;
                return true;
            }
        }
        false
    }
}

/// The scan body being built.
struct Body {
    /// The level of the body's values (the scanned axis is the next one).
    level: usize,
    nodes: Vec<Node>,
    shared: HashMap<String, NodeId>,
}

struct Lowerer<'m> {
    bodies: &'m Bodies,
    kernel: Kernel,
    body: Option<Body>,
    /// Structural keys of the kernel's nodes, so equal nodes are built once.
    shared: HashMap<String, NodeId>,
    /// The records a block's scope binds ([`lower_block`]).
    records: Vec<Record>,
}

/// A record of a block's scope: each field's element type, level and, once read, its input
/// node.
struct Record {
    name: String,
    fields: Vec<(String, Elem, usize, Option<NodeId>)>,
}

fn param_type<'a>(frame: &Frame, param: &'a body::Param) -> Result<&'a ParamType> {
    param.ty.as_ref().ok_or_else(|| KernelError::Type {
        function: frame.function.clone(),
        detail: format!("parameter `{}` has no type", param.name),
    })
}

fn elem_of(frame: &Frame, ty: &ParamType) -> Result<Elem> {
    Elem::of_type_name(&ty.name).ok_or_else(|| KernelError::Unsupported {
        function: frame.function.clone(),
        what: format!("a parameter of type `{}`", ty.name),
    })
}

impl<'m> Lowerer<'m> {
    fn new(bodies: &'m Bodies, name: &str) -> Self {
        Lowerer {
            bodies,
            kernel: Kernel {
                name: name.to_string(),
                axes: Vec::new(),
                inputs: Vec::new(),
                nodes: Vec::new(),
                outputs: Vec::new(),
            },
            body: None,
            shared: HashMap::new(),
            records: Vec::new(),
        }
    }

    /// A new input of the kernel and its node, in the kernel's graph even while a scan body
    /// is being built (the body reaches it through `Outer`/`Column`).
    fn input(&mut self, name: String, elem: Elem, level: usize) -> Val {
        self.kernel.inputs.push(Param { name, elem, level });
        let i = self.kernel.inputs.len() - 1;
        let body = self.body.take();
        let v = self.push(Op::Input(i), elem, level);
        self.body = body;
        v
    }

    /// `record.field` of a block's scope: the field's input, made on first use.
    fn field(&mut self, frame: &Frame, r: usize, field: &str) -> Result<LVal> {
        let record = &self.records[r];
        let Some(i) = record.fields.iter().position(|f| f.0 == field) else {
            return Err(KernelError::UnknownName {
                function: frame.function.clone(),
                name: format!("{}.{field}", record.name),
            });
        };
        let (_, elem, level, node) = record.fields[i];
        if let Some(id) = node {
            return Ok(LVal::Node(Val { id, inner: false }));
        }
        let name = format!("{}.{field}", record.name);
        let v = self.input(name, elem, level);
        self.records[r].fields[i].3 = Some(v.id);
        Ok(LVal::Node(v))
    }

    fn unsupported(&self, frame: &Frame, what: impl Into<String>) -> KernelError {
        KernelError::Unsupported {
            function: frame.function.clone(),
            what: what.into(),
        }
    }

    fn type_err(&self, frame: &Frame, detail: impl Into<String>) -> KernelError {
        KernelError::Type {
            function: frame.function.clone(),
            detail: detail.into(),
        }
    }

    /// Binds a signature's dimension names to positions; a name must keep its position.
    fn bind_dims(&self, frame: &mut Frame, dims: &[Dim]) -> Result<()> {
        for (i, d) in dims.iter().enumerate() {
            let Dim::Named(id) = d else {
                return Err(self.unsupported(frame, "a literal dimension size"));
            };
            if let Some(&pos) = frame.dims.get(id) {
                if pos != i {
                    return Err(self.unsupported(
                        frame,
                        format!("dimension `{id}` at two positions (shapes that are not prefixes of one another)"),
                    ));
                }
            } else if frame.dims.values().any(|&p| p == i) {
                return Err(self.unsupported(frame, format!("two names for axis {i} (`{id}`)")));
            }
            frame.dims.insert(id.clone(), i);
        }
        Ok(())
    }

    fn level_of(&self, v: Val) -> usize {
        self.node(v).level
    }

    fn elem(&self, v: Val) -> Elem {
        self.node(v).elem
    }

    fn node(&self, v: Val) -> &Node {
        match (&self.body, v.inner) {
            (Some(b), true) => &b.nodes[v.id],
            _ => &self.kernel.nodes[v.id],
        }
    }

    /// Adds a node to the current graph (the scan body while one is being built).
    fn push(&mut self, op: Op, elem: Elem, level: usize) -> Val {
        let key = match op {
            Op::Scan(_) => None,
            ref op => Some(format!("{op:?}{elem:?}{level}")),
        };
        let node = Node { op, elem, level };
        let (nodes, shared, inner) = match &mut self.body {
            Some(b) => (&mut b.nodes, &mut b.shared, true),
            None => (&mut self.kernel.nodes, &mut self.shared, false),
        };
        if let Some(key) = &key
            && let Some(&id) = shared.get(key)
        {
            return Val { id, inner };
        }
        nodes.push(node);
        let id = nodes.len() - 1;
        if let Some(key) = key {
            shared.insert(key, id);
        }
        Val { id, inner }
    }

    /// A value usable in the current graph: outer nodes enter a scan body through `Outer`.
    fn here(&mut self, frame: &Frame, v: Val) -> Result<Val> {
        match &self.body {
            Some(b) if !v.inner => {
                let (level, body_level) = (self.kernel.nodes[v.id].level, b.level);
                if level > body_level {
                    return Err(self.unsupported(
                        frame,
                        "a tensor of the scanned axis used whole in a scan body (index it: `x[t]`)",
                    ));
                }
                let elem = self.kernel.nodes[v.id].elem;
                Ok(self.push(Op::Outer(v.id), elem, level))
            }
            _ => Ok(v),
        }
    }

    fn constant(&mut self, x: f64, elem: Elem) -> Val {
        self.push(Op::Const(x), elem, 0)
    }

    /// A value as a node; a number becomes a constant of `elem`.
    /// Makes `value` the kernel's output `result`.
    fn output_result(&mut self, frame: &Frame, value: LVal) -> Result<()> {
        let node = self.node_of(frame, value, Elem::F32)?;
        let level = self.kernel.nodes[node.id].level;
        self.kernel.outputs.push(Output {
            name: "result".into(),
            node: node.id,
            level,
        });
        Ok(())
    }

    fn node_of(&mut self, frame: &Frame, v: LVal, elem: Elem) -> Result<Val> {
        match v {
            LVal::Node(n) => self.here(frame, n),
            LVal::Number(x) => Ok(self.constant(x, elem)),
            _ => Err(self.unsupported(frame, "a fn, module or scan position as a value")),
        }
    }

    fn cast(&mut self, v: Val, elem: Elem) -> Val {
        if self.elem(v) == elem {
            return v;
        }
        let level = self.level_of(v);
        self.push(Op::Unary(Un::Cast, v.id), elem, level)
    }

    fn unary(&mut self, op: Un, v: Val) -> Val {
        let (elem, level) = (self.elem(v), self.level_of(v));
        self.push(Op::Unary(op, v.id), elem, level)
    }

    fn binary(&mut self, op: Bin, a: Val, b: Val, elem: Elem) -> Val {
        let level = self.level_of(a).max(self.level_of(b));
        self.push(Op::Binary(op, a.id, b.id), elem, level)
    }

    fn select(&mut self, c: Val, a: Val, b: Val) -> Val {
        let level = self.level_of(c).max(self.level_of(a)).max(self.level_of(b));
        let elem = self.elem(a);
        self.push(Op::Select(c.id, a.id, b.id), elem, level)
    }

    fn default_of(
        &mut self,
        frame: &Frame,
        def: &FnBody,
        param: &body::Param,
        depth: usize,
    ) -> Result<LVal> {
        match &param.default {
            Some(d) => {
                let mut scope = Frame::new(frame.module, &def.name);
                self.expr(&mut scope, d, depth + 1)
            }
            None => Err(KernelError::MissingArgument {
                function: def.name.clone(),
                name: param.name.clone(),
            }),
        }
    }

    fn block(&mut self, frame: &mut Frame, block: &Block, depth: usize) -> Result<LVal> {
        frame.scopes.push(HashMap::new());
        let mut last = None;
        for stmt in &block.stmts {
            last = None;
            if self.binding(frame, stmt, depth)? {
                continue;
            }
            match stmt {
                Stmt::Expr(e) => last = Some(self.expr(frame, e, depth)?),
                Stmt::Emit(_) => {
                    return Err(self.unsupported(frame, "`emit` outside a scan"));
                }
                _ => return Err(self.unsupported(frame, "a pipeline statement in a fn")),
            }
        }
        frame.scopes.pop();
        last.ok_or_else(|| self.unsupported(frame, "a body without a final expression"))
    }

    fn expr(&mut self, frame: &mut Frame, e: &Expr, depth: usize) -> Result<LVal> {
        match &e.kind {
            ExprKind::Number(x) => Ok(LVal::Number(*x)),
            ExprKind::Bool(b) => Ok(LVal::Node(
                self.constant(f64::from(u8::from(*b)), Elem::Bool),
            )),
            ExprKind::Name(n) => self.name(frame, n, depth),
            ExprKind::Member { base, name } => match self.expr(frame, base, depth)? {
                LVal::Module(m) => match self.bodies.names[m].get(name) {
                    Some(&index) => self.item(frame, m, index, depth),
                    None => Err(KernelError::UnknownName {
                        function: frame.function.clone(),
                        name: name.clone(),
                    }),
                },
                LVal::Record(r) => self.field(frame, r, name),
                _ => Err(self.unsupported(frame, format!("the member `.{name}`"))),
            },
            ExprKind::Unary { op, operand, .. } => {
                let v = self.expr(frame, operand, depth)?;
                match (op, v) {
                    (UnaryOp::Neg, LVal::Number(x)) => Ok(LVal::Number(-x)),
                    (UnaryOp::Neg, LVal::Node(n)) if self.elem(n) != Elem::Bool => {
                        let n = self.here(frame, n)?;
                        Ok(LVal::Node(self.unary(Un::Neg, n)))
                    }
                    (UnaryOp::Not, LVal::Node(n)) if self.elem(n) == Elem::Bool => {
                        let n = self.here(frame, n)?;
                        Ok(LVal::Node(self.unary(Un::Not, n)))
                    }
                    (op, _) => Err(self.type_err(
                        frame,
                        format!("`{}` of a value of the wrong kind", op.as_str()),
                    )),
                }
            }
            ExprKind::Binary { op, lhs, rhs, .. } => {
                let l = self.expr(frame, lhs, depth)?;
                let r = self.expr(frame, rhs, depth)?;
                self.binary_op(frame, *op, l, r)
            }
            ExprKind::Index { base, indices } => {
                let b = self.expr(frame, base, depth)?;
                let [index] = indices.as_slice() else {
                    return Err(self.unsupported(frame, "indexing with several indices"));
                };
                let LVal::Position(axis) = self.expr(frame, index, depth)? else {
                    return Err(self.unsupported(frame, "indexing by anything but a scan position"));
                };
                let LVal::Node(b) = b else {
                    return Err(self.unsupported(frame, "indexing a value that is not a tensor"));
                };
                let body_level = self.body.as_ref().map(|b| b.level);
                if b.inner || body_level != Some(axis) || self.level_of(b) != axis + 1 {
                    return Err(self.unsupported(
                        frame,
                        "indexing a tensor that does not end with the scanned axis",
                    ));
                }
                let elem = self.elem(b);
                Ok(LVal::Node(self.push(Op::Column(b.id), elem, axis)))
            }
            ExprKind::Call {
                callee,
                args,
                closure,
            } => {
                if *closure {
                    return Err(self.unsupported(frame, "a call with a block"));
                }
                self.call(frame, callee, args, depth)
            }
            ExprKind::Scan(scan) => self.scan(frame, scan, depth),
            ExprKind::Str => Err(self.unsupported(frame, "a string")),
            ExprKind::Record => Err(self.unsupported(frame, "a record")),
            ExprKind::List => Err(self.unsupported(frame, "a list")),
        }
    }

    fn name(&mut self, frame: &mut Frame, name: &Name, depth: usize) -> Result<LVal> {
        if let Some(v) = frame.get(&name.name) {
            return Ok(v.clone());
        }
        match name.resolved {
            Resolved::Item { module, index } => self.item(frame, module, index, depth),
            Resolved::Module(m) => Ok(LVal::Module(m)),
            Resolved::Local | Resolved::Builtin | Resolved::Free => Err(KernelError::UnknownName {
                function: frame.function.clone(),
                name: name.name.clone(),
            }),
        }
    }

    fn item(&mut self, frame: &Frame, module: usize, index: usize, depth: usize) -> Result<LVal> {
        match self.bodies.items.get(&(module, index)) {
            Some(Item::Fn(_)) => Ok(LVal::Fn { module, index }),
            Some(Item::Const { name, value }) => {
                if depth > MAX_DEPTH {
                    return Err(self.unsupported(frame, "constants nested this deep"));
                }
                let mut scope = Frame::new(module, name);
                self.expr(&mut scope, value, depth + 1)
            }
            None => Err(self.unsupported(frame, "a non-fn item as a value")),
        }
    }

    /// The element type two operands meet at: floats win over integers.
    fn meet(&self, a: &LVal, b: &LVal) -> Elem {
        let elem = |v: &LVal| match v {
            LVal::Node(n) => Some(self.elem(*n)),
            _ => None,
        };
        match (elem(a), elem(b)) {
            (Some(Elem::F32), _) | (_, Some(Elem::F32)) => Elem::F32,
            (Some(x), None) | (None, Some(x)) => x,
            (Some(Elem::I32), Some(_)) | (Some(_), Some(Elem::I32)) => Elem::I32,
            (Some(Elem::Bool), Some(Elem::Bool)) => Elem::Bool,
            (None, None) => Elem::F32,
        }
    }

    fn binary_op(&mut self, frame: &Frame, op: BinaryOp, l: LVal, r: LVal) -> Result<LVal> {
        if let (LVal::Number(a), LVal::Number(b)) = (&l, &r) {
            let (a, b) = (*a, *b);
            let n = match op {
                BinaryOp::Add => Some(a + b),
                BinaryOp::Sub => Some(a - b),
                BinaryOp::Mul => Some(a * b),
                BinaryOp::Div => Some(a / b),
                BinaryOp::Rem => Some(a.rem_euclid(b)),
                _ => None,
            };
            if let Some(n) = n {
                return Ok(LVal::Number(n));
            }
        }
        let bin = match op {
            BinaryOp::Add => Bin::Add,
            BinaryOp::Sub => Bin::Sub,
            BinaryOp::Mul => Bin::Mul,
            BinaryOp::Div => Bin::Div,
            BinaryOp::Rem => Bin::Rem,
            BinaryOp::Eq => Bin::Eq,
            BinaryOp::Ne => Bin::Ne,
            BinaryOp::Lt => Bin::Lt,
            BinaryOp::Le => Bin::Le,
            BinaryOp::Gt => Bin::Gt,
            BinaryOp::Ge => Bin::Ge,
            BinaryOp::And => Bin::And,
            BinaryOp::Or => Bin::Or,
            BinaryOp::Range => return Err(self.unsupported(frame, "a range")),
        };
        let mut elem = self.meet(&l, &r);
        // A fraction next to an integer tensor makes the result a float.
        for v in [&l, &r] {
            if let LVal::Number(x) = v
                && elem == Elem::I32
                && x.fract() != 0.0
            {
                elem = Elem::F32;
            }
        }
        let logic = matches!(bin, Bin::And | Bin::Or);
        if !matches!(bin, Bin::Eq | Bin::Ne) && logic != (elem == Elem::Bool) {
            return Err(self.type_err(
                frame,
                format!("`{}` on values of type {}", op.as_str(), elem.name()),
            ));
        }
        if bin == Bin::Div && elem == Elem::I32 {
            elem = Elem::F32;
        }
        let a = self.node_of(frame, l, elem)?;
        let b = self.node_of(frame, r, elem)?;
        let (a, b) = (self.cast(a, elem), self.cast(b, elem));
        let out = if bin.is_comparison() || logic {
            Elem::Bool
        } else {
            elem
        };
        Ok(LVal::Node(self.binary(bin, a, b, out)))
    }

    fn call(
        &mut self,
        frame: &mut Frame,
        callee: &Expr,
        args: &[Arg],
        depth: usize,
    ) -> Result<LVal> {
        if let ExprKind::Name(id) = &callee.kind
            && id.resolved == Resolved::Builtin
            && frame.get(&id.name).is_none()
            && let Some(b) = builtins::lookup(&id.name)
        {
            return self.builtin(frame, &id.name, b, args, depth);
        }
        let LVal::Fn { module, index } = self.expr(frame, callee, depth)? else {
            return Err(self.type_err(frame, "calling a value that is not a fn"));
        };
        if depth > MAX_DEPTH {
            return Err(self.unsupported(frame, format!("calls nested deeper than {MAX_DEPTH}")));
        }
        let Some(Item::Fn(def)) = self.bodies.items.get(&(module, index)) else {
            return Err(self.type_err(frame, "calling a non-fn item"));
        };
        let names: Vec<&str> = def.params.iter().map(|p| p.name.as_str()).collect();
        let slots = match_args(&def.name, &names, args)?;
        let mut values = Vec::with_capacity(slots.len());
        for slot in slots {
            values.push(match slot {
                Some(e) => Some(self.expr(frame, e, depth)?),
                None => None,
            });
        }
        let mut inner = Frame::new(module, &def.name);
        for (param, value) in def.params.iter().zip(values) {
            let value = match value {
                Some(v) => v,
                None => self.default_of(&inner, def, param, depth)?,
            };
            self.check_param(&mut inner, param, &value)?;
            inner.bind(&param.name, value);
        }
        self.block(&mut inner, &def.body, depth + 1)
    }

    /// Checks an argument against its parameter's type and names the axes it brings.
    fn check_param(&mut self, frame: &mut Frame, param: &body::Param, value: &LVal) -> Result<()> {
        let Some(ty) = &param.ty else { return Ok(()) };
        let elem = elem_of(frame, ty)?;
        let LVal::Node(n) = value else {
            if let LVal::Number(_) = value
                && elem == Elem::Bool
            {
                return Err(self.type_err(
                    frame,
                    format!("`{}` takes booleans, got a number", param.name),
                ));
            }
            return Ok(());
        };
        if self.elem(*n) != elem {
            return Err(self.type_err(
                frame,
                format!(
                    "`{}: {}` got a {} value",
                    param.name,
                    ty.name,
                    self.elem(*n).name()
                ),
            ));
        }
        let dims = ty.dims.as_deref().unwrap_or(&[]);
        if dims.len() != self.level_of(*n) {
            return Err(self.type_err(
                frame,
                format!(
                    "`{}` has {} dimensions in the signature, the value {}",
                    param.name,
                    dims.len(),
                    self.level_of(*n)
                ),
            ));
        }
        self.bind_dims(frame, dims)
    }

    fn axis(&self, frame: &Frame, e: Option<&Expr>) -> Result<Option<usize>> {
        match e.map(|e| &e.kind) {
            None => Ok(None),
            Some(ExprKind::Name(id)) => frame
                .dims
                .get(&id.name)
                .copied()
                .map(Some)
                .ok_or_else(|| self.type_err(frame, format!("no axis `{}` here", id.name))),
            Some(_) => Err(self.unsupported(frame, "`over:` with anything but a dimension name")),
        }
    }

    fn tensor_arg(
        &mut self,
        frame: &mut Frame,
        e: Option<&Expr>,
        name: &str,
        fname: &str,
        depth: usize,
    ) -> Result<Val> {
        let e = e.ok_or_else(|| KernelError::MissingArgument {
            function: fname.to_string(),
            name: name.to_string(),
        })?;
        let v = self.expr(frame, e, depth)?;
        self.node_of(frame, v, Elem::F32)
    }

    fn builtin(
        &mut self,
        frame: &mut Frame,
        name: &str,
        b: Builtin,
        args: &[Arg],
        depth: usize,
    ) -> Result<LVal> {
        let names = builtins::params(b);
        let slots = match_args(name, names, args)?;
        let slot = |p: &str| names.iter().position(|n| *n == p).and_then(|i| slots[i]);
        let required = |p: &str| {
            slot(p).ok_or_else(|| KernelError::MissingArgument {
                function: name.to_string(),
                name: p.to_string(),
            })
        };
        match b {
            Builtin::Unary(u) => {
                let x = self.expr(frame, required("x")?, depth)?;
                if let LVal::Number(x) = x {
                    let folded = match u {
                        Unary::Exp => x.exp(),
                        Unary::Log => x.ln(),
                        Unary::Abs => x.abs(),
                        Unary::Sqrt => x.sqrt(),
                        Unary::Rsqrt => 1.0 / x.sqrt(),
                        Unary::Sigmoid => 1.0 / (1.0 + (-x).exp()),
                        Unary::Tanh => x.tanh(),
                        Unary::StopGrad => x,
                    };
                    return Ok(LVal::Number(folded));
                }
                let x = self.node_of(frame, x, Elem::F32)?;
                if self.elem(x) == Elem::Bool {
                    return Err(
                        self.type_err(frame, format!("`{name}` of a mask (cast it with `f32(…)`)"))
                    );
                }
                let op = match u {
                    Unary::Exp => Un::Exp,
                    Unary::Log => Un::Log,
                    Unary::Abs => Un::Abs,
                    Unary::Sqrt => Un::Sqrt,
                    Unary::Rsqrt => Un::Rsqrt,
                    Unary::Sigmoid => Un::Sigmoid,
                    Unary::Tanh => Un::Tanh,
                    Unary::StopGrad => Un::StopGrad,
                };
                let x = if matches!(op, Un::Abs | Un::StopGrad) {
                    x
                } else {
                    self.cast(x, Elem::F32)
                };
                Ok(LVal::Node(self.unary(op, x)))
            }
            Builtin::Cast(c) => {
                let x = self.expr(frame, required("x")?, depth)?;
                let elem = match c {
                    Cast::Float => Elem::F32,
                    Cast::Int => Elem::I32,
                    Cast::Bool => Elem::Bool,
                };
                let x = self.node_of(frame, x, elem)?;
                Ok(LVal::Node(self.cast(x, elem)))
            }
            Builtin::Where => {
                let c = self.expr(frame, required("cond")?, depth)?;
                let c = match c {
                    LVal::Node(n) if self.elem(n) == Elem::Bool => self.here(frame, n)?,
                    _ => return Err(self.type_err(frame, "a mask (`bool` tensor) is needed here")),
                };
                let a = self.expr(frame, required("then")?, depth)?;
                let o = self.expr(frame, required("otherwise")?, depth)?;
                let elem = self.meet(&a, &o);
                let a = self.node_of(frame, a, elem)?;
                let o = self.node_of(frame, o, elem)?;
                let (a, o) = (self.cast(a, elem), self.cast(o, elem));
                Ok(LVal::Node(self.select(c, a, o)))
            }
            Builtin::Pow => {
                let x = self.expr(frame, required("x")?, depth)?;
                let p = self.expr(frame, required("p")?, depth)?;
                if let (LVal::Number(x), LVal::Number(p)) = (&x, &p) {
                    return Ok(LVal::Number(x.powf(*p)));
                }
                let x = self.node_of(frame, x, Elem::F32)?;
                let p = self.node_of(frame, p, Elem::F32)?;
                let (x, p) = (self.cast(x, Elem::F32), self.cast(p, Elem::F32));
                Ok(LVal::Node(self.binary(Bin::Pow, x, p, Elem::F32)))
            }
            Builtin::Clamp => {
                let x = self.expr(frame, required("x")?, depth)?;
                let lo = self.expr(frame, required("lo")?, depth)?;
                let hi = self.expr(frame, required("hi")?, depth)?;
                if let (LVal::Number(x), LVal::Number(lo), LVal::Number(hi)) = (&x, &lo, &hi) {
                    return Ok(LVal::Number(x.max(*lo).min(*hi)));
                }
                // As torch's clamp, `min(max(x, lo), hi)`: NaN stays NaN, the derivative
                // passes at the bounds, `lo > hi` gives `hi`. Each select compares the value it
                // passes on, the form x86's `maxps`/`minps` implement in one instruction.
                let elem = self.meet(&x, &lo);
                if elem == Elem::Bool {
                    return Err(self.type_err(frame, "`clamp` of a mask"));
                }
                let x = self.node_of(frame, x, elem)?;
                let lo = self.node_of(frame, lo, elem)?;
                let hi = self.node_of(frame, hi, elem)?;
                let (x, lo, hi) = (self.cast(x, elem), self.cast(lo, elem), self.cast(hi, elem));
                let below = self.binary(Bin::Lt, x, lo, Elem::Bool);
                let raised = self.select(below, lo, x);
                let above = self.binary(Bin::Gt, raised, hi, Elem::Bool);
                Ok(LVal::Node(self.select(above, hi, raised)))
            }
            Builtin::Min | Builtin::Max => {
                let bin = if b == Builtin::Min {
                    Bin::Min
                } else {
                    Bin::Max
                };
                let x = self.expr(frame, required("x")?, depth)?;
                if let Some(y) = slot("y") {
                    let y = self.expr(frame, y, depth)?;
                    return self.binary_min_max(frame, bin, x, y);
                }
                let x = self.node_of(frame, x, Elem::F32)?;
                let mask = self.mask_arg(frame, slot("mask"), depth)?;
                let over = self.axis(frame, slot("over"))?;
                let red = if b == Builtin::Min {
                    Red::Min
                } else {
                    Red::Max
                };
                Ok(LVal::Node(self.reduce(frame, red, x, mask, over)?))
            }
            Builtin::Sum | Builtin::Mean => {
                let x = self.tensor_arg(frame, slot("x"), "x", name, depth)?;
                let mask = self.mask_arg(frame, slot("mask"), depth)?;
                let over = self.axis(frame, slot("over"))?;
                let sum = self.reduce(frame, Red::Sum, x, mask, over)?;
                if b == Builtin::Sum {
                    return Ok(LVal::Node(sum));
                }
                let count = self.count(frame, x, mask, over)?;
                let one = self.constant(1.0, Elem::F32);
                let count = self.binary(Bin::Max, count, one, Elem::F32);
                Ok(LVal::Node(self.binary(Bin::Div, sum, count, Elem::F32)))
            }
            Builtin::Count => {
                let m = self.mask_arg(frame, slot("m"), depth)?.ok_or_else(|| {
                    KernelError::MissingArgument {
                        function: name.to_string(),
                        name: "m".into(),
                    }
                })?;
                let over = self.axis(frame, slot("over"))?;
                Ok(LVal::Node(self.count(frame, m, Some(m), over)?))
            }
            Builtin::LogSumExp | Builtin::Softmax => {
                let z = self.tensor_arg(frame, slot("z"), "z", name, depth)?;
                let z = self.cast(z, Elem::F32);
                let over = self.axis(frame, slot("over"))?.ok_or_else(|| {
                    KernelError::MissingArgument {
                        function: name.to_string(),
                        name: "over".into(),
                    }
                })?;
                // The maximum only shifts the exponentials: its derivative cancels out.
                let mx = self.reduce(frame, Red::Max, z, None, Some(over))?;
                let mx = self.unary(Un::StopGrad, mx);
                let shifted = self.binary(Bin::Sub, z, mx, Elem::F32);
                let e = self.unary(Un::Exp, shifted);
                let s = self.reduce(frame, Red::Sum, e, None, Some(over))?;
                let log = self.unary(Un::Log, s);
                let lse = self.binary(Bin::Add, mx, log, Elem::F32);
                if b == Builtin::LogSumExp {
                    return Ok(LVal::Node(lse));
                }
                let d = self.binary(Bin::Sub, z, lse, Elem::F32);
                Ok(LVal::Node(self.unary(Un::Exp, d)))
            }
            Builtin::GroupSum | Builtin::GroupMean | Builtin::GroupStd | Builtin::GroupCount => {
                if self.body.is_some() {
                    return Err(self.unsupported(frame, "a group reduction in a scan body"));
                }
                let by = self.expr(frame, required("by")?, depth)?;
                let by = match by {
                    LVal::Node(n) if self.elem(n) == Elem::I32 && self.level_of(n) == 1 => n,
                    _ => {
                        return Err(
                            self.type_err(frame, "`by:` takes one integer group id per row")
                        );
                    }
                };
                let op = match b {
                    Builtin::GroupSum => GroupOp::Sum,
                    Builtin::GroupMean => GroupOp::Mean,
                    Builtin::GroupStd => GroupOp::Std,
                    _ => GroupOp::Count,
                };
                let x = match op {
                    GroupOp::Count => None,
                    _ => {
                        let x = self.tensor_arg(frame, slot("x"), "x", name, depth)?;
                        if self.level_of(x) != 1 {
                            return Err(
                                self.type_err(frame, "a group reduction needs one value per row")
                            );
                        }
                        Some(self.cast(x, Elem::F32).id)
                    }
                };
                Ok(LVal::Node(self.push(
                    Op::Group { op, x, by: by.id },
                    Elem::F32,
                    1,
                )))
            }
        }
    }

    /// `min`/`max` of two values, element-wise.
    fn binary_min_max(&mut self, frame: &Frame, bin: Bin, x: LVal, y: LVal) -> Result<LVal> {
        if let (LVal::Number(a), LVal::Number(b)) = (&x, &y) {
            return Ok(LVal::Number(if bin == Bin::Min {
                a.min(*b)
            } else {
                a.max(*b)
            }));
        }
        let elem = self.meet(&x, &y);
        if elem == Elem::Bool {
            return Err(self.type_err(frame, "`min`/`max` of masks"));
        }
        let a = self.node_of(frame, x, elem)?;
        let b = self.node_of(frame, y, elem)?;
        let (a, b) = (self.cast(a, elem), self.cast(b, elem));
        Ok(LVal::Node(self.binary(bin, a, b, elem)))
    }

    fn mask_arg(
        &mut self,
        frame: &mut Frame,
        e: Option<&Expr>,
        depth: usize,
    ) -> Result<Option<Val>> {
        let Some(e) = e else { return Ok(None) };
        match self.expr(frame, e, depth)? {
            LVal::Node(n) if self.elem(n) == Elem::Bool => Ok(Some(self.here(frame, n)?)),
            _ => Err(self.type_err(frame, "a mask (`bool` tensor) is needed here")),
        }
    }

    /// A reduction of `x` over axis `over` (every axis when `None`) where `mask` is true.
    fn reduce(
        &mut self,
        frame: &Frame,
        op: Red,
        x: Val,
        mask: Option<Val>,
        over: Option<usize>,
    ) -> Result<Val> {
        if self.body.is_some() {
            return Err(self.unsupported(frame, "a reduction in a scan body"));
        }
        let x = self.cast(x, Elem::F32);
        let level = self.level_of(x).max(mask.map_or(0, |m| self.level_of(m)));
        if let Some(m) = mask
            && self.level_of(m) > self.level_of(x)
        {
            return Err(self.type_err(frame, "the mask has more dimensions than the reduced value"));
        }
        match over {
            Some(axis) => {
                if axis + 1 != level {
                    return Err(self.unsupported(
                        frame,
                        "a reduction over an axis that is not the value's last",
                    ));
                }
                Ok(self.push(
                    Op::Reduce {
                        op,
                        x: x.id,
                        mask: mask.map(|m| m.id),
                    },
                    Elem::F32,
                    axis,
                ))
            }
            None => {
                if level == 0 {
                    return Ok(x);
                }
                // The last axis with the mask, then the others; a row without a selected
                // position takes no part in a max or min.
                let mut r = self.push(
                    Op::Reduce {
                        op,
                        x: x.id,
                        mask: mask.map(|m| m.id),
                    },
                    Elem::F32,
                    level - 1,
                );
                let mut any = match mask {
                    Some(m) if op != Red::Sum => {
                        let one = self.constant(1.0, Elem::F32);
                        let c = self.push(
                            Op::Reduce {
                                op: Red::Sum,
                                x: one.id,
                                mask: Some(m.id),
                            },
                            Elem::F32,
                            level - 1,
                        );
                        let zero = self.constant(0.0, Elem::F32);
                        Some(self.binary(Bin::Gt, c, zero, Elem::Bool))
                    }
                    _ => None,
                };
                for l in (0..level - 1).rev() {
                    let m = if op == Red::Sum { None } else { any };
                    r = self.push(
                        Op::Reduce {
                            op,
                            x: r.id,
                            mask: m.map(|m| m.id),
                        },
                        Elem::F32,
                        l,
                    );
                    if let Some(a) = any {
                        let f = self.cast(a, Elem::F32);
                        let c = self.push(
                            Op::Reduce {
                                op: Red::Max,
                                x: f.id,
                                mask: None,
                            },
                            Elem::F32,
                            l,
                        );
                        let zero = self.constant(0.0, Elem::F32);
                        any = Some(self.binary(Bin::Gt, c, zero, Elem::Bool));
                    }
                }
                Ok(r)
            }
        }
    }

    /// The number of selected positions of `like`'s shape (all of them without a mask).
    fn count(
        &mut self,
        frame: &Frame,
        like: Val,
        mask: Option<Val>,
        over: Option<usize>,
    ) -> Result<Val> {
        let level = self
            .level_of(like)
            .max(mask.map_or(0, |m| self.level_of(m)));
        match mask {
            Some(m) => {
                // Reduce operands broadcast to the reduced level: a masked sum of the
                // number 1 counts the mask's true entries over `like`'s shape.
                let ones = self.constant(1.0, Elem::F32);
                self.reduce_ones(frame, ones, m, level, over)
            }
            None => {
                let axes: Vec<usize> = match over {
                    Some(a) => vec![a],
                    None => (0..level).collect(),
                };
                let mut n = self.constant(1.0, Elem::F32);
                for a in axes {
                    let s = self.push(Op::AxisSize(a), Elem::F32, 0);
                    n = self.binary(Bin::Mul, n, s, Elem::F32);
                }
                Ok(n)
            }
        }
    }

    fn reduce_ones(
        &mut self,
        frame: &Frame,
        ones: Val,
        m: Val,
        level: usize,
        over: Option<usize>,
    ) -> Result<Val> {
        if level == 0 {
            return Ok(self.cast(m, Elem::F32));
        }
        match over {
            Some(axis) => {
                if axis + 1 != level {
                    return Err(self
                        .unsupported(frame, "a count over an axis that is not the value's last"));
                }
                Ok(self.push(
                    Op::Reduce {
                        op: Red::Sum,
                        x: ones.id,
                        mask: Some(m.id),
                    },
                    Elem::F32,
                    axis,
                ))
            }
            None => {
                let mut r = self.push(
                    Op::Reduce {
                        op: Red::Sum,
                        x: ones.id,
                        mask: Some(m.id),
                    },
                    Elem::F32,
                    level.saturating_sub(1),
                );
                for l in (0..level.saturating_sub(1)).rev() {
                    r = self.push(
                        Op::Reduce {
                            op: Red::Sum,
                            x: r.id,
                            mask: None,
                        },
                        Elem::F32,
                        l,
                    );
                }
                Ok(r)
            }
        }
    }

    fn scan(&mut self, frame: &mut Frame, scan: &body::Scan, depth: usize) -> Result<LVal> {
        if self.body.is_some() {
            return Err(self.unsupported(frame, "a scan inside a scan"));
        }
        let axis = *frame
            .dims
            .get(&scan.axis)
            .ok_or_else(|| self.type_err(frame, format!("no axis `{}` here", scan.axis)))?;
        let mut inits = Vec::new();
        for (_, init) in &scan.carries {
            let v = self.expr(frame, init, depth)?;
            let n = self.node_of(frame, v, Elem::F32)?;
            if self.level_of(n) > axis {
                return Err(self.unsupported(frame, "a carry with the scanned axis"));
            }
            inits.push(n);
        }
        self.body = Some(Body {
            level: axis,
            nodes: Vec::new(),
            shared: HashMap::new(),
        });
        frame.scopes.push(HashMap::new());
        for (i, (c, init)) in scan.carries.iter().zip(&inits).enumerate() {
            let elem = self.kernel.nodes[init.id].elem;
            let carry = self.push(Op::Carry(i), elem, axis);
            frame.bind(&c.0, LVal::Node(carry));
        }
        frame.bind(&scan.index, LVal::Position(axis));
        let result = self.scan_body(frame, scan, depth);
        let carries: Vec<Option<LVal>> = scan
            .carries
            .iter()
            .map(|c| frame.get(&c.0).cloned())
            .collect();
        frame.scopes.pop();
        let emit = result?;
        let mut next = Vec::new();
        for (c, init) in carries.into_iter().zip(&inits) {
            let elem = self.kernel.nodes[init.id].elem;
            let v = c.ok_or_else(|| self.type_err(frame, "a lost carry"))?;
            let n = self.node_of(frame, v, elem)?;
            next.push(self.cast(n, elem).id);
        }
        let emit = self.node_of(frame, emit, Elem::F32)?;
        let elem = self.elem(emit);
        let body = self.body.take().map(|b| b.nodes).unwrap_or_default();
        let node = Scan {
            reverse: scan.direction == ScanDirection::Reverse,
            inits: inits.iter().map(|v| v.id).collect(),
            body,
            next,
            emit: emit.id,
        };
        Ok(LVal::Node(self.push(
            Op::Scan(Box::new(node)),
            elem,
            axis + 1,
        )))
    }

    /// Runs `stmt` if it is a `let` or an assignment (as a fn body and a scan step both do):
    /// `Ok(true)` when it was one.
    fn binding(&mut self, frame: &mut Frame, stmt: &Stmt, depth: usize) -> Result<bool> {
        match stmt {
            Stmt::Let { name, value } => {
                let v = self.expr(frame, value, depth)?;
                frame.bind(name, v);
            }
            Stmt::Assign { name, value } => {
                let v = self.expr(frame, value, depth)?;
                if !frame.assign(name, v) {
                    return Err(self.type_err(frame, format!("assignment to unknown `{name}`")));
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn scan_body(&mut self, frame: &mut Frame, scan: &body::Scan, depth: usize) -> Result<LVal> {
        let mut emitted = None;
        for stmt in &scan.body.stmts {
            if self.binding(frame, stmt, depth)? {
                continue;
            }
            match stmt {
                Stmt::Emit(value) => {
                    if emitted.is_some() {
                        return Err(self.type_err(frame, "a scan step emits twice"));
                    }
                    emitted = Some(self.expr(frame, value, depth)?);
                }
                Stmt::Expr(e) => {
                    self.expr(frame, e, depth)?;
                }
                _ => return Err(self.unsupported(frame, "a pipeline statement in a scan")),
            }
        }
        emitted.ok_or_else(|| self.type_err(frame, "a scan step without `emit`"))
    }
}

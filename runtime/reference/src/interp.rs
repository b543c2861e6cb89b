//! Evaluation of `fn` bodies: names, operators, calls of other `fn`s (parameters bound and
//! dimension names translated at the boundary), `let`, and scans.

use super::error::{EvalError, Result};
use super::frame::Frame;
use super::value::{Named, Numeric, Value, align, is_float, is_int};
use rlc_check::modules::{Binding, Modules};
use rlc_syntax::ast::{
    Arg, BinaryOp, Block, Dim, Expr, ExprKind, FnDef, ItemKind, Scan, ScanDirection, StmtKind,
    TypeExpr, UnaryOp,
};
use std::collections::HashMap;
use tch::{Kind, Tensor};

/// Calls nested deeper than this are reported instead of overflowing the stack.
const MAX_DEPTH: usize = 64;

pub struct Interp<'m> {
    pub modules: &'m Modules,
    pub num: Numeric,
}

/// The element types a parameter's type admits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Elem {
    Float,
    Int,
    Bool,
}

fn elem_of(ty: &TypeExpr) -> Option<Elem> {
    match ty.name.name.as_str() {
        "f32" | "f16" | "bf16" => Some(Elem::Float),
        "i32" | "i64" | "Tokens" => Some(Elem::Int),
        "bool" | "Mask" => Some(Elem::Bool),
        _ => None,
    }
}

fn admits(elem: Elem, kind: Kind) -> bool {
    match elem {
        Elem::Float => is_float(kind),
        Elem::Int => is_int(kind),
        Elem::Bool => kind == Kind::Bool,
    }
}

impl<'m> Interp<'m> {
    pub fn fn_def(&self, module: usize, index: usize) -> Option<&'m FnDef> {
        match &self.modules.get(module).item(index).kind {
            ItemKind::Fn(f) => Some(f),
            _ => None,
        }
    }

    pub(super) fn err_unsupported(&self, frame: &Frame, what: impl Into<String>) -> EvalError {
        EvalError::Unsupported {
            function: frame.function.clone(),
            what: what.into(),
        }
    }

    /// Evaluates `def` (item of `module`) on arguments already matched to its parameters
    /// (`None`: take the default). Returns the value with its dimensions in the callee's names,
    /// and the translation of those names to the caller's.
    pub fn call_fn(
        &self,
        module: usize,
        def: &FnDef,
        args: Vec<Option<Value>>,
        depth: usize,
    ) -> Result<(Value, HashMap<String, String>)> {
        if depth > MAX_DEPTH {
            return Err(EvalError::TooDeep(MAX_DEPTH));
        }
        let mut frame = Frame::new(module, &def.name.name);
        let mut to_caller = HashMap::new();
        for (param, arg) in def.params.iter().zip(args) {
            let value = match arg {
                Some(v) => v,
                None => match &param.default {
                    Some(d) => {
                        let mut scope = Frame::new(module, &def.name.name);
                        self.expr(&mut scope, d, depth + 1)?
                    }
                    None => {
                        return Err(EvalError::MissingArgument {
                            function: def.name.name.clone(),
                            name: param.name.name.clone(),
                        });
                    }
                },
            };
            let value = self.bind_param(&mut frame, param, value, &mut to_caller)?;
            frame.bind(&param.name.name, value);
        }
        let value = self.block(&mut frame, &def.body, depth + 1)?;
        Ok((value, to_caller))
    }

    /// Checks a value against a parameter's declared type and relabels its axes with the
    /// signature's dimension names.
    fn bind_param(
        &self,
        frame: &mut Frame,
        param: &rlc_syntax::ast::Param,
        value: Value,
        to_caller: &mut HashMap<String, String>,
    ) -> Result<Value> {
        let Some(ty) = &param.ty else {
            return Ok(value);
        };
        let name = &param.name.name;
        let function = frame.function.clone();
        let shape_err = |detail: String| EvalError::ShapeMismatch {
            function: function.clone(),
            detail,
        };
        let Some(elem) = elem_of(ty) else {
            return Err(self.err_unsupported(
                frame,
                format!("parameter `{name}` of type `{}`", ty.name.name),
            ));
        };
        let named = match value {
            Value::Number(x) => {
                return if elem == Elem::Bool {
                    Err(EvalError::DtypeMismatch {
                        function: frame.function.clone(),
                        detail: format!("`{name}` takes booleans, got the number {x}"),
                    })
                } else {
                    Ok(Value::Number(x))
                };
            }
            Value::Tensor(t) => t,
            _ => return Err(shape_err(format!("`{name}` needs a tensor or a number"))),
        };
        let kind = named.kind()?;
        if !admits(elem, kind) {
            return Err(EvalError::DtypeMismatch {
                function: frame.function.clone(),
                detail: format!("`{name}: {}` got a {kind:?} tensor", ty.name.name),
            });
        }
        let dims = ty.dims.as_deref().unwrap_or(&[]);
        let size = named.tensor.size();
        if size.len() != dims.len() {
            return Err(shape_err(format!(
                "`{name}` has {} dimensions in the signature, the tensor has shape {size:?}",
                dims.len()
            )));
        }
        let mut labels = Vec::with_capacity(dims.len());
        for (i, d) in dims.iter().enumerate() {
            let label = match d {
                Dim::Named(id) => {
                    frame.bind_size(&id.name, size[i], &format!("`{name}`"))?;
                    id.name.clone()
                }
                Dim::Size(n, _) => {
                    if *n as i64 != size[i] {
                        return Err(shape_err(format!(
                            "axis {i} of `{name}` must have size {n}, has {}",
                            size[i]
                        )));
                    }
                    n.to_string()
                }
            };
            if let Some(caller) = named.dims.get(i) {
                to_caller.insert(label.clone(), caller.clone());
            }
            labels.push(label);
        }
        Ok(Value::Tensor(Named::new(named.tensor, labels)))
    }

    /// A block's statements in order; its value is the last expression.
    pub fn block(&self, frame: &mut Frame, block: &Block, depth: usize) -> Result<Value> {
        frame.push();
        let mut last = None;
        for stmt in &block.stmts {
            last = None;
            match &stmt.kind {
                StmtKind::Let { name, value, .. } => {
                    let v = self.expr(frame, value, depth)?;
                    frame.bind(&name.name, v);
                }
                StmtKind::Assign { name, value } => {
                    let v = self.expr(frame, value, depth)?;
                    frame.assign(&name.name, v)?;
                }
                StmtKind::Expr(e) => last = Some(self.expr(frame, e, depth)?),
                StmtKind::Emit { .. } => {
                    return Err(EvalError::Scan {
                        function: frame.function.clone(),
                        detail: "`emit` outside a scan".into(),
                    });
                }
                _ => return Err(self.err_unsupported(frame, "a pipeline statement in a fn")),
            }
        }
        frame.pop();
        last.ok_or_else(|| self.err_unsupported(frame, "a body without a final expression"))
    }

    pub fn expr(&self, frame: &mut Frame, e: &Expr, depth: usize) -> Result<Value> {
        match &e.kind {
            ExprKind::Number(n) => Ok(Value::Number(n.scaled())),
            ExprKind::Bool(b) => Ok(Value::Tensor(self.num.boolean(*b)?)),
            ExprKind::Name(id) => self.name(frame, &id.name, depth),
            ExprKind::Paren(inner) => self.expr(frame, inner, depth),
            ExprKind::Member { base, name } => match self.expr(frame, base, depth)? {
                Value::Module(m) => match self.modules.get(m).items.get(&name.name) {
                    Some(&index) => self.item(frame, m, index, depth),
                    None => Err(EvalError::UnknownName {
                        function: frame.function.clone(),
                        name: name.name.clone(),
                    }),
                },
                Value::Record(fields) => fields
                    .iter()
                    .find(|(field, _)| *field == name.name)
                    .map(|(_, t)| Value::Tensor(t.clone()))
                    .ok_or_else(|| EvalError::UnknownName {
                        function: frame.function.clone(),
                        name: name.name.clone(),
                    }),
                _ => Err(self.err_unsupported(frame, format!("the member `.{}`", name.name))),
            },
            ExprKind::Unary { op, operand, .. } => {
                let v = self.expr(frame, operand, depth)?;
                self.unary(frame, *op, v)
            }
            ExprKind::Binary { op, lhs, rhs, .. } => {
                let l = self.expr(frame, lhs, depth)?;
                let r = self.expr(frame, rhs, depth)?;
                self.binary(frame, *op, l, r)
            }
            ExprKind::Index { base, indices } => {
                let b = self.expr(frame, base, depth)?;
                self.index(frame, b, indices, depth)
            }
            ExprKind::Call {
                callee,
                args,
                closure,
            } => {
                if closure.is_some() {
                    return Err(self.err_unsupported(frame, "a call with a block"));
                }
                self.call(frame, callee, args, depth)
            }
            ExprKind::Scan(scan) => self.scan(frame, scan, depth),
            ExprKind::Str(_) => Err(self.err_unsupported(frame, "a string")),
            ExprKind::Record(_) => Err(self.err_unsupported(frame, "a record")),
            ExprKind::List(_) => Err(self.err_unsupported(frame, "a list")),
        }
    }

    fn name(&self, frame: &mut Frame, name: &str, depth: usize) -> Result<Value> {
        if let Some(v) = frame.get(name) {
            return Ok(v.clone());
        }
        match self.modules.get(frame.module).lookup(frame.module, name) {
            Some(Binding::Item { module, index }) => self.item(frame, module, index, depth),
            Some(Binding::Module(m)) => Ok(Value::Module(m)),
            None => Err(EvalError::UnknownName {
                function: frame.function.clone(),
                name: name.to_string(),
            }),
        }
    }

    /// A module item used as a value: a `fn` (to call) or a constant `let` (evaluated).
    fn item(&self, frame: &Frame, module: usize, index: usize, depth: usize) -> Result<Value> {
        match &self.modules.get(module).item(index).kind {
            ItemKind::Fn(_) => Ok(Value::Fn { module, index }),
            ItemKind::Const(c) => {
                if depth > MAX_DEPTH {
                    return Err(EvalError::TooDeep(MAX_DEPTH));
                }
                let mut scope = Frame::new(module, &c.name.name);
                self.expr(&mut scope, &c.value, depth + 1)
            }
            _ => Err(self.err_unsupported(
                frame,
                format!(
                    "a `{}` item as a value",
                    self.modules.get(module).item(index).keyword()
                ),
            )),
        }
    }

    fn call(&self, frame: &mut Frame, callee: &Expr, args: &[Arg], depth: usize) -> Result<Value> {
        if let ExprKind::Name(id) = &callee.kind {
            let shadowed = frame.get(&id.name).is_some()
                || self
                    .modules
                    .get(frame.module)
                    .lookup(frame.module, &id.name)
                    .is_some();
            if !shadowed && let Some(b) = super::builtins::lookup(&id.name) {
                return self.builtin(frame, &id.name, b, args, depth);
            }
        }
        let Value::Fn { module, index } = self.expr(frame, callee, depth)? else {
            return Err(EvalError::NotCallable {
                function: frame.function.clone(),
                name: describe(callee),
            });
        };
        let def = self
            .fn_def(module, index)
            .ok_or_else(|| self.err_unsupported(frame, "calling a non-fn item"))?;
        let names: Vec<&str> = def.params.iter().map(|p| p.name.name.as_str()).collect();
        let slots = match_args(&def.name.name, &names, args)?;
        let mut values = Vec::with_capacity(slots.len());
        for slot in slots {
            values.push(match slot {
                Some(e) => Some(self.expr(frame, e, depth)?),
                None => None,
            });
        }
        let (value, to_caller) = self.call_fn(module, def, values, depth + 1)?;
        Ok(match value {
            Value::Tensor(mut t) => {
                for d in &mut t.dims {
                    if let Some(c) = to_caller.get(d) {
                        d.clone_from(c);
                    }
                }
                Value::Tensor(t)
            }
            other => other,
        })
    }

    /// A value as a labelled tensor; a number becomes a 0-d tensor of `like`'s element type.
    pub fn tensor(&self, frame: &Frame, v: &Value, like: Option<&Named>) -> Result<Named> {
        match v {
            Value::Tensor(t) => Ok(t.clone()),
            Value::Number(x) => {
                let like = match like {
                    Some(t) => Some((t.kind()?, t.tensor.device())),
                    None => None,
                };
                self.num.literal(*x, like)
            }
            _ => Err(self.err_unsupported(frame, "a scan position, fn or module as a tensor")),
        }
    }

    /// Values as tensors brought to one shape (numbers take the type of the first tensor).
    pub fn aligned(&self, frame: &Frame, vs: &[&Value]) -> Result<(Vec<Tensor>, Vec<String>)> {
        let like = vs.iter().find_map(|v| match v {
            Value::Tensor(t) => Some(t.clone()),
            _ => None,
        });
        let named = vs
            .iter()
            .map(|v| self.tensor(frame, v, like.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Named> = named.iter().collect();
        align(&refs, &frame.function)
    }

    fn unary(&self, frame: &Frame, op: UnaryOp, v: Value) -> Result<Value> {
        match (op, v) {
            (UnaryOp::Neg, Value::Number(x)) => Ok(Value::Number(-x)),
            (UnaryOp::Neg, Value::Tensor(t)) => {
                self.expect_numeric(frame, &t, "-")?;
                Ok(Value::Tensor(Named::new(t.tensor.f_neg()?, t.dims)))
            }
            (UnaryOp::Not, Value::Tensor(t)) if t.kind()? == Kind::Bool => {
                Ok(Value::Tensor(Named::new(t.tensor.f_logical_not()?, t.dims)))
            }
            (op, _) => Err(EvalError::DtypeMismatch {
                function: frame.function.clone(),
                detail: format!("`{}` of a value of the wrong kind", op.as_str()),
            }),
        }
    }

    fn expect_numeric(&self, frame: &Frame, t: &Named, op: &str) -> Result<()> {
        if t.kind()? == Kind::Bool {
            return Err(EvalError::DtypeMismatch {
                function: frame.function.clone(),
                detail: format!("arithmetic `{op}` on a mask (cast it with `f32(…)`)"),
            });
        }
        Ok(())
    }

    fn binary(&self, frame: &Frame, op: BinaryOp, l: Value, r: Value) -> Result<Value> {
        use BinaryOp::*;
        if let (Value::Number(a), Value::Number(b)) = (&l, &r) {
            let (a, b) = (*a, *b);
            let n = match op {
                Add => Some(a + b),
                Sub => Some(a - b),
                Mul => Some(a * b),
                Div => Some(a / b),
                Rem => Some(a.rem_euclid(b)),
                _ => None,
            };
            if let Some(n) = n {
                return Ok(Value::Number(n));
            }
            let c = match op {
                Eq => a == b,
                Ne => a != b,
                Lt => a < b,
                Le => a <= b,
                Gt => a > b,
                Ge => a >= b,
                _ => return Err(self.err_unsupported(frame, format!("`{}`", op.as_str()))),
            };
            return Ok(Value::Tensor(self.num.boolean(c)?));
        }
        let (ts, dims) = self.aligned(frame, &[&l, &r])?;
        let (a, b) = (&ts[0], &ts[1]);
        let (ka, kb) = (a.f_kind()?, b.f_kind()?);
        let logic = matches!(op, And | Or);
        if logic != (ka == Kind::Bool && kb == Kind::Bool) && !matches!(op, Eq | Ne) {
            return Err(EvalError::DtypeMismatch {
                function: frame.function.clone(),
                detail: format!("`{}` on {ka:?} and {kb:?} values", op.as_str()),
            });
        }
        let t = match op {
            Add => a.f_add(b)?,
            Sub => a.f_sub(b)?,
            Mul => a.f_mul(b)?,
            Div => a.f_div(b)?,
            Rem => a.f_remainder_tensor(b)?,
            Eq => a.f_eq_tensor(b)?,
            Ne => a.f_ne_tensor(b)?,
            Lt => a.f_lt_tensor(b)?,
            Le => a.f_le_tensor(b)?,
            Gt => a.f_gt_tensor(b)?,
            Ge => a.f_ge_tensor(b)?,
            And => a.f_logical_and(b)?,
            Or => a.f_logical_or(b)?,
            Range => return Err(self.err_unsupported(frame, "a range")),
        };
        Ok(Value::Tensor(Named::new(t, dims)))
    }

    /// `x[t]` with `t` the position of a scan: the column of `x` at `t` along the scan's axis.
    fn index(
        &self,
        frame: &mut Frame,
        base: Value,
        indices: &[Expr],
        depth: usize,
    ) -> Result<Value> {
        let Value::Tensor(t) = base else {
            return Err(self.err_unsupported(frame, "indexing a value that is not a tensor"));
        };
        let [index] = indices else {
            return Err(self.err_unsupported(frame, "indexing with several indices"));
        };
        let Value::Index { axis, pos } = self.expr(frame, index, depth)? else {
            return Err(self.err_unsupported(frame, "indexing by anything but a scan position"));
        };
        let dim = t.axis(&axis, &frame.function)?;
        let mut dims = t.dims.clone();
        dims.remove(dim);
        Ok(Value::Tensor(Named::new(
            t.tensor.f_select(dim as i64, pos)?,
            dims,
        )))
    }

    /// `scan forward|reverse over T with (c = init, …) { t -> … emit v }`: runs the body once
    /// per position with the carries threaded through, and stacks the emitted columns along a
    /// new last axis `T`.
    fn scan(&self, frame: &mut Frame, scan: &Scan, depth: usize) -> Result<Value> {
        let axis = &scan.axis.name;
        let Some(&len) = frame.sizes.get(axis) else {
            return Err(EvalError::UnknownAxis {
                function: frame.function.clone(),
                axis: axis.clone(),
                dims: frame.sizes.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        };
        let mut carries = Vec::with_capacity(scan.carries.len());
        for c in &scan.carries {
            carries.push((c.name.name.clone(), self.expr(frame, &c.init, depth)?));
        }
        let order: Vec<i64> = match scan.direction {
            ScanDirection::Forward => (0..len).collect(),
            ScanDirection::Reverse => (0..len).rev().collect(),
        };
        let mut columns: Vec<Option<Value>> = (0..len).map(|_| None).collect();
        for pos in order {
            frame.push();
            for (name, v) in &carries {
                frame.bind(name, v.clone());
            }
            frame.bind(
                &scan.index.name,
                Value::Index {
                    axis: axis.clone(),
                    pos,
                },
            );
            frame.push();
            let emitted = self.scan_step(frame, &scan.body, depth);
            frame.pop();
            let scope = frame.pop();
            let emitted = emitted?;
            for (name, v) in &mut carries {
                if let Some(updated) = scope.get(name.as_str()) {
                    *v = updated.clone();
                }
            }
            columns[pos as usize] = Some(emitted);
        }
        let columns: Vec<Value> = columns.into_iter().flatten().collect();
        if columns.is_empty() {
            return Err(EvalError::Scan {
                function: frame.function.clone(),
                detail: format!("a scan over an empty axis `{axis}`"),
            });
        }
        let refs: Vec<&Value> = columns.iter().collect();
        let (ts, mut dims) = self.aligned(frame, &refs)?;
        let size = ts.iter().map(|t| t.size()).max_by_key(|s| s.len());
        let size = size.unwrap_or_default();
        let ts = ts
            .iter()
            .map(|t| t.f_expand(size.as_slice(), false))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        dims.push(axis.clone());
        Ok(Value::Tensor(Named::new(
            Tensor::f_stack(&ts, size.len() as i64)?,
            dims,
        )))
    }

    /// One position of a scan: the body's statements; returns what it emits.
    fn scan_step(&self, frame: &mut Frame, body: &Block, depth: usize) -> Result<Value> {
        let mut emitted = None;
        for stmt in &body.stmts {
            match &stmt.kind {
                StmtKind::Let { name, value, .. } => {
                    let v = self.expr(frame, value, depth)?;
                    frame.bind(&name.name, v);
                }
                StmtKind::Assign { name, value } => {
                    let v = self.expr(frame, value, depth)?;
                    frame.assign(&name.name, v)?;
                }
                StmtKind::Emit { value } => {
                    if emitted.is_some() {
                        return Err(EvalError::Scan {
                            function: frame.function.clone(),
                            detail: "a scan step emits twice".into(),
                        });
                    }
                    emitted = Some(self.expr(frame, value, depth)?);
                }
                StmtKind::Expr(e) => {
                    self.expr(frame, e, depth)?;
                }
                _ => return Err(self.err_unsupported(frame, "a pipeline statement in a scan")),
            }
        }
        emitted.ok_or_else(|| EvalError::Scan {
            function: frame.function.clone(),
            detail: "a scan step without `emit`".into(),
        })
    }
}

/// Matches a call's arguments to parameter names, as kernel lowering does
/// ([`rlc_kernel::lower::match_arg_names`]): each parameter's argument expression.
pub fn match_args<'a>(
    function: &str,
    params: &[&str],
    args: &'a [Arg],
) -> Result<Vec<Option<&'a Expr>>> {
    let names: Vec<Option<&str>> = args
        .iter()
        .map(|a| a.name.as_ref().map(|n| n.name.as_str()))
        .collect();
    let slots = rlc_kernel::lower::match_arg_names(function, params, &names)?;
    Ok(slots
        .into_iter()
        .map(|s| s.map(|i| &args[i].value))
        .collect())
}

fn describe(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Name(id) => id.name.clone(),
        ExprKind::Member { name, .. } => format!(".{}", name.name),
        _ => "an expression".into(),
    }
}

//! Expressions: names, members, indexing, operators, records and scans.

use super::*;

impl Evaluator<'_> {
    // ----------------------------------------------------------------------------------------
    // Expressions

    pub(crate) fn expr(&mut self, frame: &mut Frame, e: &Expr) -> Val {
        let v = self.expr_inner(frame, e);
        if !matches!(v, Val::Unit | Val::Error) {
            let ty = self.type_of(&v);
            self.types
                .push(((frame.file, e.span.start, e.span.end), ty));
        }
        v
    }

    pub(super) fn expr_inner(&mut self, frame: &mut Frame, e: &Expr) -> Val {
        match &e.kind {
            ExprKind::Number(n) if n.is_integer && n.unit.is_none() && n.value.abs() < 9e15 => {
                Val::Int(Some(n.value as i64))
            }
            ExprKind::Number(n) => Val::Float(Some(n.scaled())),
            ExprKind::Str(s) => Val::Str(Some(s.value.clone())),
            ExprKind::Bool(b) => Val::Bool(Some(*b)),
            ExprKind::Paren(inner) => self.expr(frame, inner),
            ExprKind::Name(ident) => self.name(frame, ident),
            ExprKind::Member { base, name } => {
                let b = self.expr(frame, base);
                self.member(frame, &b, name)
            }
            ExprKind::Call {
                callee,
                args,
                closure,
            } => self.call(frame, e, callee, args, closure.as_ref()),
            ExprKind::Index { base, indices } => {
                let b = self.expr(frame, base);
                self.index(frame, e, b, indices)
            }
            ExprKind::Unary { op, operand, .. } => {
                let v = self.expr(frame, operand);
                self.unary(frame, *op, v, e.span)
            }
            ExprKind::Binary {
                op,
                op_span,
                lhs,
                rhs,
            } => {
                let l = self.expr(frame, lhs);
                let r = self.expr(frame, rhs);
                self.binary(frame, *op, *op_span, (l, lhs.span), (r, rhs.span))
            }
            ExprKind::Record(rec) => {
                let mut fields: Vec<(String, Val)> = Vec::new();
                for f in &rec.fields {
                    if let Some((_, _)) = fields.iter().find(|(n, _)| *n == f.name.name) {
                        self.diags
                            .push(duplicate_field(frame.file, &f.name, f.name.span));
                        continue;
                    }
                    let v = self.expr(frame, &f.value);
                    fields.push((f.name.name.clone(), v));
                }
                Val::Record(Rc::new(RecordVal {
                    name: "record".into(),
                    fields,
                }))
            }
            ExprKind::Scan(scan) => self.scan(frame, scan, e.span),
            ExprKind::List(items) => {
                let vals: Vec<Val> = items.iter().map(|x| self.expr(frame, x)).collect();
                if vals.iter().any(Val::is_error) {
                    return Val::Error;
                }
                Val::List(Rc::new(vals))
            }
        }
    }

    pub(super) fn name(&mut self, frame: &mut Frame, ident: &ast::Ident) -> Val {
        if let Some(local) = frame.lookup(&ident.name) {
            local.used = true;
            return local.val.clone();
        }
        let module = frame.module;
        match self.modules.get(module).lookup(module, &ident.name) {
            Some(b) => {
                self.used_imports.insert((module, ident.name.clone()));
                self.binding_value(b)
            }
            // Declared by an item a syntax error cut short: that error is the one mistake.
            None if self.modules.get(module).is_poisoned(&ident.name) => Val::Error,
            None if builtins::lookup(&ident.name).is_some() => self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    format!("`{}` is a built-in function: call it", ident.name),
                    frame.file,
                    ident.span,
                )
                .primary_label("not a value"),
            ),
            None => {
                let mut d = Diagnostic::new(
                    Code::UndefinedName,
                    format!("cannot find `{}` in this scope", ident.name),
                    frame.file,
                    ident.span,
                )
                .primary_label("not found");
                // The name of an item the module does not import: the import is the fix.
                if let Some(fix) = crate::imports::import_fix(self.modules, module, &ident.name) {
                    d = d.help(fix.help).fix(fix.message, fix.edits);
                } else if let Some(near) = self.near_name(frame, module, &ident.name) {
                    d = crate::hints::did_you_mean(d, &near);
                } else if ["True", "False"].contains(&ident.name.as_str()) {
                    d = d.help(format!("booleans are `{}`", ident.name.to_lowercase()));
                }
                self.err(d)
            }
        }
    }

    /// The name in scope within two edits of the undefined `name`, while the check's budget
    /// for these searches lasts (see `Evaluator::suggestion_budget`).
    fn near_name(&mut self, frame: &Frame, module: usize, name: &str) -> Option<String> {
        let m = self.modules.get(module);
        let scope = frame.names().count() + m.items.len() + m.imports.len();
        if scope > self.suggestion_budget {
            return None;
        }
        self.suggestion_budget -= scope;
        let names = frame
            .names()
            .chain(m.items.keys().map(String::as_str))
            .chain(m.imports.iter().map(|i| i.name.as_str()));
        rlc_syntax::closest(name, names, 2).map(str::to_string)
    }

    pub(super) fn binding_value(&mut self, b: Binding) -> Val {
        match b {
            Binding::Module(m) => Val::Module(m),
            Binding::Item { module, index } => self.item_value(ItemRef { module, index }),
        }
    }

    pub(super) fn member(&mut self, frame: &mut Frame, base: &Val, name: &ast::Ident) -> Val {
        let field_of = |fields: &[(String, Val)]| {
            fields
                .iter()
                .find(|(n, _)| *n == name.name)
                .map(|(_, v)| v.clone())
        };
        match base {
            Val::Error => Val::Error,
            Val::Module(m) => {
                let module = self.modules.get(*m);
                match module.items.get(&name.name) {
                    Some(&index) => {
                        if !module.item(index).is_pub && *m != frame.module {
                            let decl = module.item(index).name().unwrap().span;
                            self.diags.push(
                                Diagnostic::new(Code::PrivateItem, format!("`{}` is private to `{}`", name.name, module.name), frame.file, name.span)
                                    .primary_label("private item")
                                    .label(module.file, decl, "declared here without `pub`"),
                            );
                        }
                        self.item_value(ItemRef { module: *m, index })
                    }
                    None if module.is_poisoned(&name.name) => Val::Error,
                    None => {
                        let names: Vec<&str> = module.items.keys().map(String::as_str).collect();
                        let mut d = Diagnostic::new(Code::NoSuchItem, format!("`{}` has no item `{}`", module.name, name.name), frame.file, name.span)
                            .primary_label("not found");
                        if let Some(near) = rlc_syntax::closest(&name.name, names, 2) {
                            d = crate::hints::did_you_mean(d, near);
                        }
                        self.err(d)
                    }
                }
            }
            Val::Record(r) | Val::Rollout(r, _) => match field_of(&r.fields) {
                Some(v) => v,
                None => self.no_field(frame, &format!("`{}`", r.name), name, r.fields.iter().map(|(n, _)| n.as_str()).collect()),
            },
            Val::Dataset(d) => match name.name.as_str() {
                "vocab" => match (d.vocab, &d.tokenizer) {
                    (Some(v), _) => Val::Int(Some(v)),
                    // E0408 said why the tokenizer gives no vocabulary.
                    (None, Some(_)) if d.tokenizer_unusable => Val::Error,
                    (None, Some(dir)) => self.err(
                        Diagnostic::new(Code::NotConstant, format!("the vocabulary of `{}` is in `{dir}/tokenizer.json`, which cannot be read here", d.name), frame.file, name.span)
                            .primary_label("unknown vocabulary")
                            .help("write the model's vocabulary size, or check where the folder is"),
                    ),
                    (None, None) => self.err(
                        Diagnostic::new(Code::NotConstant, format!("the vocabulary of `{}` is set by the model's tokenizer, not the dataset", d.name), frame.file, name.span)
                            .primary_label("unknown vocabulary"),
                    ),
                },
                "sample" | "score" | "demonstrations" | "preferences" => self.err(
                    Diagnostic::new(Code::TypeMismatch, format!("`{}` is a method: call it", name.name), frame.file, name.span).primary_label("not a value"),
                ),
                _ => self.no_field(frame, "a dataset", name, vec!["vocab", "sample", "score", "demonstrations", "preferences"]),
            },
            Val::Arch(a) => {
                let v = match name.name.as_str() {
                    "layers" => a.layers,
                    "hidden" => a.hidden,
                    "heads" => a.heads,
                    "kv_heads" => a.kv_heads,
                    "ffn" => a.ffn,
                    "vocab" => a.vocab,
                    "max_len" => a.max_len,
                    _ => return self.no_field(frame, "an architecture", name, vec!["layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "max_len"]),
                };
                Val::Int(Some(v as i64))
            }
            Val::Model(_) => self.err(
                Diagnostic::new(Code::UnknownField, format!("a model has no field `{}`", name.name), frame.file, name.span)
                    .primary_label("not a field")
                    .help("a model's operations are called: `generate(…)`, `logprobs(…)`, `values(…)`, `score(…)`, `update(…)`"),
            ),
            other => self.err(
                Diagnostic::new(Code::UnknownField, format!("{} has no field `{}`", other.describe(), name.name), frame.file, name.span)
                    .primary_label("no such field"),
            ),
        }
    }

    pub(super) fn no_field(
        &mut self,
        frame: &Frame,
        what: &str,
        name: &ast::Ident,
        known: Vec<&str>,
    ) -> Val {
        let mut d = Diagnostic::new(
            Code::UnknownField,
            format!("{what} has no field `{}`", name.name),
            frame.file,
            name.span,
        )
        .primary_label("no such field");
        d = crate::hints::suggest(
            d,
            &name.name,
            known.iter().copied(),
            2,
            format!("the fields are {}", known.join(", ")),
        );
        self.err(d)
    }

    pub(super) fn index(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        base: Val,
        indices: &[Expr],
    ) -> Val {
        let vals: Vec<Val> = indices.iter().map(|i| self.expr(frame, i)).collect();
        match base {
            Val::Error => Val::Error,
            Val::Cluster(c) => match vals.as_slice() {
                [Val::Range(a, b)] => Val::Devices {
                    cluster: c,
                    start: *a,
                    end: *b,
                },
                [v] if v.as_int().is_some() => {
                    let i = v.as_int().unwrap();
                    Val::Devices {
                        cluster: c,
                        start: Some(i),
                        end: Some(i + 1),
                    }
                }
                _ => self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        "a cluster is indexed by a device range, e.g. `local[0..2]`",
                        frame.file,
                        e.span,
                    )
                    .primary_label("not a device range"),
                ),
            },
            Val::Tensor(t) => {
                let Some((axis, row)) = frame.scan.clone() else {
                    return self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            "tensors are indexed only by the position inside a `scan`",
                            frame.file,
                            e.span,
                        )
                        .primary_label("indexing outside a scan")
                        .help("use reductions (`sum(x, over: T)`) or a scan"),
                    );
                };
                let pos = t.dims.iter().position(|d| *d == Dim::Sym(axis.clone()));
                match pos {
                    Some(p) if indices.len() == 1 => {
                        let mut dims = t.dims.clone();
                        dims.remove(p);
                        let _ = row;
                        Val::Tensor(TensorTy {
                            dtype: t.dtype,
                            dims,
                        })
                    }
                    _ => self.err(
                        Diagnostic::new(
                            Code::UnknownAxis,
                            format!("`{t}` has no axis `{axis}` to index"),
                            frame.file,
                            e.span,
                        )
                        .primary_label("the scan runs over another axis"),
                    ),
                }
            }
            other => self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    format!("{} cannot be indexed", other.describe()),
                    frame.file,
                    e.span,
                )
                .primary_label("not indexable"),
            ),
        }
    }

    pub(super) fn unary(&mut self, frame: &Frame, op: UnaryOp, v: Val, span: Span) -> Val {
        match (op, &v) {
            (_, Val::Error) => Val::Error,
            (UnaryOp::Neg, Val::Int(i)) => Val::Int(i.map(|i| -i)),
            (UnaryOp::Neg, Val::Float(f)) => Val::Float(f.map(|f| -f)),
            (UnaryOp::Neg, Val::Tensor(t)) if t.dtype != DType::Bool => v.clone(),
            (UnaryOp::Not, Val::Bool(b)) => Val::Bool(b.map(|b| !b)),
            (UnaryOp::Not, Val::Tensor(t)) if t.dtype == DType::Bool => v.clone(),
            _ => self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    format!("`{}` does not apply to {}", op.as_str(), v.describe()),
                    frame.file,
                    span,
                )
                .primary_label("wrong kind of operand"),
            ),
        }
    }

    pub(super) fn binary(
        &mut self,
        frame: &Frame,
        op: BinaryOp,
        op_span: Span,
        (l, ls): (Val, Span),
        (r, rs): (Val, Span),
    ) -> Val {
        if l.is_error() || r.is_error() {
            return Val::Error;
        }
        if op == BinaryOp::Range {
            // An end past 64 bits (a whole number too large for an integer).
            let oversized = crate::limits::oversized(&l)
                .map(|f| (f, ls))
                .or_else(|| crate::limits::oversized(&r).map(|f| (f, rs)));
            if let Some((found, span)) = oversized {
                return self.err(crate::limits::too_large(
                    "a range's end",
                    &found,
                    frame.file,
                    span,
                ));
            }
            return match (&l, &r) {
                (Val::Int(a), Val::Int(b)) => Val::Range(*a, *b),
                _ => self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!(
                            "a range is made of integers, not {} and {}",
                            l.describe(),
                            r.describe()
                        ),
                        frame.file,
                        op_span,
                    )
                    .primary_label("not an integer range"),
                ),
            };
        }
        // Constants fold.
        if let Some(v) = builtins::fold(op, &l, &r) {
            return v;
        }
        let (Some(lt), Some(rt)) = (l.as_tensor(), r.as_tensor()) else {
            if self.record_as_reward(frame, &l, ls) || self.record_as_reward(frame, &r, rs) {
                return Val::Error;
            }
            let what = if matches!(l, Val::Str(_)) || matches!(r, Val::Str(_)) {
                "strings"
            } else {
                "these values"
            };
            return self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    format!(
                        "`{}` does not apply to {what}: {} and {}",
                        op.as_str(),
                        l.describe(),
                        r.describe()
                    ),
                    frame.file,
                    op_span,
                )
                .primary_label("wrong kind of operands"),
            );
        };
        match shapes::binary(
            op,
            &lt,
            &rt,
            matches!(l, Val::Int(_) | Val::Float(_)),
            matches!(r, Val::Int(_) | Val::Float(_)),
        ) {
            Ok(t) => {
                if t.is_scalar() && !matches!(l, Val::Tensor(_)) && !matches!(r, Val::Tensor(_)) {
                    // Two unknown config numbers.
                    return match t.dtype {
                        DType::Bool => Val::Bool(None),
                        d if d.is_int() => Val::Int(None),
                        _ => Val::Float(None),
                    };
                }
                Val::Tensor(t)
            }
            Err(msg) => {
                let code = msg.code();
                self.err(
                    Diagnostic::new(
                        code,
                        format!("`{}` of `{lt}` and `{rt}`", op.as_str()),
                        frame.file,
                        op_span,
                    )
                    .primary_label(msg.text)
                    .label(frame.file, ls, format!("`{lt}`"))
                    .label(frame.file, rs, format!("`{rt}`"))
                    .help(msg.help),
                )
            }
        }
    }

    pub(super) fn scan(&mut self, frame: &mut Frame, scan: &ast::Scan, span: Span) -> Val {
        let axis = scan.axis.name.clone();
        // The scanned tensors: parameters in scope that have the axis.
        let full = frame
            .locals
            .iter()
            .filter_map(|l| match &l.val {
                Val::Tensor(t) if t.dims.contains(&Dim::Sym(axis.clone())) => Some(t.dims.clone()),
                _ => None,
            })
            .next();
        let Some(full) = full else {
            return self.err(
                Diagnostic::new(Code::UnknownAxis, format!("no tensor in scope has the axis `{axis}`"), frame.file, scan.axis.span)
                    .primary_label("unknown axis")
                    .help("a scan runs over a named dimension of the function's tensors, e.g. `over T` for `f32[B, T]`"),
            );
        };
        let row: Vec<Dim> = full
            .iter()
            .filter(|d| **d != Dim::Sym(axis.clone()))
            .cloned()
            .collect();
        frame.push_scope();
        for c in &scan.carries {
            let init = self.expr(frame, &c.init);
            let carried = match init.as_tensor() {
                Some(t) if t.is_scalar() => Val::Tensor(TensorTy {
                    dtype: if t.dtype == DType::I64 {
                        DType::F32
                    } else {
                        t.dtype
                    },
                    dims: row.clone(),
                }),
                Some(t) => Val::Tensor(t),
                None => init,
            };
            frame.bind(&c.name.name, carried, c.name.span, false);
        }
        frame.bind(&scan.index.name, Val::Int(None), scan.index.span, false);
        let outer = frame.scan.replace((axis, row.clone()));
        let mut emitted: Option<(Val, Span)> = None;
        for s in &scan.body.stmts {
            let v = self.stmt(frame, s);
            if let StmtKind::Emit { value } = &s.kind {
                emitted = Some((v, value.span));
            }
        }
        frame.scan = outer;
        frame.pop_scope();
        match emitted {
            Some((v, vspan)) => match v.as_tensor() {
                Some(t) => {
                    if let Err(msg) = shapes::broadcast(
                        &TensorTy {
                            dtype: t.dtype,
                            dims: row.clone(),
                        },
                        &t,
                    ) {
                        return self.err(
                            Diagnostic::new(
                                Code::ShapeMismatch,
                                format!(
                                    "a scan emits one `{}` per position, found `{t}`",
                                    TensorTy {
                                        dtype: t.dtype,
                                        dims: row
                                    }
                                ),
                                frame.file,
                                vspan,
                            )
                            .primary_label(msg.text),
                        );
                    }
                    Val::Tensor(TensorTy {
                        dtype: if t.dtype == DType::I64 {
                            DType::F32
                        } else {
                            t.dtype
                        },
                        dims: full,
                    })
                }
                None => Val::Error,
            },
            None => self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    "this scan never emits a value",
                    frame.file,
                    span,
                )
                .primary_label("no `emit` in the body")
                .help("end the body with `emit value`"),
            ),
        }
    }
}

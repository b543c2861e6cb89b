//! `fn` bodies: parameters, blocks and statements, unused bindings.

use super::*;

impl Evaluator<'_> {
    // ----------------------------------------------------------------------------------------
    // Functions

    /// A function whose parameters are all typed is checked once, on its own; one with untyped
    /// parameters is a configuration helper, checked where it is called.
    pub(super) fn check_fn(&mut self, module: usize, f: &ast::FnDef) {
        if f.params
            .iter()
            .any(|p| p.ty.is_none() && p.default.is_none())
        {
            return;
        }
        let m = self.modules.get(module);
        let mut frame = Frame::new(module, m.file, !m.is_std);
        let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
        for p in &f.params {
            if let Some(first) = seen.insert(&p.name.name, p.name.span) {
                self.diags.push(duplicate_field(m.file, &p.name, first));
            }
            let v = self.param_value(&mut frame, p);
            frame.bind(&p.name.name, v, p.name.span, false);
        }
        let result = self.block(&mut frame, &f.body);
        if let Some(ret) = &f.ret {
            let want = self.type_expr(module, ret);
            let span = f.body.tail().map_or(f.body.span, |e| e.span);
            if f.body.tail().is_none() && !want.is_error() {
                self.diags.push(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!(
                            "`{}` must end with an expression of type `{}`",
                            f.name.name,
                            ret_display(&want)
                        ),
                        m.file,
                        f.body.span,
                    )
                    .primary_label("no value at the end of this block"),
                );
            } else {
                self.expect_assignable(&frame, &want, &result, span);
            }
        }
        self.close_scope(&mut frame);
    }

    pub(super) fn param_value(&mut self, frame: &mut Frame, p: &ast::Param) -> Val {
        let declared = p.ty.as_ref().map(|t| self.type_expr(frame.module, t));
        let default = p.default.as_ref().map(|d| self.expr(frame, d));
        match (declared, default) {
            (Some(ty), Some(def)) => {
                self.expect_assignable(frame, &ty, &def, p.default.as_ref().unwrap().span);
                match ty {
                    Val::Tensor(t) if t.is_scalar() && t.dtype.is_int() => Val::Int(None),
                    Val::Tensor(t) if t.is_scalar() && t.dtype.is_float() => Val::Float(None),
                    other => other,
                }
            }
            (Some(ty), None) => ty,
            // An untyped parameter (a configuration helper's) is checked with its default.
            (None, Some(def)) => def,
            (None, None) => Val::Error,
        }
    }

    pub(super) fn close_scope(&mut self, frame: &mut Frame) {
        let scope = frame.pop_scope();
        if !frame.lint {
            return;
        }
        for l in scope {
            if !l.used && l.warn_unused && !l.name.starts_with('_') {
                self.lints.push(
                    Diagnostic::new(
                        Code::UnusedBinding,
                        format!("`{}` is never used", l.name),
                        frame.file,
                        l.span,
                    )
                    .primary_label("unused binding")
                    .help(format!("remove it, or name it `_{}` to keep it", l.name)),
                );
            }
        }
    }

    /// A block's statements; its value is the trailing expression's.
    pub(super) fn block(&mut self, frame: &mut Frame, b: &ast::Block) -> Val {
        let mut last = Val::Unit;
        for (i, s) in b.stmts.iter().enumerate() {
            let v = self.stmt(frame, s);
            if i + 1 == b.stmts.len() && matches!(s.kind, StmtKind::Expr(_)) {
                last = v;
            }
        }
        last
    }

    pub(super) fn stmt(&mut self, frame: &mut Frame, s: &ast::Stmt) -> Val {
        match &s.kind {
            StmtKind::Let { name, ty, value } => {
                if let Some(first) = frame.first_in_scope(&name.name) {
                    let first = first.span;
                    self.diags.push(
                        Diagnostic::new(Code::DuplicateName, format!("`{}` is bound twice in this block", name.name), frame.file, name.span)
                            .primary_label("bound again here")
                            .label(frame.file, first, "first bound here")
                            .help("the compiler orders work by data dependence, not by lines: give each value its own name"),
                    );
                }
                let v = self.expr(frame, value);
                if let Some(ty) = ty {
                    let want = self.type_expr(frame.module, ty);
                    self.expect_assignable(frame, &want, &v, value.span);
                }
                frame.bind(&name.name, v, name.span, true);
                Val::Unit
            }
            StmtKind::Assign { name, value } => {
                let v = self.expr(frame, value);
                let file = frame.file;
                let in_scan = frame.scan.is_some();
                match frame.lookup(&name.name) {
                    Some(local) if in_scan => {
                        local.used = true;
                        let (old, decl) = (local.val.clone(), local.span);
                        if let (Some(o), Some(n)) = (old.as_tensor(), v.as_tensor())
                            && let Err(msg) = shapes::broadcast(&o, &n)
                        {
                            self.diags.push(
                                Diagnostic::new(
                                    Code::ShapeMismatch,
                                    format!("`{}` holds `{o}` but is given `{n}`", name.name),
                                    file,
                                    value.span,
                                )
                                .primary_label(msg.text)
                                .label(
                                    file,
                                    decl,
                                    "carried value declared here",
                                ),
                            );
                        }
                    }
                    _ => {
                        self.diags.push(
                            Diagnostic::new(Code::TypeMismatch, format!("`{}` cannot be assigned", name.name), file, name.span)
                                .primary_label("not a value carried by a scan")
                                .help("bindings are immutable: use `let` for a new name; only a scan's carried values are updated"),
                        );
                    }
                }
                Val::Unit
            }
            StmtKind::Emit { value } => {
                let v = self.expr(frame, value);
                if frame.scan.is_none() {
                    self.diags.push(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            "`emit` outside a scan",
                            frame.file,
                            s.span,
                        )
                        .primary_label("nothing to emit to"),
                    );
                }
                v
            }
            StmtKind::Expr(e) => self.expr(frame, e),
            StmtKind::Loop { .. }
            | StmtKind::Log { .. }
            | StmtKind::Every { .. }
            | StmtKind::Checkpoint { .. } => {
                self.diags.push(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        "this statement belongs in a pipeline",
                        frame.file,
                        s.span,
                    )
                    .primary_label("not allowed in a function"),
                );
                Val::Unit
            }
        }
    }
}

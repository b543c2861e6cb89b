//! `pipeline` items: the statements of a training job, and the role calls the checks read.

use crate::eval::{Evaluator, Frame};
use crate::program::{Origin, PipelineFacts};
use crate::value::Val;
use rlc_diagnostics::{Code, Diagnostic};
use rlc_syntax::ast::{self, StmtKind};

impl Evaluator<'_> {
    pub(crate) fn pipeline(&mut self, module: usize, p: &ast::Pipeline) -> PipelineFacts {
        let lint = !self.modules().get(module).is_std;
        let mut frame = self.frame(module, lint);
        frame.in_pipeline = true;
        let mut steps = None;
        for param in &p.params {
            let v = self.param_keeping_default(&mut frame, param);
            if param.name.name == "steps" {
                steps = v.as_int();
            }
            frame.bind(&param.name.name, v, param.name.span, true);
        }
        self.take_calls();
        self.pipeline_block(&mut frame, &p.body);
        self.end_scope(&mut frame);
        PipelineFacts {
            name: p.name.name.clone(),
            steps,
            calls: self.take_calls(),
            origin: Origin {
                file: frame.file(),
                span: p.name.span,
            },
        }
    }

    /// A pipeline parameter keeps its default's value: the checks judge the job as launched
    /// with its defaults.
    fn param_keeping_default(&mut self, frame: &mut Frame, param: &ast::Param) -> Val {
        match (&param.ty, &param.default) {
            (_, Some(d)) => {
                let v = self.eval_expr(frame, d);
                if param.ty.is_some() {
                    self.param(frame, param);
                }
                v
            }
            _ => self.param(frame, param),
        }
    }

    fn pipeline_block(&mut self, frame: &mut Frame, b: &ast::Block) {
        frame.push_scope();
        for s in &b.stmts {
            self.pipeline_stmt(frame, s);
        }
        self.end_scope(frame);
    }

    fn pipeline_stmt(&mut self, frame: &mut Frame, s: &ast::Stmt) {
        let file = frame.file();
        match &s.kind {
            StmtKind::Loop { var, range, body } => {
                match self.eval_expr(frame, range) {
                    Val::Range(_, _) | Val::Error => {}
                    other => self.diags.push(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!(
                                "`loop` runs over a range such as `0..steps`, found {}",
                                other.describe()
                            ),
                            file,
                            range.span,
                        )
                        .primary_label("not a range"),
                    ),
                }
                frame.push_scope();
                frame.bind(&var.name, Val::Int(None), var.span, false);
                self.pipeline_block(frame, body);
                self.end_scope(frame);
            }
            StmtKind::Log { record } => {
                for f in &record.fields {
                    let v = self.eval_expr(frame, &f.value);
                    let scalar = match &v {
                        Val::Int(_) | Val::Float(_) | Val::Bool(_) | Val::Error => true,
                        Val::Tensor(t) => t.is_scalar(),
                        _ => false,
                    };
                    if !scalar {
                        self.diags.push(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                format!(
                                    "`log` records scalars; `{}` is {}",
                                    f.name.name,
                                    v.describe()
                                ),
                                file,
                                f.value.span,
                            )
                            .primary_label("not a scalar")
                            .help("reduce it, e.g. `mean(x)`"),
                        );
                    }
                }
            }
            StmtKind::Every { interval, body } => {
                let v = self.eval_expr(frame, interval);
                match v.as_int() {
                    Some(n) if n >= 1 => {}
                    _ if v.is_error() => {}
                    Some(n) => self.diags.push(
                        Diagnostic::new(Code::TypeMismatch, format!("`every {n} steps` never runs: the interval must be at least 1"), file, interval.span)
                            .primary_label("not positive"),
                    ),
                    None => self.diags.push(
                        Diagnostic::new(Code::NotConstant, format!("the interval of `every` must be an integer known before the job starts, found {}", v.describe()), file, interval.span)
                            .primary_label("not a known integer"),
                    ),
                }
                self.pipeline_block(frame, body);
            }
            StmtKind::Checkpoint { roles } => {
                for r in roles {
                    match self.lookup_value(frame, r) {
                        Val::Model(_) | Val::Error => {}
                        other => self.diags.push(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                format!(
                                    "`checkpoint` saves models; `{}` is {}",
                                    r.name,
                                    other.describe()
                                ),
                                file,
                                r.span,
                            )
                            .primary_label("not a model"),
                        ),
                    }
                }
            }
            StmtKind::Assign { .. } | StmtKind::Emit { .. } => {
                self.diags.push(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        "assignment and `emit` belong in a scan",
                        file,
                        s.span,
                    )
                    .primary_label("not allowed in a pipeline")
                    .help("bind a new name with `let`"),
                );
            }
            StmtKind::Let { .. } | StmtKind::Expr(_) => {
                self.stmt_in_fn(frame, s);
            }
        }
    }
}

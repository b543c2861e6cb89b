//! `pipeline` items: the statements of a training job, and the role calls the checks read.

use crate::eval::{Evaluator, Frame};
use crate::program::{Origin, PipelineFacts};
use crate::value::{DType, Val};
use rlc_diagnostics::{Code, Diagnostic, Span};
use rlc_syntax::ast::{self, StmtKind};

/// The values a pipeline `loop` carries from one step to the next (`with (beta = 0.1)`), while
/// its body is checked: each may be assigned once per step, which gives the next step's value.
#[derive(Default)]
struct Carries {
    values: Vec<Carried>,
}

struct Carried {
    name: String,
    /// The name in the `with (…)` list.
    span: Span,
    /// `f32` or `i64` (`None` after an error in the initial value).
    dtype: Option<DType>,
    /// The assignment already seen in this step.
    assigned: Option<Span>,
}

impl Carries {
    fn get(&mut self, name: &str) -> Option<&mut Carried> {
        self.values.iter_mut().find(|c| c.name == name)
    }
}

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
        self.recipes.steps = None;
        self.recipes.instance = None;
        self.pipeline_body(&mut frame, &p.body);
        self.end_scope(&mut frame);
        let instance = self.recipes.instance.take();
        PipelineFacts {
            name: p.name.name.clone(),
            steps: if instance.is_some() {
                self.recipes.steps
            } else {
                steps
            },
            calls: self.take_calls(),
            origin: Origin {
                file: frame.file(),
                span: p.name.span,
            },
            instance,
        }
    }

    /// A pipeline's body, where its one statement may call a recipe.
    pub(crate) fn pipeline_body(&mut self, frame: &mut Frame, body: &ast::Block) {
        let file = frame.file();
        let saved = self.recipes.allowed.take();
        self.recipes.allowed = crate::recipes::sole_call(body).map(|s| (file, s.span));
        self.pipeline_block(frame, body, &mut None);
        self.recipes.allowed = saved;
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

    /// `carries`: those of the innermost `loop` (`None` outside any).
    fn pipeline_block(&mut self, frame: &mut Frame, b: &ast::Block, carries: &mut Option<Carries>) {
        frame.push_scope();
        for s in &b.stmts {
            self.pipeline_stmt(frame, s, carries);
        }
        self.end_scope(frame);
    }

    fn pipeline_stmt(&mut self, frame: &mut Frame, s: &ast::Stmt, carries: &mut Option<Carries>) {
        let file = frame.file();
        match &s.kind {
            StmtKind::Loop {
                var,
                range,
                carries: declared,
                body,
            } => {
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
                // Initial values are read outside the loop: a carry does not see another.
                let inits: Vec<Val> = declared
                    .iter()
                    .map(|c| self.eval_expr(frame, &c.init))
                    .collect();
                frame.push_scope();
                frame.bind(&var.name, Val::Int(None), var.span, false);
                let mut inner = Carries::default();
                for (c, init) in declared.iter().zip(inits) {
                    let first = if c.name.name == var.name {
                        Some(var.span)
                    } else {
                        inner.get(&c.name.name).map(|d| d.span)
                    };
                    if let Some(first) = first {
                        self.diags.push(
                            Diagnostic::new(
                                Code::DuplicateName,
                                format!("`{}` is declared twice by this loop", c.name.name),
                                file,
                                c.name.span,
                            )
                            .primary_label("declared again here")
                            .label(file, first, "first declared here")
                            .help("give each carried value its own name"),
                        );
                        continue;
                    }
                    let dtype = self.carried_init(frame, c, &init);
                    // Inside a step the value is not a constant: it changes between steps.
                    let val = match dtype {
                        Some(DType::I64) => Val::Int(None),
                        Some(_) => Val::Float(None),
                        None => Val::Error,
                    };
                    frame.bind(&c.name.name, val, c.name.span, true);
                    inner.values.push(Carried {
                        name: c.name.name.clone(),
                        span: c.name.span,
                        dtype,
                        assigned: None,
                    });
                }
                self.pipeline_block(frame, body, &mut Some(inner));
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
                    if !scalar && !self.record_as_reward(frame, &v, f.value.span) {
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
                self.pipeline_block(frame, body, carries);
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
            StmtKind::Assign { name, value } => self.assign_carried(frame, name, value, carries),
            StmtKind::Emit { .. } => {
                self.diags.push(
                    Diagnostic::new(Code::TypeMismatch, "`emit` belongs in a scan", file, s.span)
                        .primary_label("not allowed in a pipeline"),
                );
            }
            StmtKind::Let { name, value, .. } => {
                if let Some(c) = carries.as_mut().and_then(|c| c.get(&name.name)) {
                    let decl = c.span;
                    self.diags.push(
                        Diagnostic::new(
                            Code::DuplicateName,
                            format!("`{}` is carried by the loop: `let` cannot bind it again", name.name),
                            file,
                            name.span,
                        )
                        .primary_label("bound again here")
                        .label(file, decl, "carried from step to step here")
                        .help(format!(
                            "give this step's value its own name; `{} = …` sets the value the next step starts with",
                            name.name
                        )),
                    );
                }
                self.stmt_in_fn(frame, s);
                self.note_verifier_binding(frame, &name.name, value);
            }
            StmtKind::Expr(_) => match self.pipeline_callee(frame, s) {
                Some(r) => self.instantiate(frame, s, r),
                None => {
                    self.stmt_in_fn(frame, s);
                }
            },
        }
    }

    /// The element type of a carried value from its initial value, which must be a scalar
    /// (`f32` or `i64`) known before the job starts (`None` after an error).
    fn carried_init(&mut self, frame: &Frame, c: &ast::Carry, init: &Val) -> Option<DType> {
        let file = frame.file();
        let (dtype, known) = match init {
            Val::Error => return None,
            Val::Float(v) => (DType::F32, v.is_some()),
            Val::Int(v) => (DType::I64, v.is_some()),
            Val::Tensor(t) if t.is_scalar() && t.dtype.is_float() => (DType::F32, false),
            Val::Tensor(t) if t.is_scalar() && t.dtype.is_int() => (DType::I64, false),
            other => {
                self.diags.push(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!(
                            "a loop carries scalars (`f32` or `i64`); `{}` starts as {}",
                            c.name.name,
                            other.describe()
                        ),
                        file,
                        c.init.span,
                    )
                    .primary_label("not an `f32` or `i64` scalar"),
                );
                return None;
            }
        };
        if !known {
            self.diags.push(
                Diagnostic::new(
                    Code::NotConstant,
                    format!(
                        "the initial value of `{}` must be known before the job starts",
                        c.name.name
                    ),
                    file,
                    c.init.span,
                )
                .primary_label("not a constant")
                .help("start it from a number or a pipeline parameter with a default: `with (beta = 0.1)`"),
            );
        }
        Some(dtype)
    }

    /// `name = value` in a loop body: sets the value the next step starts with.
    fn assign_carried(
        &mut self,
        frame: &mut Frame,
        name: &ast::Ident,
        value: &ast::Expr,
        carries: &mut Option<Carries>,
    ) {
        let file = frame.file();
        let v = self.eval_expr(frame, value);
        let Some(c) = carries.as_mut().and_then(|c| c.get(&name.name)) else {
            self.diags.push(
                Diagnostic::new(Code::TypeMismatch, format!("`{}` cannot be assigned", name.name), file, name.span)
                    .primary_label("not a value the loop carries")
                    .help(format!(
                        "bindings are immutable: bind a new name with `let`; to carry a value from one step to the next, declare it with the loop: `loop step in 0..steps with ({} = 0.0) {{ … }}`",
                        name.name
                    )),
            );
            return;
        };
        let decl = c.span;
        if let Some(first) = c.assigned {
            self.diags.push(
                Diagnostic::new(
                    Code::CarriedTwice,
                    format!("`{}` is assigned twice in a step", name.name),
                    file,
                    name.span,
                )
                .primary_label("assigned again here")
                .label(file, first, "first assigned here")
                .help("compute the next value in one expression (with `let` for the parts) and assign it once"),
            );
            return;
        }
        c.assigned = Some(name.span);
        let Some(want) = c.dtype else { return };
        frame.mark_used(&name.name);
        let found = match &v {
            Val::Error => return,
            // An integer constant stands for a number where an `f32` is carried, as a literal does.
            Val::Int(Some(_)) if want == DType::F32 => return,
            Val::Float(_) => DType::F32,
            Val::Int(_) => DType::I64,
            Val::Bool(_) => DType::Bool,
            Val::Tensor(t) if t.is_scalar() => t.dtype,
            other => {
                self.diags.push(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!(
                            "`{}` carries a scalar `{}`; it is given {}",
                            name.name,
                            want.as_str(),
                            other.describe()
                        ),
                        file,
                        value.span,
                    )
                    .primary_label("not a scalar")
                    .label(file, decl, "carried value declared here")
                    .help("reduce it, e.g. `mean(x)`"),
                );
                return;
            }
        };
        let fits = if want == DType::I64 {
            found.is_int()
        } else {
            found.is_float()
        };
        if !fits {
            self.diags.push(
                Diagnostic::new(
                    Code::DtypeMismatch,
                    format!(
                        "`{}` carries `{}` values; it is given `{}`",
                        name.name,
                        want.as_str(),
                        found.as_str()
                    ),
                    file,
                    value.span,
                )
                .primary_label(format!(
                    "`{}` where `{}` is expected",
                    found.as_str(),
                    want.as_str()
                ))
                .label(file, decl, "carried value declared here")
                .help(if want == DType::I64 {
                    "convert with a cast: `i32(x)`"
                } else {
                    "convert with a cast: `f32(x)`"
                }),
            );
        }
    }
}

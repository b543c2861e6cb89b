//! Generic pipelines (recipes): a `pipeline` whose parameters include roles, datasets,
//! verifiers, environments or functions, instantiated by a job whose pipeline body is one call
//! of it (`pipeline train { grpo(policy: policy, reference: reference, …) }`). The checker
//! evaluates the recipe's body with the call's arguments bound, as if the job had written it;
//! what goes wrong inside is reported at the call too (`Instance`).

use super::{Evaluator, Frame};
use crate::modules::{Binding, Modules};
use crate::program::{Instance, Op, Origin, RoleKind};
use crate::value::{ItemRef, Val};
use rlc_diagnostics::{Code, Diagnostic, FileId, Span};
use rlc_syntax::ast::{self, ExprKind, ItemKind, StmtKind};

/// Calls of pipelines nested deeper than this (a recipe delegating to a recipe…) are refused.
pub const MAX_RECIPE_DEPTH: usize = 16;

/// The message of E1101 for a pipeline called where only a pipeline's whole body may call one.
pub(crate) const ONLY_AS_A_BODY: &str =
    "a pipeline is called only as the whole body of another pipeline (the plan runs one loop)";

/// E1101 at `span` of `file`, `message` saying how the call is misplaced.
pub(crate) fn misplaced_call(
    message: impl Into<String>,
    file: FileId,
    span: Span,
    label: impl Into<String>,
) -> Diagnostic {
    Diagnostic::new(Code::RecipeCall, message, file, span)
        .primary_label(label)
        .help("write the job as `pipeline train { recipe(…) }`, with nothing else in its body")
}

/// The pipeline item `callee` names in `module`'s scope (`grpo`, or `recipes.grpo` through an
/// imported module), as (module, item index); `is_local` says which names a local binding
/// hides. Read by the checker and by the dataflow, which must agree on what a call calls.
pub fn pipeline_named(
    modules: &Modules,
    module: usize,
    callee: &ast::Expr,
    is_local: impl Fn(&str) -> bool,
) -> Option<(usize, usize)> {
    let scope = modules.get(module);
    let binding = match &callee.kind {
        ExprKind::Name(id) if !is_local(&id.name) => scope.lookup(module, &id.name)?,
        ExprKind::Member { base, name } => match &base.kind {
            ExprKind::Name(m) if !is_local(&m.name) => match scope.lookup(module, &m.name)? {
                Binding::Module(other) => modules.get(other).lookup(other, &name.name)?,
                Binding::Item { .. } => return None,
            },
            _ => return None,
        },
        _ => return None,
    };
    let Binding::Item { module, index } = binding else {
        return None;
    };
    matches!(modules.get(module).item(index).kind, ItemKind::Pipeline(_)).then_some((module, index))
}

/// The kind of value a generic parameter takes, named by its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenericParam {
    /// A model of this kind.
    Role(RoleKind),
    Dataset,
    Verifier,
    Environment,
    /// A `fn`, called by the recipe (a tensor reward).
    Fn,
}

impl GenericParam {
    pub fn from_type(ty: &ast::TypeExpr) -> Option<GenericParam> {
        if ty.dims.is_some() {
            return None;
        }
        let name = ty.name.name.as_str();
        Some(match name {
            "Dataset" => GenericParam::Dataset,
            "Verifier" => GenericParam::Verifier,
            "Environment" => GenericParam::Environment,
            "Fn" => GenericParam::Fn,
            _ => GenericParam::Role(RoleKind::from_name(name)?),
        })
    }

    fn describe(self) -> String {
        match self {
            GenericParam::Role(kind) => format!("a {} model", kind.as_str()),
            GenericParam::Dataset => "a dataset".into(),
            GenericParam::Verifier => "a verifier".into(),
            GenericParam::Environment => "an environment".into(),
            GenericParam::Fn => "a function".into(),
        }
    }

    fn accepts(self, v: &Val, models: &[crate::program::Model]) -> bool {
        match (self, v) {
            (_, Val::Error) => true,
            (GenericParam::Role(kind), Val::Model(m)) => models[*m].kind == kind,
            (GenericParam::Dataset, Val::Dataset(_))
            | (GenericParam::Verifier, Val::Verifier(_))
            | (GenericParam::Environment, Val::Environment(_))
            | (GenericParam::Fn, Val::Fn(_)) => true,
            _ => false,
        }
    }
}

/// Whether `p` is a recipe: a pipeline with a parameter of a generic kind, which runs only when
/// a job instantiates it.
pub fn is_generic(p: &ast::Pipeline) -> bool {
    p.params
        .iter()
        .any(|q| q.ty.as_ref().and_then(GenericParam::from_type).is_some())
}

/// The call statement that is a pipeline body's whole content, when it is one: the only place
/// a pipeline may be called.
pub fn sole_call(body: &ast::Block) -> Option<&ast::Stmt> {
    match body.stmts.as_slice() {
        [
            s @ ast::Stmt {
                kind:
                    StmtKind::Expr(ast::Expr {
                        kind: ExprKind::Call { .. },
                        ..
                    }),
                ..
            },
        ] => Some(s),
        _ => None,
    }
}

/// Where a recipe's body first trains its parameter `name` (`policy.update`).
fn first_update(body: &ast::Block, name: &str) -> Option<Span> {
    let mut first = None;
    body.visit_exprs(&mut |e| {
        if let ExprKind::Call { callee, .. } = &e.kind
            && let ExprKind::Member { base, name: method } = &callee.kind
            && let ExprKind::Name(b) = &base.kind
            && b.name == name
            && Op::from_name(&method.name) == Some(Op::Update)
        {
            first = first.or(Some(method.span));
        }
    });
    first
}

/// What instantiating recipes keeps while their bodies are checked.
#[derive(Default)]
pub(crate) struct Recipes {
    /// The statement of the pipeline body being checked that may call a pipeline.
    pub allowed: Option<(FileId, Span)>,
    /// The recipes being instantiated, outermost first.
    pub active: Vec<ItemRef>,
    /// Set by the outermost instantiation: the recipe the job runs and the files of every
    /// recipe it reached.
    pub instance: Option<Instance>,
    /// The `steps` of the innermost recipe that holds the loop.
    pub steps: Option<i64>,
}

impl Evaluator<'_> {
    /// A generic pipeline on its own: its parameters are checked, and its body with each
    /// generic parameter unknown (names resolve, imports count as used; what depends on a role,
    /// a dataset or a function is checked where a job instantiates it, with its arguments).
    pub(crate) fn recipe_on_its_own(&mut self, module: usize, p: &ast::Pipeline) {
        let lint = !self.modules().get(module).is_std;
        let mut frame = self.frame(module, lint);
        frame.in_pipeline = true;
        frame.push_scope();
        for q in &p.params {
            // A default may read the parameters before it (`minibatch = prompts * group`).
            if q.ty.as_ref().and_then(GenericParam::from_type).is_none() {
                let v = self.param(&mut frame, q);
                frame.bind(&q.name.name, v, q.name.span, false);
                continue;
            }
            frame.bind(&q.name.name, Val::Error, q.name.span, false);
            if let Some(d) = &q.default {
                let file = frame.file();
                self.diags.push(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!(
                            "`{}` is a generic parameter: it has no default",
                            q.name.name
                        ),
                        file,
                        d.span,
                    )
                    .primary_label("a default for a role, a dataset or a function")
                    .help("remove the default; each job passes its own"),
                );
            }
        }
        // Neither its role calls, nor an instance it makes of another recipe, nor the types its
        // expressions take with the defaults are the job's: a job's instance, checked first, has
        // the types of the values it passes (which plan lowering reads by expression).
        let (calls, saved) = (self.take_calls(), std::mem::take(&mut self.recipes));
        let types = self.types.len();
        self.pipeline_body(&mut frame, &p.body);
        self.types.truncate(types);
        (self.calls, self.recipes) = (calls, saved);
        self.end_scope(&mut frame);
    }

    /// Whether call statement `s` of a pipeline body is a call of a pipeline, and its item.
    pub(crate) fn pipeline_callee(&self, frame: &Frame, s: &ast::Stmt) -> Option<ItemRef> {
        let StmtKind::Expr(ast::Expr {
            kind: ExprKind::Call { callee, .. },
            ..
        }) = &s.kind
        else {
            return None;
        };
        let (module, index) = pipeline_named(self.modules(), frame.module(), callee, |n| {
            frame.has_local(n)
        })?;
        Some(ItemRef { module, index })
    }

    /// `grpo(policy: policy, …)` as statement `s` of a pipeline body: checks the arguments
    /// against the recipe's parameters and the recipe's body with them bound.
    pub(crate) fn instantiate(&mut self, frame: &mut Frame, s: &ast::Stmt, r: ItemRef) {
        let StmtKind::Expr(
            e @ ast::Expr {
                kind:
                    ExprKind::Call {
                        callee,
                        args,
                        closure,
                    },
                ..
            },
        ) = &s.kind
        else {
            return;
        };
        // As any name is read: imports count as used, private items are refused.
        if self.eval_expr(frame, callee).is_error() {
            self.eval_args(frame, args);
            return;
        }
        let file = frame.file();
        let m = self.modules().get(r.module);
        let ItemKind::Pipeline(p) = &m.item(r.index).kind else {
            return;
        };
        let what = format!("`{}`", p.name.name);
        let misplaced = if self.recipes.allowed != Some((file, s.span)) {
            Some(ONLY_AS_A_BODY.to_string())
        } else if self.recipes.active.contains(&r) {
            Some(format!("{what} calls itself"))
        } else if self.recipes.active.len() >= MAX_RECIPE_DEPTH {
            Some(format!(
                "pipelines call each other more than {MAX_RECIPE_DEPTH} deep"
            ))
        } else if !is_generic(p) {
            Some(format!(
                "{what} takes no role, dataset or function: it is a job of its own, not a recipe"
            ))
        } else {
            None
        };
        if let Some(message) = misplaced {
            self.eval_args(frame, args);
            self.diags.push(
                misplaced_call(message, file, e.span, format!("call of {what}")).label(
                    m.file,
                    p.name.span,
                    "the pipeline",
                ),
            );
            return;
        }
        self.no_closure(frame, closure.as_ref());
        let params: Vec<(&str, bool)> = p
            .params
            .iter()
            .map(|q| (q.name.name.as_str(), q.default.is_none()))
            .collect();
        let Some(bound) = self.bind_args(frame, e.span, &what, &params, args) else {
            self.eval_args(frame, args);
            return;
        };
        let mut inner = self.frame(r.module, !m.is_std);
        inner.in_pipeline = true;
        for (q, a) in p.params.iter().zip(bound) {
            let v = match a {
                Some(a) => {
                    let v = self.eval_expr(frame, &a.value);
                    // An untyped parameter's default, with the parameters before it bound, gives
                    // the kind of value it takes.
                    let default = match (&q.ty, &q.default) {
                        (None, Some(d)) => Some(self.eval_expr(&mut inner, d)),
                        _ => None,
                    };
                    self.recipe_arg(frame, r.module, p, q, v, a.value.span, default)
                }
                None => {
                    let v = self.eval_expr(&mut inner, q.default.as_ref().expect("bound"));
                    if let Some(ty) = &q.ty {
                        let want = self.type_expr(r.module, ty);
                        self.expect_assignable(&inner, &want, &v, q.default.as_ref().unwrap().span);
                    }
                    v
                }
            };
            if q.name.name == "steps" {
                self.recipes.steps = v.as_int();
            }
            inner.bind(&q.name.name, v, q.name.span, true);
        }
        let outermost = self.recipes.active.is_empty();
        if outermost {
            self.recipes.instance = Some(Instance {
                recipe: p.name.name.clone(),
                call: Origin { file, span: e.span },
                files: Vec::new(),
            });
        }
        if let Some(instance) = &mut self.recipes.instance
            && !instance.files.contains(&m.file)
        {
            instance.files.push(m.file);
        }
        let saved = self.recipes.allowed.replace((
            m.file,
            sole_call(&p.body).map_or(Span::default(), |s| s.span),
        ));
        self.recipes.active.push(r);
        self.pipeline_body(&mut inner, &p.body);
        self.recipes.active.pop();
        self.recipes.allowed = saved;
        self.end_scope(&mut inner);
    }

    /// The value a recipe's parameter `q` takes from argument `v`: checked against its kind
    /// (and, for a role, against the operations the recipe runs on it); `Val::Error` when it
    /// does not fit, so that the body reports nothing more about it.
    #[allow(clippy::too_many_arguments)]
    fn recipe_arg(
        &mut self,
        frame: &Frame,
        module: usize,
        p: &ast::Pipeline,
        q: &ast::Param,
        v: Val,
        span: Span,
        default: Option<Val>,
    ) -> Val {
        let file = frame.file();
        let recipe_file = self.modules().get(module).file;
        let recipe = &p.name.name;
        let param = &q.name.name;
        let Some(ty) = &q.ty else {
            // An untyped parameter takes a value of its default's kind (a number where a
            // number is, an integer where an integer is).
            let Some(d) = default else { return v };
            let fits = matches!(
                (&d, &v),
                (Val::Error, _)
                    | (_, Val::Error)
                    | (Val::Int(_), Val::Int(_))
                    | (Val::Float(_), Val::Int(_) | Val::Float(_))
                    | (Val::Bool(_), Val::Bool(_))
                    | (Val::Str(_), Val::Str(_))
            );
            if !fits {
                let want = d.describe();
                return self.recipe_mismatch(file, span, recipe_file, q, recipe, &want, &v);
            }
            return v;
        };
        let Some(kind) = GenericParam::from_type(ty) else {
            let want = self.type_expr(module, ty);
            self.expect_assignable(frame, &want, &v, span);
            return v;
        };
        if !kind.accepts(&v, &self.program.models) {
            return self.recipe_mismatch(file, span, recipe_file, q, recipe, &kind.describe(), &v);
        }
        if let Val::Model(m) = v {
            let model = &self.program.models[m];
            if model.frozen
                && let Some(at) = first_update(&p.body, param)
            {
                let name = model.name.clone();
                self.diags.push(
                    Diagnostic::new(
                        Code::UpdateFrozen,
                        format!("`{name}` is frozen, but `{recipe}` trains its `{param}`"),
                        file,
                        span,
                    )
                    .primary_label("a frozen model")
                    .label(
                        recipe_file,
                        at,
                        format!("`{recipe}` updates `{param}` here"),
                    )
                    .help(format!("pass a model with an optimizer as `{param}`")),
                );
                return Val::Error;
            }
        }
        v
    }

    #[allow(clippy::too_many_arguments)]
    fn recipe_mismatch(
        &mut self,
        file: FileId,
        span: Span,
        recipe_file: FileId,
        q: &ast::Param,
        recipe: &str,
        want: &str,
        v: &Val,
    ) -> Val {
        self.diags.push(
            Diagnostic::new(
                Code::TypeMismatch,
                format!(
                    "`{}` of `{recipe}` takes {want}, found {}",
                    q.name.name,
                    v.describe()
                ),
                file,
                span,
            )
            .primary_label("wrong kind of value")
            .label(recipe_file, q.span, "parameter declared here"),
        );
        Val::Error
    }
}

/// Diagnostics of a recipe's body that point into the recipe get the call as their primary
/// label (the job's author reads them in the job's file), the recipe's place after it; fixes
/// that would edit a recipe are dropped (its author's code, shared by every job).
pub(crate) fn at_the_call(diagnostics: &mut [Diagnostic], instance: &Instance) {
    for d in diagnostics {
        let Some(primary) = d.labels.first() else {
            continue;
        };
        if primary.file == instance.call.file || !instance.files.contains(&primary.file) {
            continue;
        }
        for l in &mut d.labels {
            l.primary = false;
        }
        d.labels.insert(
            0,
            rlc_diagnostics::Label {
                file: instance.call.file,
                span: instance.call.span,
                message: format!("in this instance of `{}`", instance.recipe),
                primary: true,
            },
        );
        d.fixes
            .retain(|f| f.edits.iter().all(|e| !instance.files.contains(&e.file)));
    }
}

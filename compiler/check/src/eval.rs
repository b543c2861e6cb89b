//! The evaluator: walks every item once, giving each expression a [`Val`] — a constant where the
//! text decides it, otherwise a type and shape — and reporting name, type and role errors.
//! Configuration items (clusters, models, placements) and the pipeline's role calls become the
//! [`Program`] that the placement, batch, algorithm and memory checks read.

use crate::builtins::{self, Builtin};
use crate::modules::{Binding, Modules};
use crate::program::{self, *};
use crate::shapes::{self, Unifier};
use crate::value::*;
use rlc_diagnostics::{Code, Diagnostic, FileId, Span};
use rlc_syntax::ast::{self, BinaryOp, Expr, ExprKind, ItemKind, StmtKind, UnaryOp};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

/// A local binding.
#[derive(Debug)]
struct Local {
    name: String,
    val: Val,
    span: Span,
    used: bool,
    /// Report it when unused (not for parameters of std functions and the like).
    warn_unused: bool,
}

/// Where evaluation stands: the module, the local scopes, and what kind of code this is.
pub(crate) struct Frame {
    module: usize,
    file: FileId,
    scopes: Vec<Vec<Local>>,
    /// Inside a scan body: the axis and the dims of one row (for `x[t]`).
    scan: Option<(String, Vec<Dim>)>,
    /// Warn about unused `let` bindings (user code only).
    lint: bool,
    /// Inside a pipeline, where role operations and dataset sampling may run.
    pub(crate) in_pipeline: bool,
}

impl Frame {
    pub(crate) fn push_scope(&mut self) {
        self.scopes.push(Vec::new());
    }

    fn new(module: usize, file: FileId, lint: bool) -> Self {
        Frame {
            module,
            file,
            scopes: vec![Vec::new()],
            scan: None,
            lint,
            in_pipeline: false,
        }
    }

    fn lookup(&mut self, name: &str) -> Option<&mut Local> {
        self.scopes
            .iter_mut()
            .rev()
            .flat_map(|s| s.iter_mut().rev())
            .find(|l| l.name == name)
    }

    pub(crate) fn bind(&mut self, name: &str, val: Val, span: Span, warn_unused: bool) {
        self.scopes.last_mut().unwrap().push(Local {
            name: name.to_string(),
            val,
            span,
            used: false,
            warn_unused,
        });
    }

    pub(crate) fn file(&self) -> FileId {
        self.file
    }

    fn names(&self) -> Vec<String> {
        self.scopes
            .iter()
            .flatten()
            .map(|l| l.name.clone())
            .collect()
    }
}

/// Types of expressions, by file and span, for tools (hover in the LSP).
pub type TypeTable = BTreeMap<(FileId, u32, u32), String>;

pub struct Evaluator<'m> {
    modules: &'m Modules,
    pub diags: Vec<Diagnostic>,
    pub program: Program,
    pub types: TypeTable,
    memo: HashMap<ItemRef, Val>,
    in_progress: BTreeSet<ItemRef>,
    model_ids: HashMap<ItemRef, usize>,
    cluster_ids: HashMap<ItemRef, usize>,
    used_imports: BTreeSet<(usize, String)>,
    /// Role calls of the pipeline being checked.
    calls: Vec<RoleCall>,
    /// Unused-name warnings, reported only for a program without errors (after an error, names
    /// used in the code it rejected would look unused).
    lints: Vec<Diagnostic>,
    /// Depth of inlined configuration-function calls (guards against recursion).
    inline_depth: usize,
}

const MAX_INLINE_DEPTH: usize = 32;

impl<'m> Evaluator<'m> {
    pub fn new(modules: &'m Modules) -> Self {
        Evaluator {
            modules,
            diags: Vec::new(),
            program: Program::default(),
            types: TypeTable::new(),
            memo: HashMap::new(),
            in_progress: BTreeSet::new(),
            model_ids: HashMap::new(),
            cluster_ids: HashMap::new(),
            used_imports: BTreeSet::new(),
            calls: Vec::new(),
            lints: Vec::new(),
            inline_depth: 0,
        }
    }

    pub(crate) fn modules(&self) -> &'m Modules {
        self.modules
    }

    pub(crate) fn frame(&self, module: usize, lint: bool) -> Frame {
        Frame::new(module, self.modules.get(module).file, lint)
    }

    pub(crate) fn lookup_value(&mut self, frame: &mut Frame, ident: &ast::Ident) -> Val {
        self.name(frame, ident)
    }

    pub(crate) fn eval_expr(&mut self, frame: &mut Frame, e: &Expr) -> Val {
        self.expr(frame, e)
    }

    pub(crate) fn take_calls(&mut self) -> Vec<RoleCall> {
        std::mem::take(&mut self.calls)
    }

    pub(crate) fn stmt_in_fn(&mut self, frame: &mut Frame, s: &ast::Stmt) -> Val {
        self.stmt(frame, s)
    }

    pub(crate) fn param(&mut self, frame: &mut Frame, p: &ast::Param) -> Val {
        self.param_value(frame, p)
    }

    pub(crate) fn end_scope(&mut self, frame: &mut Frame) {
        self.close_scope(frame)
    }

    fn err(&mut self, d: Diagnostic) -> Val {
        self.diags.push(d);
        Val::Error
    }

    fn origin(&self, frame: &Frame, span: Span) -> Origin {
        Origin {
            file: frame.file,
            span,
        }
    }

    /// Checks every item of every module; the root's pipeline becomes the program's.
    pub fn run(&mut self) {
        for module in 0..self.modules.modules.len() {
            let m = self.modules.get(module);
            for (index, item) in m.ast.items.iter().enumerate() {
                let r = ItemRef { module, index };
                match &item.kind {
                    ItemKind::Cluster(_)
                    | ItemKind::Model(_)
                    | ItemKind::Dataset(_)
                    | ItemKind::Const(_) => {
                        self.item_value(r);
                    }
                    ItemKind::Fn(f) => self.check_fn(module, f),
                    ItemKind::Struct(s) => self.check_struct(module, s),
                    _ => {}
                }
            }
        }
        // Placements need every model; the pipeline needs placements for nothing, but comes last
        // so that its diagnostics follow the configuration's.
        for module in 0..self.modules.modules.len() {
            for (index, item) in self.modules.get(module).ast.items.iter().enumerate() {
                match &item.kind {
                    ItemKind::Place(p) => self.place(module, index, p),
                    ItemKind::Pipeline(p) => {
                        let facts = self.pipeline(module, p);
                        if module == 0 && self.program.pipeline.is_none() {
                            self.program.pipeline = Some(facts);
                        }
                    }
                    _ => {}
                }
            }
        }
        self.unused_imports();
        if !self.diags.iter().any(Diagnostic::is_error) {
            self.diags.append(&mut self.lints);
        }
    }

    fn unused_imports(&mut self) {
        for (id, m) in self.modules.modules.iter().enumerate() {
            if m.is_std {
                continue;
            }
            for import in &m.imports {
                if !self.used_imports.contains(&(id, import.name.clone())) {
                    self.lints.push(
                        Diagnostic::new(
                            Code::UnusedImport,
                            format!("`{}` is imported but never used", import.name),
                            m.file,
                            import.span,
                        )
                        .primary_label("unused import")
                        .help("remove it from the import"),
                    );
                }
            }
        }
    }

    // ----------------------------------------------------------------------------------------
    // Items

    /// The value of a module-level item, evaluated once.
    fn item_value(&mut self, r: ItemRef) -> Val {
        if let Some(v) = self.memo.get(&r) {
            return v.clone();
        }
        let m = self.modules.get(r.module);
        let item = m.item(r.index);
        if !self.in_progress.insert(r) {
            let name = item.name().unwrap();
            return self.err(
                Diagnostic::new(
                    Code::UndefinedName,
                    format!("`{}` is defined in terms of itself", name.name),
                    m.file,
                    name.span,
                )
                .primary_label("refers to itself"),
            );
        }
        let val = match &item.kind {
            ItemKind::Const(c) => {
                let mut frame = Frame::new(r.module, m.file, false);
                let v = match self.expr(&mut frame, &c.value) {
                    Val::Device(d) => Val::Device(Rc::new(DeviceSpec {
                        name: c.name.name.clone(),
                        ..(*d).clone()
                    })),
                    Val::Arch(a) if a.preset.is_none() => Val::Arch(Rc::new(program::Arch {
                        preset: Some(c.name.name.clone()),
                        ..(*a).clone()
                    })),
                    other => other,
                };
                match &c.ty {
                    Some(ty) => {
                        let want = self.type_expr(r.module, ty);
                        self.expect_assignable(&frame, &want, &v, c.value.span);
                        v
                    }
                    None => v,
                }
            }
            ItemKind::Cluster(c) => self.cluster(r, c),
            ItemKind::Model(md) => self.model(r, md),
            ItemKind::Dataset(d) => self.dataset(r, d),
            ItemKind::Fn(_) => Val::Fn(r),
            _ => Val::Unit,
        };
        self.in_progress.remove(&r);
        self.memo.insert(r, val.clone());
        val
    }

    fn definition_fields<'a>(
        &mut self,
        frame: &mut Frame,
        def: &'a ast::Definition,
    ) -> Option<Vec<(&'a ast::Field, Val)>> {
        match def {
            ast::Definition::Fields(block) => {
                let mut out: Vec<(&ast::Field, Val)> = Vec::new();
                for f in &block.fields {
                    if let Some((prev, _)) = out.iter().find(|(p, _)| p.key.name == f.key.name) {
                        self.diags.push(
                            Diagnostic::new(
                                Code::DuplicateName,
                                format!("`{}` is set twice", f.key.name),
                                frame.file,
                                f.key.span,
                            )
                            .primary_label("set again here")
                            .label(
                                frame.file,
                                prev.key.span,
                                "first set here",
                            ),
                        );
                        continue;
                    }
                    let v = if f.key.name == "precision" {
                        self.precision_value(frame, &f.value)
                    } else {
                        self.expr(frame, &f.value)
                    };
                    out.push((f, v));
                }
                Some(out)
            }
            ast::Definition::Expr(_) => None,
        }
    }

    fn precision_value(&mut self, frame: &Frame, e: &Expr) -> Val {
        match &e.kind {
            ExprKind::Name(n) if matches!(n.name.as_str(), "f32" | "bf16" | "f16") => {
                Val::Str(Some(n.name.clone()))
            }
            _ => self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    "precision is `f32`, `bf16` or `f16`",
                    frame.file,
                    e.span,
                )
                .primary_label("not a precision"),
            ),
        }
    }

    fn cluster(&mut self, r: ItemRef, c: &ast::Cluster) -> Val {
        let m = self.modules.get(r.module);
        let mut frame = Frame::new(r.module, m.file, false);
        let origin = self.origin(&frame, c.name.span);
        let cluster = match &c.def {
            ast::Definition::Expr(e) => match self.expr(&mut frame, e) {
                Val::ClusterSpec(spec) => Some(Cluster {
                    name: c.name.name.clone(),
                    origin,
                    ..(*spec).clone()
                }),
                Val::Cluster(id) => Some(Cluster {
                    name: c.name.name.clone(),
                    origin,
                    ..self.program.clusters[id].clone()
                }),
                Val::Error => None,
                other => {
                    self.diags.push(
                        Diagnostic::new(Code::TypeMismatch, format!("a cluster is defined by `cpu(…)` or a block, not {}", other.describe()), frame.file, e.span)
                            .primary_label("not a cluster")
                            .help("write `cluster name { nodes = 1  devices_per_node = 8  device = h100_80g }`"),
                    );
                    None
                }
            },
            ast::Definition::Fields(_) => {
                let fields = self
                    .definition_fields(&mut frame, &c.def)
                    .unwrap_or_default();
                self.cluster_from_fields(&frame, &c.name, &fields, origin)
            }
        };
        match cluster {
            Some(cluster) => {
                self.program.clusters.push(cluster);
                let id = self.program.clusters.len() - 1;
                self.cluster_ids.insert(r, id);
                Val::Cluster(id)
            }
            None => Val::Error,
        }
    }

    fn cluster_from_fields(
        &mut self,
        frame: &Frame,
        name: &ast::Ident,
        fields: &[(&ast::Field, Val)],
        origin: Origin,
    ) -> Option<Cluster> {
        let mut nodes = None;
        let mut per_node = None;
        let mut device = None;
        let mut intra = 300e9;
        let mut inter = 25e9;
        let mut ok = true;
        for (f, v) in fields {
            let src = Origin {
                file: frame.file,
                span: f.value.span,
            };
            match (f.key.name.as_str(), v) {
                (_, Val::Error) => ok = false,
                ("nodes", v) => {
                    nodes = self
                        .positive(frame, v, f.value.span, "nodes")
                        .map(|n| Sourced {
                            value: n,
                            origin: src,
                        })
                }
                ("devices_per_node", v) => {
                    per_node = self
                        .positive(frame, v, f.value.span, "devices_per_node")
                        .map(|n| Sourced {
                            value: n,
                            origin: src,
                        })
                }
                ("device", Val::Device(d)) => device = Some((**d).clone()),
                ("intra_bandwidth", v) if v.as_float().is_some() => intra = v.as_float().unwrap(),
                ("inter_bandwidth", v) if v.as_float().is_some() => inter = v.as_float().unwrap(),
                (key @ ("device" | "intra_bandwidth" | "inter_bandwidth"), v) => {
                    ok = false;
                    self.diags.push(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!(
                                "`{key}` expects {}, found {}",
                                if key == "device" {
                                    "a device"
                                } else {
                                    "a bandwidth"
                                },
                                v.describe()
                            ),
                            frame.file,
                            f.value.span,
                        )
                        .primary_label("wrong kind of value"),
                    );
                }
                (key, _) => {
                    ok = false;
                    self.unknown_setting(
                        frame,
                        key,
                        f.key.span,
                        &[
                            "nodes",
                            "devices_per_node",
                            "device",
                            "intra_bandwidth",
                            "inter_bandwidth",
                        ],
                        "cluster",
                    );
                }
            }
        }
        for (missing, present) in [
            ("nodes", nodes.is_some()),
            ("devices_per_node", per_node.is_some()),
            ("device", device.is_some()),
        ] {
            if !present && ok {
                ok = false;
                self.diags.push(
                    Diagnostic::new(
                        Code::MissingSetting,
                        format!("cluster `{}` does not set `{missing}`", name.name),
                        frame.file,
                        name.span,
                    )
                    .primary_label(format!("`{missing}` is missing"))
                    .help("a cluster block sets `nodes`, `devices_per_node` and `device`"),
                );
            }
        }
        ok.then(|| Cluster {
            name: name.name.clone(),
            nodes: nodes.unwrap(),
            devices_per_node: per_node.unwrap(),
            device: device.unwrap(),
            intra_bandwidth: intra,
            inter_bandwidth: inter,
            is_cpu: false,
            origin,
        })
    }

    fn unknown_setting(
        &mut self,
        frame: &Frame,
        key: &str,
        span: Span,
        known: &[&str],
        what: &str,
    ) {
        let mut d = Diagnostic::new(
            Code::UnknownField,
            format!("a {what} has no setting `{key}`"),
            frame.file,
            span,
        )
        .primary_label("unknown setting");
        d = match rlc_syntax::closest(key, known.iter().copied(), 2) {
            Some(near) => d.help(format!("did you mean `{near}`?")),
            None => d.help(format!("the settings are {}", known.join(", "))),
        };
        self.diags.push(d);
    }

    /// A positive integer constant, or a diagnostic.
    fn positive(&mut self, frame: &Frame, v: &Val, span: Span, what: &str) -> Option<u64> {
        match v.as_int() {
            Some(n) if n > 0 => Some(n as u64),
            Some(n) => {
                self.diags.push(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!("`{what}` must be at least 1, found {n}"),
                        frame.file,
                        span,
                    )
                    .primary_label("not positive"),
                );
                None
            }
            None => {
                if !v.is_error() {
                    self.diags.push(
                        Diagnostic::new(
                            Code::NotConstant,
                            format!(
                                "`{what}` must be an integer known before the job starts, found {}",
                                v.describe()
                            ),
                            frame.file,
                            span,
                        )
                        .primary_label("not a known integer"),
                    );
                }
                None
            }
        }
    }

    fn model(&mut self, r: ItemRef, md: &ast::Model) -> Val {
        let m = self.modules.get(r.module);
        let mut frame = Frame::new(r.module, m.file, false);
        let origin = self.origin(&frame, md.name.span);
        let Some(kind) = RoleKind::from_name(&md.kind.name) else {
            let mut d = Diagnostic::new(
                Code::UnknownRoleKind,
                format!("`{}` is not a model kind", md.kind.name),
                frame.file,
                md.kind.span,
            )
            .primary_label("unknown kind");
            d = match rlc_syntax::closest(&md.kind.name, ["CausalLM", "ValueModel", "RewardModel"], 3) {
                Some(near) => d.help(format!("did you mean `{near}`? The kinds are CausalLM, ValueModel and RewardModel")),
                None => d.help("the kinds are CausalLM (generates, log-probs), ValueModel (per-token values) and RewardModel (a score per sequence)"),
            };
            return self.err(d);
        };
        let mut model = Model {
            name: md.name.name.clone(),
            kind,
            arch: None,
            arch_origin: origin,
            init: None,
            optimizer: None,
            frozen: false,
            precision: Precision::F32,
            recompute: false,
            origin,
        };
        match &md.def {
            ast::Definition::Expr(e) => match self.expr(&mut frame, e) {
                Val::Init(init) if matches!(*init, InitVal::Frozen(_)) => {
                    let InitVal::Frozen(src) = *init else {
                        unreachable!()
                    };
                    let base = self.program.models[src].clone();
                    model.arch = base.arch;
                    model.arch_origin = base.arch_origin;
                    model.precision = base.precision;
                    model.frozen = true;
                    model.init = Some(Init::CopyOf { model: src });
                    if base.kind != kind {
                        self.diags.push(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                format!(
                                    "`{}` is a {} but `{}` is a {}",
                                    md.name.name,
                                    kind.as_str(),
                                    base.name,
                                    base.kind.as_str()
                                ),
                                frame.file,
                                md.kind.span,
                            )
                            .primary_label("kind of the copy")
                            .label(
                                base.origin.file,
                                base.origin.span,
                                "kind of the original",
                            ),
                        );
                    }
                }
                Val::Error => return Val::Error,
                other => {
                    return self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!(
                                "a model is defined by a block or `frozen(model)`, not {}",
                                other.describe()
                            ),
                            frame.file,
                            e.span,
                        )
                        .primary_label("not a model definition"),
                    );
                }
            },
            ast::Definition::Fields(_) => {
                let fields = self
                    .definition_fields(&mut frame, &md.def)
                    .unwrap_or_default();
                let mut optim_span = None;
                for (f, v) in &fields {
                    match (f.key.name.as_str(), v) {
                        (_, Val::Error) => {}
                        ("arch", Val::Arch(a)) => {
                            model.arch = Some((**a).clone());
                            model.arch_origin = self.origin(&frame, f.span);
                        }
                        ("init", Val::Init(i)) => {
                            model.init = Some(match &**i {
                                InitVal::Random(seed) => Init::Random { seed: *seed as u64 },
                                InitVal::Hf(p) => Init::HuggingFace { path: p.clone() },
                                InitVal::Load(p) => Init::Checkpoint { path: p.clone() },
                                InitVal::Frozen(src) => Init::CopyOf { model: *src },
                            })
                        }
                        ("optim", Val::Optim(o)) => {
                            model.optimizer = Some((**o).clone());
                            optim_span = Some(f.key.span);
                        }
                        ("frozen", Val::Bool(Some(b))) => model.frozen = *b,
                        ("recompute", Val::Bool(Some(b))) => model.recompute = *b,
                        ("precision", Val::Str(Some(p))) => {
                            model.precision = match p.as_str() {
                                "bf16" => Precision::Bf16,
                                "f16" => Precision::F16,
                                _ => Precision::F32,
                            }
                        }
                        (key @ ("arch" | "init" | "optim" | "frozen" | "recompute"), v) => {
                            let want = match key {
                                "arch" => "an architecture (`tiny_gpt(…)`, a preset, or `arch(…)`)",
                                "init" => "`random(seed: …)`, `hf(\"path\")` or `load(\"path\")`",
                                "optim" => "an optimiser (`adamw(lr: …)`)",
                                _ => "`true` or `false`",
                            };
                            self.diags.push(
                                Diagnostic::new(
                                    Code::TypeMismatch,
                                    format!("`{key}` expects {want}, found {}", v.describe()),
                                    frame.file,
                                    f.value.span,
                                )
                                .primary_label("wrong kind of value"),
                            );
                        }
                        (key, _) => self.unknown_setting(
                            &frame,
                            key,
                            f.key.span,
                            &["arch", "init", "optim", "frozen", "precision", "recompute"],
                            "model",
                        ),
                    }
                }
                if model.frozen
                    && let Some(span) = optim_span
                {
                    self.diags.push(
                        Diagnostic::new(
                            Code::UpdateFrozen,
                            format!("`{}` is frozen but has an optimiser", md.name.name),
                            frame.file,
                            span,
                        )
                        .primary_label("optimiser of a frozen model")
                        .help("remove `optim`, or `frozen = true`"),
                    );
                    model.optimizer = None;
                }
                if model.arch.is_none()
                    && !fields
                        .iter()
                        .any(|(f, v)| f.key.name == "arch" || v.is_error())
                {
                    self.diags.push(
                        Diagnostic::new(
                            Code::MissingSetting,
                            format!("model `{}` has no `arch`", md.name.name),
                            frame.file,
                            md.name.span,
                        )
                        .primary_label("`arch` is missing")
                        .help("set `arch = tiny_gpt(…)` or a preset from `std.models`"),
                    );
                }
                if !model.frozen
                    && model.optimizer.is_none()
                    && !fields.iter().any(|(_, v)| v.is_error())
                {
                    model.frozen = true;
                }
            }
        }
        self.program.models.push(model);
        let id = self.program.models.len() - 1;
        self.model_ids.insert(r, id);
        Val::Model(id)
    }

    fn dataset(&mut self, r: ItemRef, d: &ast::Dataset) -> Val {
        let m = self.modules.get(r.module);
        let mut frame = Frame::new(r.module, m.file, false);
        match &d.def {
            ast::Definition::Expr(e) => match self.expr(&mut frame, e) {
                Val::Dataset(spec) => {
                    let mut spec = (*spec).clone();
                    spec.name = d.name.name.clone();
                    Val::Dataset(Rc::new(spec))
                }
                Val::Error => Val::Error,
                other => self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!(
                            "a dataset is `jsonl(…)` or `task(…)`, not {}",
                            other.describe()
                        ),
                        frame.file,
                        e.span,
                    )
                    .primary_label("not a dataset"),
                ),
            },
            ast::Definition::Fields(block) => self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    "a dataset is defined with `=`",
                    frame.file,
                    block.span,
                )
                .primary_label("not a dataset")
                .help("write `dataset prompts = jsonl(\"prompts.jsonl\", field: \"prompt\")`"),
            ),
        }
    }

    fn check_struct(&mut self, module: usize, s: &ast::StructDef) {
        let file = self.modules.get(module).file;
        let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
        for f in &s.fields {
            if let Some(first) = seen.insert(&f.name.name, f.name.span) {
                self.diags.push(duplicate_field(file, &f.name, first));
            }
            self.type_expr(module, &f.ty);
        }
    }

    // ----------------------------------------------------------------------------------------
    // Types

    /// The value a declared type stands for.
    fn type_expr(&mut self, module: usize, ty: &ast::TypeExpr) -> Val {
        let file = self.modules.get(module).file;
        let name = ty.name.name.as_str();
        if let Some(dtype) = DType::from_name(name) {
            let dims = ty
                .dims
                .iter()
                .flatten()
                .map(|d| match d {
                    ast::Dim::Named(i) => Dim::Sym(i.name.clone()),
                    ast::Dim::Size(n, _) => Dim::Size(*n),
                })
                .collect();
            return Val::Tensor(TensorTy { dtype, dims });
        }
        if ty.dims.is_some() {
            return self.err(
                Diagnostic::new(
                    Code::UnknownType,
                    format!("`{name}` is not an element type: it cannot have dimensions"),
                    file,
                    ty.span,
                )
                .primary_label("not a tensor type"),
            );
        }
        match name {
            "Rollout" => Val::Record(Rc::new(rollout_record(
                Dim::Sym("B".into()),
                Dim::Sym("T".into()),
            ))),
            "Arch" | "Device" | "Cluster" | "Dataset" | "Init" | "Optim" | "int" => Val::Error,
            _ => {
                if let Some(Binding::Item { module: m, index }) =
                    self.modules.get(module).lookup(module, name)
                {
                    self.used_imports.insert((module, name.to_string()));
                    if let ItemKind::Struct(s) = &self.modules.get(m).item(index).kind {
                        let fields = s
                            .fields
                            .iter()
                            .map(|f| (f.name.name.clone(), self.type_expr(m, &f.ty)))
                            .collect();
                        return Val::Record(Rc::new(RecordVal {
                            name: name.to_string(),
                            fields,
                        }));
                    }
                }
                let known = [
                    "f32", "bf16", "f16", "i32", "i64", "bool", "Tokens", "Mask", "Rollout",
                ];
                let mut d = Diagnostic::new(
                    Code::UnknownType,
                    format!("unknown type `{name}`"),
                    file,
                    ty.name.span,
                )
                .primary_label("not a type");
                if let Some(near) = rlc_syntax::closest(name, known, 2) {
                    d = d.help(format!("did you mean `{near}`?"));
                }
                self.err(d)
            }
        }
    }

    /// Checks that `found` may stand where `want` is declared (returns, typed `let`s).
    fn expect_assignable(&mut self, frame: &Frame, want: &Val, found: &Val, span: Span) {
        if want.is_error() || found.is_error() {
            return;
        }
        if let (Some(w), Some(f)) = (want.as_tensor(), found.as_tensor())
            && let Val::Tensor(_) = want
        {
            if let Err(msg) = shapes::assignable(&w, &f) {
                let code = if msg.dtype {
                    Code::DtypeMismatch
                } else {
                    Code::ShapeMismatch
                };
                self.diags.push(
                    Diagnostic::new(
                        code,
                        format!("expected `{w}`, found `{f}`"),
                        frame.file,
                        span,
                    )
                    .primary_label(msg.text),
                );
            }
            return;
        }
        if std::mem::discriminant(want) != std::mem::discriminant(found)
            && !matches!(want, Val::Record(_))
        {
            self.diags.push(
                Diagnostic::new(
                    Code::TypeMismatch,
                    format!("expected {}, found {}", want.describe(), found.describe()),
                    frame.file,
                    span,
                )
                .primary_label("wrong kind of value"),
            );
        }
    }

    // ----------------------------------------------------------------------------------------
    // Functions

    /// A function whose parameters are all typed is checked once, on its own; one with untyped
    /// parameters is a configuration helper, checked where it is called.
    fn check_fn(&mut self, module: usize, f: &ast::FnDef) {
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

    fn param_value(&mut self, frame: &mut Frame, p: &ast::Param) -> Val {
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

    fn close_scope(&mut self, frame: &mut Frame) {
        let scope = frame.scopes.pop().unwrap_or_default();
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
    fn block(&mut self, frame: &mut Frame, b: &ast::Block) -> Val {
        let mut last = Val::Unit;
        for (i, s) in b.stmts.iter().enumerate() {
            let v = self.stmt(frame, s);
            if i + 1 == b.stmts.len() && matches!(s.kind, StmtKind::Expr(_)) {
                last = v;
            }
        }
        last
    }

    fn stmt(&mut self, frame: &mut Frame, s: &ast::Stmt) -> Val {
        match &s.kind {
            StmtKind::Let { name, ty, value } => {
                if let Some(first) = frame
                    .scopes
                    .last()
                    .and_then(|s| s.iter().find(|l| l.name == name.name))
                {
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

    // ----------------------------------------------------------------------------------------
    // Expressions

    pub(crate) fn expr(&mut self, frame: &mut Frame, e: &Expr) -> Val {
        let v = self.expr_inner(frame, e);
        if !matches!(v, Val::Unit | Val::Error) {
            self.types
                .insert((frame.file, e.span.start, e.span.end), display_val(&v));
        }
        v
    }

    fn expr_inner(&mut self, frame: &mut Frame, e: &Expr) -> Val {
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
        }
    }

    fn name(&mut self, frame: &mut Frame, ident: &ast::Ident) -> Val {
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
                let mut names = frame.names();
                names.extend(self.modules.get(module).items.keys().cloned());
                names.extend(
                    self.modules
                        .get(module)
                        .imports
                        .iter()
                        .map(|i| i.name.clone()),
                );
                let mut d = Diagnostic::new(
                    Code::UndefinedName,
                    format!("cannot find `{}` in this scope", ident.name),
                    frame.file,
                    ident.span,
                )
                .primary_label("not found");
                if let Some(near) =
                    rlc_syntax::closest(&ident.name, names.iter().map(String::as_str), 2)
                {
                    d = d.help(format!("did you mean `{near}`?"));
                } else if ["True", "False"].contains(&ident.name.as_str()) {
                    d = d.help(format!("booleans are `{}`", ident.name.to_lowercase()));
                }
                self.err(d)
            }
        }
    }

    fn binding_value(&mut self, b: Binding) -> Val {
        match b {
            Binding::Module(m) => Val::Module(m),
            Binding::Item { module, index } => self.item_value(ItemRef { module, index }),
        }
    }

    fn member(&mut self, frame: &mut Frame, base: &Val, name: &ast::Ident) -> Val {
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
                    None => {
                        let names: Vec<&str> = module.items.keys().map(String::as_str).collect();
                        let mut d = Diagnostic::new(Code::NoSuchItem, format!("`{}` has no item `{}`", module.name, name.name), frame.file, name.span)
                            .primary_label("not found");
                        if let Some(near) = rlc_syntax::closest(&name.name, names, 2) {
                            d = d.help(format!("did you mean `{near}`?"));
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
                "vocab" => match d.vocab {
                    Some(v) => Val::Int(Some(v)),
                    None => self.err(
                        Diagnostic::new(Code::NotConstant, format!("the vocabulary of `{}` is set by the model's tokenizer, not the dataset", d.name), frame.file, name.span)
                            .primary_label("unknown vocabulary"),
                    ),
                },
                "sample" | "score" => self.err(
                    Diagnostic::new(Code::TypeMismatch, format!("`{}` is a method: call it", name.name), frame.file, name.span).primary_label("not a value"),
                ),
                _ => self.no_field(frame, "a dataset", name, vec!["vocab", "sample", "score"]),
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

    fn no_field(&mut self, frame: &Frame, what: &str, name: &ast::Ident, known: Vec<&str>) -> Val {
        let mut d = Diagnostic::new(
            Code::UnknownField,
            format!("{what} has no field `{}`", name.name),
            frame.file,
            name.span,
        )
        .primary_label("no such field");
        d = match rlc_syntax::closest(&name.name, known.iter().copied(), 2) {
            Some(near) => d.help(format!("did you mean `{near}`?")),
            None => d.help(format!("the fields are {}", known.join(", "))),
        };
        self.err(d)
    }

    fn index(&mut self, frame: &mut Frame, e: &Expr, base: Val, indices: &[Expr]) -> Val {
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

    fn unary(&mut self, frame: &Frame, op: UnaryOp, v: Val, span: Span) -> Val {
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

    fn binary(
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
                let code = if msg.dtype {
                    Code::DtypeMismatch
                } else {
                    Code::ShapeMismatch
                };
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

    fn scan(&mut self, frame: &mut Frame, scan: &ast::Scan, span: Span) -> Val {
        let axis = scan.axis.name.clone();
        // The scanned tensors: parameters in scope that have the axis.
        let full = frame
            .scopes
            .iter()
            .flatten()
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
        frame.scopes.push(Vec::new());
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
        frame.scopes.pop();
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

    // ----------------------------------------------------------------------------------------
    // Calls

    fn call(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        callee: &Expr,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> Val {
        // Methods: role operations and dataset methods.
        if let ExprKind::Member { base, name } = &callee.kind {
            let b = self.expr(frame, base);
            if (matches!(b, Val::Model(_))
                || matches!(&b, Val::Dataset(_) if name.name == "sample" || name.name == "score"))
                && !frame.in_pipeline
            {
                return self.err(
                    Diagnostic::new(
                        Code::NotConstant,
                        format!(
                            "`{}` runs during training: it belongs in a pipeline",
                            name.name
                        ),
                        frame.file,
                        name.span,
                    )
                    .primary_label("not known before the job starts")
                    .help("move the call into the pipeline's loop"),
                );
            }
            match &b {
                Val::Model(m) => return self.role_call(frame, e, *m, name, args, closure),
                Val::Dataset(d) => return self.dataset_call(frame, e, d.clone(), name, args),
                Val::Error => {
                    self.eval_args(frame, args);
                    return Val::Error;
                }
                _ => {
                    let f = self.member(frame, &b, name);
                    return self.apply(frame, e, f, callee.span, args, closure);
                }
            }
        }
        if let ExprKind::Name(ident) = &callee.kind {
            let shadowed = frame.lookup(&ident.name).is_some()
                || self
                    .modules
                    .get(frame.module)
                    .lookup(frame.module, &ident.name)
                    .is_some();
            if !shadowed && let Some(b) = builtins::lookup(&ident.name) {
                self.no_closure(frame, closure);
                return self.builtin(frame, e, b, &ident.name, args);
            }
        }
        let f = self.expr(frame, callee);
        self.apply(frame, e, f, callee.span, args, closure)
    }

    fn no_closure(&mut self, frame: &Frame, closure: Option<&ast::Closure>) {
        if let Some(c) = closure {
            self.diags.push(
                Diagnostic::new(
                    Code::TypeMismatch,
                    "only `update` takes a block",
                    frame.file,
                    c.span,
                )
                .primary_label("unexpected block"),
            );
        }
    }

    fn eval_args(&mut self, frame: &mut Frame, args: &[ast::Arg]) -> Vec<Val> {
        args.iter().map(|a| self.expr(frame, &a.value)).collect()
    }

    fn apply(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        f: Val,
        callee_span: Span,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> Val {
        self.no_closure(frame, closure);
        match f {
            Val::Fn(r) => self.call_fn(frame, e, r, args),
            Val::Error => {
                self.eval_args(frame, args);
                Val::Error
            }
            other => {
                self.eval_args(frame, args);
                self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!("{} cannot be called", other.describe()),
                        frame.file,
                        callee_span,
                    )
                    .primary_label("not a function"),
                )
            }
        }
    }

    /// Matches call arguments to parameter names: positional first, then by name. Reports
    /// unknown, repeated, missing and surplus arguments.
    fn bind_args<'a>(
        &mut self,
        frame: &Frame,
        call_span: Span,
        what: &str,
        params: &[(&str, bool)],
        args: &'a [ast::Arg],
    ) -> Option<Vec<Option<&'a ast::Arg>>> {
        let mut bound: Vec<Option<&ast::Arg>> = vec![None; params.len()];
        let mut ok = true;
        let mut positional = 0;
        for a in args {
            match &a.name {
                None => {
                    if positional >= params.len() {
                        ok = false;
                        self.diags.push(
                            Diagnostic::new(
                                Code::WrongArity,
                                format!(
                                    "{what} takes {} argument{}, found more",
                                    params.len(),
                                    if params.len() == 1 { "" } else { "s" }
                                ),
                                frame.file,
                                a.span,
                            )
                            .primary_label("surplus argument"),
                        );
                    } else {
                        bound[positional] = Some(a);
                    }
                    positional += 1;
                }
                Some(n) => match params.iter().position(|(p, _)| *p == n.name) {
                    Some(i) if bound[i].is_some() => {
                        ok = false;
                        self.diags.push(
                            Diagnostic::new(
                                Code::UnknownArgument,
                                format!("`{}` is given twice", n.name),
                                frame.file,
                                n.span,
                            )
                            .primary_label("repeated argument")
                            .label(
                                frame.file,
                                bound[i].unwrap().span,
                                "first given here",
                            ),
                        );
                    }
                    Some(i) => bound[i] = Some(a),
                    None => {
                        ok = false;
                        let names: Vec<&str> = params.iter().map(|(p, _)| *p).collect();
                        let mut d = Diagnostic::new(
                            Code::UnknownArgument,
                            format!("{what} has no parameter `{}`", n.name),
                            frame.file,
                            n.span,
                        )
                        .primary_label("unknown argument");
                        d = match rlc_syntax::closest(&n.name, names.iter().copied(), 2) {
                            Some(near) => d.help(format!("did you mean `{near}`?")),
                            None => d.help(format!("the parameters are {}", names.join(", "))),
                        };
                        self.diags.push(d);
                    }
                },
            }
        }
        for (i, (p, required)) in params.iter().enumerate() {
            if *required && bound[i].is_none() && ok {
                ok = false;
                self.diags.push(
                    Diagnostic::new(
                        Code::UnknownArgument,
                        format!("{what} needs the argument `{p}`"),
                        frame.file,
                        call_span,
                    )
                    .primary_label(format!("`{p}` is missing")),
                );
            }
        }
        ok.then_some(bound)
    }

    fn call_fn(&mut self, frame: &mut Frame, e: &Expr, r: ItemRef, args: &[ast::Arg]) -> Val {
        let module = self.modules.get(r.module);
        let ItemKind::Fn(f) = &module.item(r.index).kind else {
            self.eval_args(frame, args);
            return self.err(
                Diagnostic::new(Code::TypeMismatch, "not a function", frame.file, e.span)
                    .primary_label("not callable"),
            );
        };
        let what = format!("`{}`", f.name.name);
        let params: Vec<(&str, bool)> = f
            .params
            .iter()
            .map(|p| (p.name.name.as_str(), p.default.is_none()))
            .collect();
        let Some(bound) = self.bind_args(frame, e.span, &what, &params, args) else {
            self.eval_args(frame, args);
            return Val::Error;
        };
        let arg_vals: Vec<Option<(Val, Span)>> = bound
            .iter()
            .map(|a| a.map(|a| (self.expr(frame, &a.value), a.value.span)))
            .collect();
        self.group_of_one(frame, r, &f.name, args);
        let inline = f.params.iter().any(|p| p.ty.is_none())
            || f.ret
                .as_ref()
                .is_some_and(|t| DType::from_name(&t.name.name).is_none());
        if inline {
            return self.inline_call(frame, e, r, f, arg_vals);
        }
        // A typed function: check arguments against the signature, unifying dimensions.
        let mut unifier = Unifier::default();
        let mut failed = false;
        for (p, a) in f.params.iter().zip(&arg_vals) {
            let Some((val, span)) = a else { continue };
            if val.is_error() {
                failed = true;
                continue;
            }
            let want = self.type_expr(r.module, p.ty.as_ref().unwrap());
            let (Some(wt), Some(at)) = (want.as_tensor(), val.as_tensor()) else {
                if !want.is_error() && std::mem::discriminant(&want) != std::mem::discriminant(val)
                {
                    failed = true;
                    self.diags.push(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!(
                                "argument `{}` of {what} expects {}, found {}",
                                p.name.name,
                                want.describe(),
                                val.describe()
                            ),
                            frame.file,
                            *span,
                        )
                        .primary_label("wrong kind of value")
                        .label(
                            module.file,
                            p.span,
                            "parameter declared here",
                        ),
                    );
                }
                continue;
            };
            if let Err(msg) = unifier.unify(
                &p.name.name,
                &wt,
                &at,
                matches!(val, Val::Int(_) | Val::Float(_)),
            ) {
                failed = true;
                let code = if msg.dtype {
                    Code::DtypeMismatch
                } else {
                    Code::ShapeMismatch
                };
                self.diags.push(
                    Diagnostic::new(
                        code,
                        format!(
                            "argument `{}` of {what} is `{at}`, but the parameter is `{wt}`",
                            p.name.name
                        ),
                        frame.file,
                        *span,
                    )
                    .primary_label(msg.text)
                    .label(module.file, p.span, "parameter declared here")
                    .help(msg.help),
                );
            }
        }
        if failed {
            return Val::Error;
        }
        match &f.ret {
            Some(ret) => match self.type_expr(r.module, ret) {
                Val::Tensor(t) => Val::Tensor(unifier.apply(&t)),
                other => other,
            },
            None => Val::Unit,
        }
    }

    /// A group-based estimator (one whose body reduces over groups) fed the group ids of a
    /// rollout with one sample per prompt: every advantage is zero and nothing is learned.
    fn group_of_one(
        &mut self,
        frame: &mut Frame,
        r: ItemRef,
        name: &ast::Ident,
        args: &[ast::Arg],
    ) {
        if !self.uses_groups(r, &mut BTreeSet::new()) {
            return;
        }
        for a in args {
            let ExprKind::Member { base, name: field } = &a.value.kind else {
                continue;
            };
            let ExprKind::Name(var) = &base.kind else {
                continue;
            };
            if field.name != "group" {
                continue;
            }
            let Some(Val::Rollout(_, info)) = frame.lookup(&var.name).map(|l| l.val.clone()) else {
                continue;
            };
            if info.group_size == Some(1) {
                self.diags.push(
                    Diagnostic::new(Code::GroupOfOne, format!("`{}` compares the samples of each prompt, but `{}` has one sample per prompt", name.name, var.name), frame.file, a.value.span)
                        .primary_label("groups of one")
                        .label(info.group_origin.file, info.group_origin.span, "n = 1 here")
                        .help("generate several samples per prompt (e.g. `n: 8`): with one, every advantage is 0 and the policy never changes"),
                );
            }
        }
    }

    /// Whether a function's body uses a group reduction, directly or through the functions it calls.
    fn uses_groups(&self, r: ItemRef, seen: &mut BTreeSet<ItemRef>) -> bool {
        if !seen.insert(r) {
            return false;
        }
        let module = self.modules.get(r.module);
        let ItemKind::Fn(f) = &module.item(r.index).kind else {
            return false;
        };
        let mut callees = Vec::new();
        for s in &f.body.stmts {
            collect_callees(s, &mut callees);
        }
        callees.iter().any(|c| {
            c.starts_with("group_")
                || matches!(module.lookup(r.module, c), Some(Binding::Item { module, index }) if self.uses_groups(ItemRef { module, index }, seen))
        })
    }

    /// A configuration helper: evaluate its body with the arguments bound.
    fn inline_call(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        r: ItemRef,
        f: &ast::FnDef,
        args: Vec<Option<(Val, Span)>>,
    ) -> Val {
        if self.inline_depth >= MAX_INLINE_DEPTH {
            return self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    format!("`{}` calls itself too deeply", f.name.name),
                    frame.file,
                    e.span,
                )
                .primary_label("recursion"),
            );
        }
        let file = self.modules.get(r.module).file;
        let mut inner = Frame::new(r.module, file, false);
        for (p, a) in f.params.iter().zip(args) {
            let v = match a {
                Some((v, _)) => v,
                None => p
                    .default
                    .as_ref()
                    .map_or(Val::Error, |d| self.expr(&mut inner, d)),
            };
            inner.bind(&p.name.name, v, p.name.span, false);
        }
        self.inline_depth += 1;
        let v = self.block(&mut inner, &f.body);
        self.inline_depth -= 1;
        match v {
            Val::Arch(a) if a.preset.is_none() => Val::Arch(Rc::new(program::Arch {
                preset: Some(f.name.name.clone()),
                ..(*a).clone()
            })),
            other => other,
        }
    }

    fn builtin(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        b: Builtin,
        name: &str,
        args: &[ast::Arg],
    ) -> Val {
        let what = format!("`{name}`");
        let Some(bound) = self.bind_args(frame, e.span, &what, b.params, args) else {
            self.eval_args(frame, args);
            return Val::Error;
        };
        let mut vals: Vec<Option<(Val, Span)>> = Vec::with_capacity(bound.len());
        let mut axis: Option<ast::Ident> = None;
        for (i, a) in bound.iter().enumerate() {
            match a {
                Some(a) if b.params[i].0 == "over" => {
                    match &a.value.kind {
                        ExprKind::Name(n) => axis = Some(n.clone()),
                        _ => {
                            self.diags.push(
                                Diagnostic::new(
                                    Code::UnknownAxis,
                                    "`over:` takes the name of an axis, e.g. `over: T`",
                                    frame.file,
                                    a.value.span,
                                )
                                .primary_label("not an axis name"),
                            );
                            return Val::Error;
                        }
                    }
                    vals.push(None);
                }
                Some(a) => {
                    let v = self.expr(frame, &a.value);
                    vals.push(Some((v, a.value.span)));
                }
                None => vals.push(None),
            }
        }
        if vals.iter().flatten().any(|(v, _)| v.is_error()) {
            return Val::Error;
        }
        let ctx = builtins::Ctx {
            file: frame.file,
            call: e.span,
            name,
            axis: axis.as_ref(),
        };
        match builtins::apply(b, ctx, &vals) {
            Ok(v) => v,
            Err(d) => self.err(*d),
        }
    }

    fn dataset_call(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        d: Rc<DatasetSpec>,
        name: &ast::Ident,
        args: &[ast::Arg],
    ) -> Val {
        match name.name.as_str() {
            "sample" => {
                let Some(bound) = self.bind_args(frame, e.span, "`sample`", &[("n", true)], args)
                else {
                    return Val::Error;
                };
                let arg = bound[0].unwrap();
                let v = self.expr(frame, &arg.value);
                if v.is_error() {
                    return Val::Error;
                }
                let count = v.as_int();
                match count {
                    None => self.diags.push(
                        Diagnostic::new(
                            Code::NotConstant,
                            format!("the number of prompts must be known before the job starts, found {}", v.describe()),
                            frame.file,
                            arg.value.span,
                        )
                        .primary_label("not a known integer"),
                    ),
                    Some(n) if n < 1 => self.diags.push(
                        Diagnostic::new(Code::InvalidSampling, "at least one prompt must be sampled", frame.file, arg.value.span)
                            .primary_label("not positive"),
                    ),
                    Some(_) => {}
                }
                Val::Prompts(Rc::new(PromptsVal {
                    dataset: d,
                    count,
                    count_origin: self.origin(frame, arg.value.span),
                }))
            }
            "score" => {
                let Some(bound) =
                    self.bind_args(frame, e.span, "`score`", &[("rollout", true)], args)
                else {
                    return Val::Error;
                };
                match self.expr(frame, &bound[0].unwrap().value) {
                    Val::Rollout(r, _) => rollout_rows(&r).map_or(Val::Error, |rows| {
                        Val::Tensor(TensorTy {
                            dtype: DType::F32,
                            dims: vec![rows],
                        })
                    }),
                    Val::Error => Val::Error,
                    other => self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!("`score` takes a rollout, found {}", other.describe()),
                            frame.file,
                            bound[0].unwrap().span,
                        )
                        .primary_label("not a rollout"),
                    ),
                }
            }
            _ => self.no_field(frame, "a dataset", name, vec!["sample", "score", "vocab"]),
        }
    }

    // ----------------------------------------------------------------------------------------
    // Role operations

    fn role_call(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        m: usize,
        name: &ast::Ident,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> Val {
        let op = match name.name.as_str() {
            "generate" => Op::Generate,
            "logprobs" => Op::Logprobs,
            "values" => Op::Values,
            "score" => Op::Score,
            "update" => Op::Update,
            other => {
                self.eval_args(frame, args);
                let mut d = Diagnostic::new(
                    Code::UnsupportedOperation,
                    format!("a model has no operation `{other}`"),
                    frame.file,
                    name.span,
                )
                .primary_label("unknown operation");
                d = match rlc_syntax::closest(
                    other,
                    ["generate", "logprobs", "values", "score", "update"],
                    2,
                ) {
                    Some(near) => d.help(format!("did you mean `{near}`?")),
                    None => {
                        d.help("the operations are generate, logprobs, values, score and update")
                    }
                };
                return self.err(d);
            }
        };
        let model = self.program.models[m].clone();
        if !model.kind.supports(op) {
            self.eval_args(frame, args);
            let can: Vec<&str> = [Op::Generate, Op::Logprobs, Op::Values, Op::Score]
                .into_iter()
                .filter(|o| model.kind.supports(*o))
                .map(Op::as_str)
                .collect();
            return self.err(
                Diagnostic::new(
                    Code::UnsupportedOperation,
                    format!(
                        "`{}` is a {}: it cannot `{}`",
                        model.name,
                        model.kind.as_str(),
                        op.as_str()
                    ),
                    frame.file,
                    name.span,
                )
                .primary_label(format!("not an operation of a {}", model.kind.as_str()))
                .label(
                    model.origin.file,
                    model.origin.span,
                    format!("declared a {} here", model.kind.as_str()),
                )
                .help(format!(
                    "a {} can {} and update",
                    model.kind.as_str(),
                    can.join(", ")
                )),
            );
        }
        if op != Op::Update {
            self.no_closure(frame, closure);
        }
        // The operation's name, not the whole call: labels on its arguments stay readable.
        let origin = self.origin(frame, name.span);
        match op {
            Op::Generate => self.generate(frame, e, m, args, origin),
            Op::Logprobs | Op::Values | Op::Score => {
                let Some(bound) = self.bind_args(
                    frame,
                    e.span,
                    &format!("`{}`", op.as_str()),
                    &[("rollout", true)],
                    args,
                ) else {
                    return Val::Error;
                };
                let a = bound[0].unwrap();
                let (rec, info) = match self.expr(frame, &a.value) {
                    Val::Rollout(r, i) => (r, i),
                    Val::Error => return Val::Error,
                    other => {
                        return self.err(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                format!(
                                    "`{}` takes a rollout, found {}",
                                    op.as_str(),
                                    other.describe()
                                ),
                                frame.file,
                                a.value.span,
                            )
                            .primary_label("not a rollout"),
                        );
                    }
                };
                self.vocab_agrees(frame, m, &info, name.span);
                self.record_call(m, op, &info, origin, None, None);
                let rows = rollout_rows(&rec).unwrap_or(Dim::Sym("B".into()));
                let resp = rollout_resp(&rec).unwrap_or(Dim::Sym("T".into()));
                let dims = if op == Op::Score {
                    vec![rows]
                } else {
                    vec![rows, resp]
                };
                Val::Tensor(TensorTy {
                    dtype: DType::F32,
                    dims,
                })
            }
            Op::Update => self.update(frame, e, m, name, args, closure, origin),
        }
    }

    /// Policy and reference (and the task) must share a vocabulary: log-probs of one model's
    /// tokens under another tokenizer are meaningless.
    fn vocab_agrees(&mut self, frame: &Frame, m: usize, info: &RolloutInfo, at: Span) {
        let (Some(a), Some(b)) = (
            &self.program.models[m].arch,
            &self.program.models[info.model].arch,
        ) else {
            return;
        };
        if a.vocab != b.vocab {
            let (me, generator) = (&self.program.models[m], &self.program.models[info.model]);
            self.diags.push(
                Diagnostic::new(
                    Code::VocabMismatch,
                    format!(
                        "`{}` has a vocabulary of {} but the rollout was generated by `{}` with {}",
                        me.name, a.vocab, generator.name, b.vocab
                    ),
                    frame.file,
                    at,
                )
                .primary_label("reads tokens of another vocabulary")
                .label(
                    me.arch_origin.file,
                    me.arch_origin.span,
                    format!("vocab {}", a.vocab),
                )
                .label(
                    generator.arch_origin.file,
                    generator.arch_origin.span,
                    format!("vocab {}", b.vocab),
                )
                .help("models that score each other's tokens must share a tokenizer"),
            );
        }
    }

    fn record_call(
        &mut self,
        m: usize,
        op: Op,
        info: &RolloutInfo,
        origin: Origin,
        epochs: Option<Sourced<i64>>,
        minibatch: Option<Sourced<i64>>,
    ) {
        self.calls.push(RoleCall {
            model: m,
            op,
            batch: info.rows.map(|v| Sourced {
                value: v,
                origin: info.rows_origin,
            }),
            prompt_len: info.prompt_len.map(|v| Sourced {
                value: v,
                origin: info.dataset.origin,
            }),
            response_len: info.response_len.map(|v| Sourced {
                value: v,
                origin: info.response_origin,
            }),
            sampling: None,
            epochs,
            minibatch,
            origin,
        });
    }

    fn const_arg(
        &mut self,
        frame: &mut Frame,
        a: Option<&ast::Arg>,
        what: &str,
        default: Val,
    ) -> Option<(Val, Origin)> {
        match a {
            None => Some((default, Origin::default())),
            Some(a) => {
                let v = self.expr(frame, &a.value);
                if v.is_error() {
                    return None;
                }
                if v.as_float().is_none() {
                    self.diags.push(
                        Diagnostic::new(
                            Code::NotConstant,
                            format!(
                                "`{what}` must be a number known before the job starts, found {}",
                                v.describe()
                            ),
                            frame.file,
                            a.value.span,
                        )
                        .primary_label("not a known number"),
                    );
                    return None;
                }
                Some((v, self.origin(frame, a.value.span)))
            }
        }
    }

    fn generate(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        m: usize,
        args: &[ast::Arg],
        origin: Origin,
    ) -> Val {
        let params = [
            ("prompts", true),
            ("n", false),
            ("max_new", true),
            ("temperature", false),
            ("top_p", false),
            ("top_k", false),
        ];
        let Some(bound) = self.bind_args(frame, e.span, "`generate`", &params, args) else {
            self.eval_args(frame, args);
            return Val::Error;
        };
        let prompts = match self.expr(frame, &bound[0].unwrap().value) {
            Val::Prompts(p) => p,
            Val::Error => return Val::Error,
            other => {
                return self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!(
                            "`generate` takes prompts (`dataset.sample(n)`), found {}",
                            other.describe()
                        ),
                        frame.file,
                        bound[0].unwrap().span,
                    )
                    .primary_label("not prompts"),
                );
            }
        };
        let n = self.const_arg(frame, bound[1], "n", Val::Int(Some(1)));
        let max_new = self.const_arg(frame, bound[2], "max_new", Val::Int(None));
        let temperature = self.const_arg(frame, bound[3], "temperature", Val::Float(Some(1.0)));
        let top_p = self.const_arg(frame, bound[4], "top_p", Val::Float(Some(1.0)));
        let top_k = bound[5].and_then(|a| self.const_arg(frame, Some(a), "top_k", Val::Int(None)));
        let (Some(n), Some(max_new), Some(temperature), Some(top_p)) =
            (n, max_new, temperature, top_p)
        else {
            return Val::Error;
        };
        let n_val = n.0.as_int();
        let rows = prompts.count.zip(n_val).map(|(c, n)| c * n);
        let max_new_val = max_new.0.as_int();
        let default_origin = |o: Origin| if o == Origin::default() { origin } else { o };
        let info = RolloutInfo {
            rows,
            rows_origin: if n.1 == Origin::default() {
                prompts.count_origin
            } else {
                n.1
            },
            prompt_len: prompts.dataset.prompt_len,
            response_len: max_new_val,
            response_origin: max_new.1,
            group_size: n_val,
            group_origin: default_origin(n.1),
            dataset: prompts.dataset.clone(),
            model: m,
        };
        let task_vocab = prompts.dataset.vocab;
        if let (Some(tv), Some(arch)) = (task_vocab, &self.program.models[m].arch)
            && arch.vocab < tv as u64
        {
            let model = &self.program.models[m];
            self.diags.push(
                Diagnostic::new(
                    Code::VocabMismatch,
                    format!(
                        "task `{}` uses {tv} tokens but `{}` has a vocabulary of {}",
                        prompts.dataset.name, model.name, arch.vocab
                    ),
                    frame.file,
                    e.span,
                )
                .primary_label("generates for a task it cannot spell")
                .label(
                    model.arch_origin.file,
                    model.arch_origin.span,
                    format!("vocab {}", arch.vocab),
                )
                .help(format!(
                    "set `vocab: {}.vocab` in the model's arch",
                    prompts.dataset.name
                )),
            );
        }
        self.record_call(m, Op::Generate, &info, origin, None, None);
        let sourced_i = |(v, o): &(Val, Origin)| Sourced {
            value: v.as_int().unwrap_or(0),
            origin: default_origin(*o),
        };
        let sourced_f = |(v, o): &(Val, Origin)| Sourced {
            value: v.as_float().unwrap_or(0.0),
            origin: default_origin(*o),
        };
        self.calls.last_mut().unwrap().sampling = Some(Sampling {
            n: sourced_i(&n),
            max_new: sourced_i(&max_new),
            temperature: sourced_f(&temperature),
            top_p: sourced_f(&top_p),
            top_k: top_k.as_ref().map(sourced_i),
        });
        let rows_dim = rows.map_or(Dim::Sym("B".into()), |r| Dim::Size(r.max(0) as u64));
        let resp_dim = max_new_val.map_or(Dim::Sym("T".into()), |t| Dim::Size(t.max(0) as u64));
        Val::Rollout(Rc::new(rollout_record(rows_dim, resp_dim)), Rc::new(info))
    }

    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        m: usize,
        name: &ast::Ident,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
        origin: Origin,
    ) -> Val {
        let model = self.program.models[m].clone();
        if model.frozen {
            self.eval_args(frame, args);
            return self.err(
                Diagnostic::new(
                    Code::UpdateFrozen,
                    format!("`{}` is frozen: it cannot be updated", model.name),
                    frame.file,
                    name.span,
                )
                .primary_label("update of a frozen model")
                .label(
                    model.origin.file,
                    model.origin.span,
                    "declared frozen (or without an optimiser) here",
                )
                .help("give the model an optimiser (`optim = adamw(lr: …)`) to train it"),
            );
        }
        let params = [("rollout", true), ("epochs", false), ("minibatch", false)];
        let Some(bound) = self.bind_args(frame, e.span, "`update`", &params, args) else {
            self.eval_args(frame, args);
            return Val::Error;
        };
        let (rec, info) = match self.expr(frame, &bound[0].unwrap().value) {
            Val::Rollout(r, i) => (r, i),
            Val::Error => return Val::Error,
            other => {
                return self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!("`update` takes a rollout, found {}", other.describe()),
                        frame.file,
                        bound[0].unwrap().span,
                    )
                    .primary_label("not a rollout"),
                );
            }
        };
        let epochs = self.const_arg(frame, bound[1], "epochs", Val::Int(Some(1)));
        let minibatch = self.const_arg(frame, bound[2], "minibatch", Val::Int(info.rows));
        let sourced = |x: Option<(Val, Origin)>| {
            x.and_then(|(v, o)| {
                v.as_int().map(|value| Sourced {
                    value,
                    origin: if o == Origin::default() { origin } else { o },
                })
            })
        };
        self.record_call(
            m,
            Op::Update,
            &info,
            origin,
            sourced(epochs),
            sourced(minibatch),
        );
        let Some(closure) = closure else {
            return self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    "`update` needs a block that computes the loss",
                    frame.file,
                    e.span,
                )
                .primary_label("no loss block")
                .help(format!(
                    "write `{}.update(rollout) {{ logp -> loss }}`",
                    model.name
                )),
            );
        };
        let rows = rollout_rows(&rec).unwrap_or(Dim::Sym("B".into()));
        let resp = rollout_resp(&rec).unwrap_or(Dim::Sym("T".into()));
        let fresh = match model.kind {
            RoleKind::RewardModel => TensorTy {
                dtype: DType::F32,
                dims: vec![rows],
            },
            _ => TensorTy {
                dtype: DType::F32,
                dims: vec![rows, resp],
            },
        };
        if closure.params.len() != 1 {
            let what = match model.kind {
                RoleKind::CausalLM => "the fresh log-probs",
                RoleKind::ValueModel => "the fresh values",
                RoleKind::RewardModel => "the fresh scores",
            };
            return self.err(
                Diagnostic::new(
                    Code::WrongArity,
                    format!(
                        "the block of `update` receives one value ({what}), found {}",
                        closure.params.len()
                    ),
                    frame.file,
                    closure.span,
                )
                .primary_label("wrong number of block parameters"),
            );
        }
        frame.scopes.push(Vec::new());
        frame.bind(
            &closure.params[0].name,
            Val::Tensor(fresh),
            closure.params[0].span,
            false,
        );
        let loss = self.block(frame, &closure.body);
        frame.scopes.pop();
        let tail_span = closure.body.tail().map_or(closure.span, |t| t.span);
        match loss.as_tensor() {
            Some(t) if t.is_scalar() && t.dtype.is_float() => {}
            _ if loss.is_error() => {}
            Some(t) => {
                self.diags.push(
                    Diagnostic::new(
                        Code::LossNotScalar,
                        format!("the loss must be a scalar `f32`, found `{t}`"),
                        frame.file,
                        tail_span,
                    )
                    .primary_label(format!("`{t}`"))
                    .help("reduce it, e.g. `token_mean(loss, rollout.mask)` or `mean(loss)`"),
                );
            }
            None => {
                self.diags.push(
                    Diagnostic::new(
                        Code::LossNotScalar,
                        format!("the loss must be a scalar `f32`, found {}", loss.describe()),
                        frame.file,
                        tail_span,
                    )
                    .primary_label("not a loss"),
                );
            }
        }
        if !depends_on(&closure.body, &closure.params[0].name) {
            self.diags.push(
                Diagnostic::new(
                    Code::LossIgnoresModel,
                    format!(
                        "the loss does not use `{}`: the update would train nothing",
                        closure.params[0].name
                    ),
                    frame.file,
                    tail_span,
                )
                .primary_label("does not depend on the model's output")
                .label(
                    frame.file,
                    closure.params[0].span,
                    "the model's fresh output",
                )
                .help(format!(
                    "compute the loss from `{}`",
                    closure.params[0].name
                )),
            );
        }
        Val::Unit
    }
}

/// Whether the block's value refers to `name`, directly or through `let` bindings.
fn depends_on(block: &ast::Block, name: &str) -> bool {
    let mut tainted: BTreeSet<String> = BTreeSet::from([name.to_string()]);
    for s in &block.stmts {
        match &s.kind {
            StmtKind::Let { name, value, .. } if mentions(value, &tainted) => {
                tainted.insert(name.name.clone());
            }
            StmtKind::Expr(e) => return mentions(e, &tainted),
            _ => {}
        }
    }
    false
}

fn mentions(e: &Expr, names: &BTreeSet<String>) -> bool {
    match &e.kind {
        ExprKind::Name(n) => names.contains(&n.name),
        ExprKind::Member { base, .. } => mentions(base, names),
        // Through `stop_grad` no gradient flows: a loss that sees the model's output only there
        // trains nothing.
        ExprKind::Call { callee, .. } if matches!(&callee.kind, ExprKind::Name(n) if n.name == "stop_grad") => {
            false
        }
        ExprKind::Call { callee, args, .. } => {
            mentions(callee, names) || args.iter().any(|a| mentions(&a.value, names))
        }
        ExprKind::Index { base, indices } => {
            mentions(base, names) || indices.iter().any(|i| mentions(i, names))
        }
        ExprKind::Unary { operand, .. } => mentions(operand, names),
        ExprKind::Binary { lhs, rhs, .. } => mentions(lhs, names) || mentions(rhs, names),
        ExprKind::Paren(inner) => mentions(inner, names),
        ExprKind::Record(r) => r.fields.iter().any(|f| mentions(&f.value, names)),
        ExprKind::Scan(s) => {
            s.carries.iter().any(|c| mentions(&c.init, names))
                || s.body.stmts.iter().any(|st| stmt_mentions(st, names))
        }
        ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) => false,
    }
}

fn stmt_mentions(s: &ast::Stmt, names: &BTreeSet<String>) -> bool {
    match &s.kind {
        StmtKind::Let { value, .. }
        | StmtKind::Assign { value, .. }
        | StmtKind::Emit { value }
        | StmtKind::Expr(value) => mentions(value, names),
        _ => false,
    }
}

/// Names of the functions a statement calls.
fn collect_callees(s: &ast::Stmt, out: &mut Vec<String>) {
    fn walk(e: &Expr, out: &mut Vec<String>) {
        match &e.kind {
            ExprKind::Call { callee, args, .. } => {
                if let ExprKind::Name(n) = &callee.kind {
                    out.push(n.name.clone());
                }
                walk(callee, out);
                args.iter().for_each(|a| walk(&a.value, out));
            }
            ExprKind::Member { base, .. }
            | ExprKind::Paren(base)
            | ExprKind::Unary { operand: base, .. } => walk(base, out),
            ExprKind::Index { base, indices } => {
                walk(base, out);
                indices.iter().for_each(|i| walk(i, out));
            }
            ExprKind::Binary { lhs, rhs, .. } => {
                walk(lhs, out);
                walk(rhs, out);
            }
            ExprKind::Record(r) => r.fields.iter().for_each(|f| walk(&f.value, out)),
            ExprKind::Scan(scan) => {
                scan.carries.iter().for_each(|c| walk(&c.init, out));
                scan.body.stmts.iter().for_each(|s| collect_callees(s, out));
            }
            ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) | ExprKind::Name(_) => {}
        }
    }
    match &s.kind {
        StmtKind::Let { value, .. }
        | StmtKind::Assign { value, .. }
        | StmtKind::Emit { value }
        | StmtKind::Expr(value) => walk(value, out),
        _ => {}
    }
}

fn rollout_rows(r: &RecordVal) -> Option<Dim> {
    r.fields
        .iter()
        .find(|(n, _)| n == "group")
        .and_then(|(_, v)| v.as_tensor())
        .and_then(|t| t.dims.first().cloned())
}

fn rollout_resp(r: &RecordVal) -> Option<Dim> {
    r.fields
        .iter()
        .find(|(n, _)| n == "mask")
        .and_then(|(_, v)| v.as_tensor())
        .and_then(|t| t.dims.get(1).cloned())
}

fn duplicate_field(file: FileId, again: &ast::Ident, first: Span) -> Diagnostic {
    Diagnostic::new(
        Code::DuplicateName,
        format!("`{}` appears twice", again.name),
        file,
        again.span,
    )
    .primary_label("again here")
    .label(file, first, "first here")
}

fn ret_display(v: &Val) -> String {
    display_val(v)
}

/// How a value's type reads in hover text and messages.
pub fn display_val(v: &Val) -> String {
    match v {
        Val::Int(Some(i)) => format!("i64 = {i}"),
        Val::Int(None) => "i64".into(),
        Val::Float(Some(f)) => format!("f32 = {f}"),
        Val::Float(None) => "f32".into(),
        Val::Bool(Some(b)) => format!("bool = {b}"),
        Val::Bool(None) => "bool".into(),
        Val::Str(Some(s)) => format!("str = {s:?}"),
        Val::Str(None) => "str".into(),
        Val::Tensor(t) => t.to_string(),
        Val::Record(r) | Val::Rollout(r, _) => {
            let fields: Vec<String> = r
                .fields
                .iter()
                .map(|(n, v)| format!("{n}: {}", display_val(v)))
                .collect();
            format!("{} {{ {} }}", r.name, fields.join(", "))
        }
        Val::Arch(a) => format!(
            "Arch {{ layers: {}, hidden: {}, heads: {}, kv_heads: {}, ffn: {}, vocab: {}, max_len: {} }}",
            a.layers, a.hidden, a.heads, a.kv_heads, a.ffn, a.vocab, a.max_len
        ),
        other => other.describe(),
    }
}

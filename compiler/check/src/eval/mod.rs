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

mod calls;
mod exprs;
mod functions;
mod items;
mod roles;

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
    /// Reads the `config.json` of `hf("dir")` models that give no `arch`.
    loader: &'m dyn crate::SourceLoader,
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
    pub fn new(modules: &'m Modules, loader: &'m dyn crate::SourceLoader) -> Self {
        Evaluator {
            modules,
            loader,
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

    /// The architecture in `dir/config.json`, `dir` relative to the module's file.
    fn hf_arch(&self, frame: &Frame, dir: &str) -> Result<program::Arch, String> {
        let module = &self.modules.get(frame.module).name;
        let path = crate::modules::join_relative(module, &format!("{dir}/config.json"));
        let text = self
            .loader
            .read(&path)
            .map_err(|e| format!("it cannot be read ({e})"))?;
        crate::hf_config::arch_of(&text)
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

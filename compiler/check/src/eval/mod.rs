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
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

mod calls;
mod environments;
mod exprs;
mod functions;
mod items;
pub mod recipes;
mod roles;
mod verifiers;

/// A local binding.
#[derive(Debug)]
struct Local {
    name: String,
    /// The binding of the same name that this one hides, if any (an index in `Frame::locals`).
    hides: Option<usize>,
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
    /// The locals of every open scope, outermost first; `scope_starts` holds where each scope
    /// begins. One list rather than a list per scope, so that `by_name` can index it.
    locals: Vec<Local>,
    scope_starts: Vec<usize>,
    /// The innermost binding of each name in `locals` (which links to the ones it hides): a
    /// pipeline binds thousands of names, and searching them all at every use was quadratic.
    by_name: HashMap<String, usize, BuildHasherDefault<NameHasher>>,
    /// Inside a scan body: the axis and the dims of one row (for `x[t]`).
    scan: Option<(String, Vec<Dim>)>,
    /// Warn about unused `let` bindings (user code only).
    lint: bool,
    /// Inside a pipeline, where role operations and dataset sampling may run.
    pub(crate) in_pipeline: bool,
}

impl Frame {
    pub(crate) fn push_scope(&mut self) {
        self.scope_starts.push(self.locals.len());
    }

    /// Closes the innermost scope and returns its locals, in binding order.
    fn pop_scope(&mut self) -> Vec<Local> {
        let start = self.scope_starts.pop().unwrap_or(0);
        let scope: Vec<Local> = self.locals.drain(start..).collect();
        for l in scope.iter().rev() {
            match l.hides {
                Some(hidden) => {
                    if let Some(at) = self.by_name.get_mut(&l.name) {
                        *at = hidden;
                    }
                }
                None => {
                    self.by_name.remove(&l.name);
                }
            }
        }
        scope
    }

    fn new(module: usize, file: FileId, lint: bool) -> Self {
        Frame {
            module,
            file,
            locals: Vec::new(),
            scope_starts: vec![0],
            by_name: HashMap::default(),
            scan: None,
            lint,
            in_pipeline: false,
        }
    }

    fn lookup(&mut self, name: &str) -> Option<&mut Local> {
        let at = *self.by_name.get(name)?;
        self.locals.get_mut(at)
    }

    /// The first local called `name` in the innermost scope.
    fn first_in_scope(&self, name: &str) -> Option<&Local> {
        let start = self.scope_starts.last().copied().unwrap_or(0);
        let mut first = None;
        let mut at = self.by_name.get(name).copied();
        while let Some(i) = at.filter(|&i| i >= start) {
            first = Some(i);
            at = self.locals[i].hides;
        }
        first.map(|i| &self.locals[i])
    }

    pub(crate) fn bind(&mut self, name: &str, val: Val, span: Span, warn_unused: bool) {
        let at = self.locals.len();
        let hides = match self.by_name.get_mut(name) {
            Some(innermost) => Some(std::mem::replace(innermost, at)),
            None => {
                self.by_name.insert(name.to_string(), at);
                None
            }
        };
        self.locals.push(Local {
            name: name.to_string(),
            hides,
            val,
            span,
            used: false,
            warn_unused,
        });
    }

    pub(crate) fn file(&self) -> FileId {
        self.file
    }

    pub(crate) fn module(&self) -> usize {
        self.module
    }

    /// Whether a local binding (not an item) goes by `name`.
    pub(crate) fn has_local(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Marks the innermost binding of `name` as used (an assignment to a carried value counts:
    /// the next step reads it).
    pub(crate) fn mark_used(&mut self, name: &str) {
        if let Some(l) = self.lookup(name) {
            l.used = true;
        }
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        self.locals.iter().map(|l| l.name.as_str())
    }
}

/// FNV-1a, for the local-name index: names are short, and std's SipHash cost more than the
/// lookups it served.
pub(crate) struct NameHasher(u64);

impl Default for NameHasher {
    fn default() -> Self {
        NameHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Why an `hf(…)` folder's `config.json` gives no architecture.
enum HfProblem {
    /// There is no such file here (it may be on the machine the job runs on).
    Unreadable(String),
    /// The file is there but not a config the runtime loads.
    Unusable(String),
}

impl HfProblem {
    fn message(&self) -> &str {
        match self {
            HfProblem::Unreadable(message) | HfProblem::Unusable(message) => message,
        }
    }
}

pub use crate::types::TypeTable;
use crate::types::{RecordType, Type};

pub struct Evaluator<'m> {
    modules: &'m Modules,
    /// Reads the `config.json` of `hf("dir")` models that give no `arch`.
    loader: &'m dyn crate::SourceLoader,
    pub diags: Vec<Diagnostic>,
    pub program: Program,
    /// The type table's entries in the order they were found (see `take_types`).
    types: Vec<((FileId, u32, u32), Type)>,
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
    /// The type text of each record value met (the `Rc` keeps its address from being reused):
    /// a pipeline names the same rollout at every use, and writing its fields out each time was
    /// a third of checking a long pipeline.
    record_types: HashMap<*const RecordVal, (Rc<RecordVal>, Type)>,
    /// Names the "did you mean" search for undefined names may still compare: each search reads
    /// every name in scope, so a file of thousands of distinct unknown names among thousands of
    /// items would cost their product (20 000 of each: two minutes). Past the budget the errors
    /// stay, without the suggestion.
    suggestion_budget: usize,
    /// The calls of verifiers (by file and span), and the pipeline's `let` names bound to their
    /// results: where a per-sequence reward came from, for E1005.
    verifier_exprs: BTreeSet<(FileId, Span)>,
    verifier_names: BTreeSet<String>,
    /// Recipes being instantiated, and the instance the root's pipeline runs.
    pub(crate) recipes: crate::recipes::Recipes,
}

/// Names compared by all "did you mean" searches for undefined names of one check: about a
/// second's work, far beyond what a program written by hand needs.
const SUGGESTION_BUDGET: usize = 20_000_000;

const MAX_INLINE_DEPTH: usize = 32;

impl<'m> Evaluator<'m> {
    pub fn new(modules: &'m Modules, loader: &'m dyn crate::SourceLoader) -> Self {
        Evaluator {
            modules,
            loader,
            diags: Vec::new(),
            program: Program::default(),
            types: Vec::new(),
            memo: HashMap::new(),
            in_progress: BTreeSet::new(),
            model_ids: HashMap::new(),
            cluster_ids: HashMap::new(),
            used_imports: BTreeSet::new(),
            calls: Vec::new(),
            lints: Vec::new(),
            inline_depth: 0,
            record_types: HashMap::new(),
            suggestion_budget: SUGGESTION_BUDGET,
            verifier_exprs: BTreeSet::new(),
            verifier_names: BTreeSet::new(),
            recipes: crate::recipes::Recipes::default(),
        }
    }

    /// The type of every expression. Kept in a list while checking and sorted once (a map
    /// insert per expression cost more); the last type found for a span wins, as it did when
    /// each was inserted.
    pub fn take_types(&mut self) -> TypeTable {
        let mut types: Vec<Option<Type>> = Vec::with_capacity(self.types.len());
        let mut order: Vec<((FileId, u32, u32), usize)> = Vec::with_capacity(self.types.len());
        for (i, (key, ty)) in std::mem::take(&mut self.types).into_iter().enumerate() {
            types.push(Some(ty));
            order.push((key, i));
        }
        // By span, then by when found (small keys sort fast), so the last of a span is last.
        order.sort_unstable();
        let last_of_each = order
            .iter()
            .enumerate()
            .filter(|(n, (key, _))| order.get(n + 1).is_none_or(|(next, _)| next != key));
        last_of_each
            .filter_map(|(_, (key, i))| Some((*key, types[*i].take()?)))
            .collect()
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

    /// The type of value `v`; a record value's is made once (records are shared by every
    /// expression that reads them).
    fn type_of(&mut self, v: &Val) -> Type {
        match v {
            Val::Record(r) | Val::Rollout(r, _) => {
                if let Some((_, ty)) = self.record_types.get(&Rc::as_ptr(r)) {
                    return ty.clone();
                }
                let fields = r
                    .fields
                    .iter()
                    .map(|(n, v)| (n.clone(), self.type_of(v)))
                    .collect();
                let ty = Type::Record(std::sync::Arc::new(RecordType {
                    name: r.name.clone(),
                    fields,
                }));
                self.record_types
                    .insert(Rc::as_ptr(r), (r.clone(), ty.clone()));
                ty
            }
            Val::Int(i) => Type::Int(*i),
            Val::Float(x) => Type::Float(*x),
            Val::Bool(b) => Type::Bool(*b),
            Val::Str(s) => Type::Str(s.clone()),
            Val::Tensor(t) => Type::Tensor(t.clone()),
            other => Type::Item(display_val(other).into()),
        }
    }

    fn err(&mut self, d: Diagnostic) -> Val {
        self.diags.push(d);
        Val::Error
    }

    /// The architecture in `dir/config.json`, `dir` relative to the module's file.
    /// The architecture `dir/config.json` gives (`dir` relative to the module's file). The error
    /// says whether the file could be read at all (`HfProblem::Unreadable`).
    fn hf_arch(&self, frame: &Frame, dir: &str) -> Result<program::Arch, HfProblem> {
        let module = &self.modules.get(frame.module).name;
        let path = crate::modules::join_relative(module, &format!("{dir}/config.json"));
        let text = self
            .loader
            .read(&path)
            .map_err(|e| HfProblem::Unreadable(format!("it cannot be read ({e})")))?;
        crate::hf_config::arch_of(&text).map_err(HfProblem::Unusable)
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
                if m.refused.contains(&index) {
                    continue;
                }
                let r = ItemRef { module, index };
                match &item.kind {
                    ItemKind::Cluster(_)
                    | ItemKind::Model(_)
                    | ItemKind::Dataset(_)
                    | ItemKind::Verifier(_)
                    | ItemKind::Environment(_)
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
            let m = self.modules.get(module);
            for (index, item) in m.ast.items.iter().enumerate() {
                if m.refused.contains(&index) {
                    continue;
                }
                match &item.kind {
                    ItemKind::Place(p) => self.place(module, index, p),
                    ItemKind::Pipeline(p) if crate::recipes::is_generic(p) => {
                        self.recipe_on_its_own(module, p)
                    }
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
            // An item a syntax error cut short may be what uses the import.
            if m.is_std || m.is_incomplete() {
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
        Val::Int(i) => Type::Int(*i).to_string(),
        Val::Float(x) => Type::Float(*x).to_string(),
        Val::Bool(b) => Type::Bool(*b).to_string(),
        Val::Str(s) => Type::Str(s.clone()).to_string(),
        Val::Tensor(t) => crate::types::tensor_text(t),
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

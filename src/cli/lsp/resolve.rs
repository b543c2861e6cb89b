//! Name resolution at a position, built on the checker's public module model: which name the
//! cursor is on and what it stands for (a local, an item of some module, a module), and which
//! locals are in scope there. Scoping follows the language: parameters, closure parameters,
//! loop variables and carries, scan carries and indices, and `let`s from their statement to the
//! end of the block.

use rlc_check::modules::{Binding, Modules};
use rlc_syntax::ast::*;

/// What a name stands for.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// A local declared in the same module.
    Local(Local),
    Item {
        module: usize,
        index: usize,
    },
    Module(usize),
    /// The `key` of an item's `key = value` block (`local.nodes` for a cluster written as a
    /// block).
    Field {
        module: usize,
        key: Ident,
    },
}

impl From<Binding> for Target {
    fn from(b: Binding) -> Self {
        match b {
            Binding::Item { module, index } => Target::Item { module, index },
            Binding::Module(m) => Target::Module(m),
        }
    }
}

/// The name under the cursor.
#[derive(Clone, Debug)]
pub struct Found {
    pub span: Span,
    /// `None` for a builtin, a role operation, a record field or an unknown name.
    pub target: Option<Target>,
}

/// What a name is where the walk meets it, for tools that read every name of a module
/// ([`occurrences`]: references, rename, highlights, semantic tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Declares an item, a key of a definition block or a field of a struct.
    Item,
    /// Declares a parameter of a `fn` or `pipeline`, or of a closure.
    Param,
    /// Declares a `let`, a loop variable, a carry or a scan index.
    Let,
    /// A name read where it is looked up in scope.
    Use,
    /// A name assigned to (`x = e`).
    Assign,
    /// A type's name (`f32`, `Tokens`, a struct) or a model's kind (`CausalLM`).
    Type,
    /// A named dimension (`T` in `f32[B, T]`, the axis of a scan).
    Dim,
    /// `.name` after an expression: an item of a module, a field, a role operation.
    Member,
    /// A named argument or a record field.
    Label,
    /// The phase of a `place` (`train` in `place policy.train`).
    Phase,
    /// A segment of an import path, or a name (or alias) in an import list.
    Import,
}

/// A named argument under the cursor (`data:` in `grpo(…, data: reverse)`), with what the
/// callee is: the parameter it names is the callee's parameter of that name.
#[derive(Clone, Debug)]
pub struct Label {
    pub span: Span,
    pub name: String,
    pub callee: Option<Target>,
}

/// One name of a module, what it stands for (as [`Found::target`]) and its role.
#[derive(Clone, Debug, PartialEq)]
pub struct Occurrence {
    pub span: Span,
    pub target: Option<Target>,
    pub role: Role,
}

/// A local in scope, with the span of the expression that gives its value (for its type).
#[derive(Clone, Debug, PartialEq)]
pub struct Local {
    pub ident: Ident,
    pub value: Option<Span>,
}

pub struct Walk<'a> {
    modules: &'a Modules,
    module: usize,
    offset: u32,
    scopes: Vec<Local>,
    pub found: Option<Found>,
    /// Locals in scope at the offset (innermost last), once a block containing it was seen.
    pub visible: Option<Vec<Local>>,
    /// The named argument under the cursor, if any.
    pub label: Option<Label>,
    /// In [`occurrences`]: every name of the module, in the order the walk meets them.
    all: Option<Vec<Occurrence>>,
}

/// Resolves the position `offset` of module `module`.
pub fn at<'a>(modules: &'a Modules, module: usize, offset: u32) -> Walk<'a> {
    let mut w = Walk {
        modules,
        module,
        offset,
        scopes: Vec::new(),
        found: None,
        visible: None,
        label: None,
        all: None,
    };
    w.items();
    w
}

/// Every name of module `module` with what it stands for, in the order of the walk (each
/// declaration before the uses it is in scope for).
pub fn occurrences(modules: &Modules, module: usize) -> Vec<Occurrence> {
    let mut w = Walk {
        modules,
        module,
        offset: u32::MAX,
        scopes: Vec::new(),
        found: None,
        visible: None,
        label: None,
        all: Some(Vec::new()),
    };
    w.items();
    w.all.unwrap_or_default()
}

impl Walk<'_> {
    fn items(&mut self) {
        let modules = self.modules;
        let m = modules.get(self.module);
        for (index, item) in m.ast.items.iter().enumerate() {
            if self.contains(item.span) {
                self.item(index, item);
            }
        }
    }
}

/// The module a std path or a relative file path names, among those loaded.
pub fn module_named(modules: &Modules, name: &str) -> Option<usize> {
    modules
        .modules
        .iter()
        .position(|m| m.name == name || m.package_path.as_deref() == Some(name))
}

pub use rlc_check::modules::join_relative;

impl Walk<'_> {
    /// Whether the walk goes into `span`: the one holding the offset, or every one when
    /// collecting [`occurrences`].
    fn contains(&self, span: Span) -> bool {
        self.all.is_some() || (span.start <= self.offset && self.offset <= span.end)
    }

    fn find(&mut self, ident: &Ident, target: Option<Target>, role: Role) {
        if let Some(all) = &mut self.all {
            all.push(Occurrence {
                span: ident.span,
                target,
                role,
            });
        } else if self.contains(ident.span) {
            self.found = Some(Found {
                span: ident.span,
                target,
            });
        }
    }

    /// A name used where it is looked up: innermost local, then the module's items and imports.
    pub fn lookup(&self, name: &str) -> Option<Target> {
        if let Some(l) = self.scopes.iter().rev().find(|l| l.ident.name == name) {
            return Some(Target::Local(l.clone()));
        }
        self.modules
            .get(self.module)
            .lookup(self.module, name)
            .map(Target::from)
    }

    fn use_name(&mut self, ident: &Ident, role: Role) {
        if self.contains(ident.span) {
            let target = self.lookup(&ident.name);
            self.find(ident, target, role);
        }
    }

    fn declare(&mut self, ident: &Ident, value: Option<Span>, role: Role) {
        let local = Local {
            ident: ident.clone(),
            value,
        };
        self.find(ident, Some(Target::Local(local.clone())), role);
        self.scopes.push(local);
    }

    fn item(&mut self, index: usize, item: &Item) {
        let this = Target::Item {
            module: self.module,
            index,
        };
        if let Some(name) = item.name() {
            self.find(name, Some(this), Role::Item);
        }
        match &item.kind {
            ItemKind::Import(import) => self.import(import),
            ItemKind::Cluster(c) => self.definition(&c.def),
            ItemKind::Dataset(d) => self.definition(&d.def),
            ItemKind::Verifier(v) => self.definition(&v.def),
            ItemKind::Environment(e) => self.definition(&e.def),
            ItemKind::Model(m) => {
                self.find(&m.kind, None, Role::Type);
                self.definition(&m.def);
            }
            ItemKind::Struct(s) => {
                for f in &s.fields {
                    self.find(&f.name, None, Role::Item);
                    self.type_expr(&f.ty);
                }
            }
            ItemKind::Fn(f) => {
                self.params(&f.params);
                if let Some(ret) = &f.ret {
                    self.type_expr(ret);
                }
                self.block(&f.body);
            }
            ItemKind::Const(c) => {
                if let Some(ty) = &c.ty {
                    self.type_expr(ty);
                }
                self.expr(&c.value);
            }
            ItemKind::Place(p) => {
                if let PlaceTarget::Role { role, phase } = &p.target {
                    self.use_name(role, Role::Use);
                    if let Some(phase) = phase {
                        self.find(phase, None, Role::Phase);
                    }
                }
                if let Some(d) = &p.devices {
                    self.expr(d);
                }
                if let Layout::Explicit(items) = &p.layout {
                    for l in items {
                        self.expr(&l.value);
                    }
                }
            }
            ItemKind::Pipeline(p) => {
                self.params(&p.params);
                self.block(&p.body);
            }
        }
        self.scopes.clear();
    }

    fn params(&mut self, params: &[Param]) {
        for p in params {
            if let Some(ty) = &p.ty {
                self.type_expr(ty);
            }
            if let Some(d) = &p.default {
                self.expr(d);
            }
            self.declare(&p.name, p.default.as_ref().map(|d| d.span), Role::Param);
        }
    }

    fn definition(&mut self, def: &Definition) {
        match def {
            Definition::Expr(e) => self.expr(e),
            Definition::Fields(block) => {
                for f in &block.fields {
                    self.find(
                        &f.key,
                        Some(Target::Field {
                            module: self.module,
                            key: f.key.clone(),
                        }),
                        Role::Item,
                    );
                    self.expr(&f.value);
                }
            }
        }
    }

    fn type_expr(&mut self, t: &TypeExpr) {
        if self.contains(t.name.span) {
            let target = self
                .modules
                .get(self.module)
                .lookup(self.module, &t.name.name)
                .map(Target::from);
            self.find(&t.name, target, Role::Type);
        }
        for d in t.dims.iter().flatten() {
            if let Dim::Named(n) = d {
                self.find(n, None, Role::Dim);
            }
        }
    }

    fn import(&mut self, import: &Import) {
        let me = self.modules.get(self.module);
        let target = match &import.source {
            ImportSource::Path(path) => {
                let dotted = |n: usize| {
                    path[..n]
                        .iter()
                        .map(|i| i.name.as_str())
                        .collect::<Vec<_>>()
                        .join(".")
                };
                let imported = module_named(self.modules, &dotted(path.len()))
                    .or_else(|| module_named(self.modules, &dotted(path.len().saturating_sub(1))));
                for (i, seg) in path.iter().enumerate() {
                    if !self.contains(seg.span) {
                        continue;
                    }
                    // A segment names a module, or an item of the module before it; a prefix
                    // that is neither (`std`, `std.task`) stands for the module imported.
                    let target = module_named(self.modules, &dotted(i + 1))
                        .map(Target::Module)
                        .or_else(|| {
                            let m = module_named(self.modules, &dotted(i))?;
                            let index = *self.modules.get(m).items.get(&seg.name)?;
                            Some(Target::Item { module: m, index })
                        })
                        .or(imported.map(Target::Module));
                    self.find(seg, target, Role::Import);
                }
                imported
            }
            ImportSource::File(s) => {
                let m = module_named(self.modules, &join_relative(&me.name, &s.value));
                if self.all.is_none() && self.contains(s.span) {
                    self.found = Some(Found {
                        span: s.span,
                        target: m.map(Target::Module),
                    });
                }
                m
            }
        };
        let bound = |span: Span| {
            me.imports
                .iter()
                .find(|i| i.span == span)
                .map(|i| i.binding)
        };
        if let Some(alias) = &import.alias {
            let t = bound(alias.span)
                .map(Target::from)
                .or(target.map(Target::Module));
            self.find(alias, t, Role::Import);
        }
        for n in import.names.iter().flatten() {
            let t = bound(n.binding().span).map(Target::from).or_else(|| {
                let m = target?;
                let index = *self.modules.get(m).items.get(&n.name.name)?;
                Some(Target::Item { module: m, index })
            });
            self.find(&n.name, t.clone(), Role::Import);
            if let Some(alias) = &n.alias {
                self.find(alias, t, Role::Import);
            }
        }
    }

    fn block(&mut self, b: &Block) {
        let depth = self.scopes.len();
        for s in &b.stmts {
            if s.span.start > self.offset {
                break;
            }
            self.stmt(s);
        }
        if self.visible.is_none() && self.contains(b.span) {
            self.visible = Some(self.scopes.clone());
        }
        self.scopes.truncate(depth);
    }

    fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Let { name, ty, value } => {
                if let Some(ty) = ty {
                    self.type_expr(ty);
                }
                self.expr(value);
                // A `let` is not in scope in its own value.
                if !(value.span.start <= self.offset && self.offset <= value.span.end) {
                    self.declare(name, Some(value.span), Role::Let);
                }
            }
            StmtKind::Assign { name, value } => {
                self.use_name(name, Role::Assign);
                self.expr(value);
            }
            StmtKind::Loop {
                var,
                range,
                carries,
                body,
            } => {
                self.expr(range);
                for c in carries {
                    self.expr(&c.init);
                }
                let depth = self.scopes.len();
                self.declare(var, None, Role::Let);
                for c in carries {
                    self.declare(&c.name, Some(c.init.span), Role::Let);
                }
                self.block(body);
                self.scopes.truncate(depth);
            }
            StmtKind::Log { record } => self.record(record),
            StmtKind::Every { interval, body } => {
                self.expr(interval);
                self.block(body);
            }
            StmtKind::Checkpoint { roles } => {
                for r in roles {
                    self.use_name(r, Role::Use);
                }
            }
            StmtKind::Emit { value } | StmtKind::Expr(value) => self.expr(value),
        }
    }

    fn record(&mut self, r: &Record) {
        for f in &r.fields {
            self.find(&f.name, None, Role::Label);
            self.expr(&f.value);
        }
    }

    fn expr(&mut self, e: &Expr) {
        if !self.contains(e.span) {
            return;
        }
        match &e.kind {
            ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) => {}
            ExprKind::List(items) => items.iter().for_each(|x| self.expr(x)),
            ExprKind::Name(ident) => self.use_name(ident, Role::Use),
            ExprKind::Member { base, name } => {
                self.expr(base);
                if self.contains(name.span) {
                    let target = self.member(base, &name.name);
                    self.find(name, target, Role::Member);
                }
            }
            ExprKind::Call {
                callee,
                args,
                closure,
            } => {
                self.expr(callee);
                for a in args {
                    if let Some(n) = &a.name {
                        self.find(n, None, Role::Label);
                        if self.all.is_none() && self.contains(n.span) {
                            self.label = Some(Label {
                                span: n.span,
                                name: n.name.clone(),
                                callee: self.callee(callee),
                            });
                        }
                    }
                    self.expr(&a.value);
                }
                if let Some(c) = closure {
                    let depth = self.scopes.len();
                    for p in &c.params {
                        self.declare(p, None, Role::Param);
                    }
                    self.block(&c.body);
                    self.scopes.truncate(depth);
                }
            }
            ExprKind::Index { base, indices } => {
                self.expr(base);
                for i in indices {
                    self.expr(i);
                }
            }
            ExprKind::Unary { operand, .. } => self.expr(operand),
            ExprKind::Binary { lhs, rhs, .. } => {
                self.expr(lhs);
                self.expr(rhs);
            }
            ExprKind::Paren(inner) => self.expr(inner),
            ExprKind::Record(r) => self.record(r),
            ExprKind::Scan(scan) => {
                self.find(&scan.axis, None, Role::Dim);
                for c in &scan.carries {
                    self.expr(&c.init);
                }
                let depth = self.scopes.len();
                for c in &scan.carries {
                    self.declare(&c.name, Some(c.init.span), Role::Let);
                }
                self.declare(&scan.index, None, Role::Let);
                self.block(&scan.body);
                self.scopes.truncate(depth);
            }
        }
    }

    /// What a call's callee names: an item in scope (`grpo`) or of a module (`recipes.grpo`).
    pub fn callee(&self, callee: &Expr) -> Option<Target> {
        match &callee.kind {
            ExprKind::Name(n) => self.lookup(&n.name),
            ExprKind::Member { base, name } => self.member(base, &name.name),
            _ => None,
        }
    }

    /// `base.name` where `base` is a module (its item) or an item with a field block (the
    /// field); role operations and record fields have no declaration to go to.
    fn member(&self, base: &Expr, name: &str) -> Option<Target> {
        let ExprKind::Name(b) = &base.kind else {
            return None;
        };
        match self.lookup(&b.name)? {
            Target::Module(m) => {
                let index = *self.modules.get(m).items.get(name)?;
                Some(Target::Item { module: m, index })
            }
            Target::Item { module, index } => {
                let item = self.modules.get(module).item(index);
                let def = match &item.kind {
                    ItemKind::Cluster(c) => &c.def,
                    ItemKind::Dataset(d) => &d.def,
                    ItemKind::Model(m) => &m.def,
                    _ => return None,
                };
                let Definition::Fields(block) = def else {
                    return None;
                };
                let f = block.fields.iter().find(|f| f.key.name == name)?;
                Some(Target::Field {
                    module,
                    key: f.key.clone(),
                })
            }
            _ => None,
        }
    }
}

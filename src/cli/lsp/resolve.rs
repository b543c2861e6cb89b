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
    };
    let m = modules.get(module);
    for (index, item) in m.ast.items.iter().enumerate() {
        if w.contains(item.span) {
            w.item(index, item);
        }
    }
    w
}

/// The module a std path or a relative file path names, among those loaded.
pub fn module_named(modules: &Modules, name: &str) -> Option<usize> {
    modules.modules.iter().position(|m| m.name == name)
}

pub use rlc_check::modules::join_relative;

impl Walk<'_> {
    fn contains(&self, span: Span) -> bool {
        span.start <= self.offset && self.offset <= span.end
    }

    fn find(&mut self, ident: &Ident, target: Option<Target>) {
        if self.contains(ident.span) {
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

    fn use_name(&mut self, ident: &Ident) {
        if self.contains(ident.span) {
            let target = self.lookup(&ident.name);
            self.find(ident, target);
        }
    }

    fn declare(&mut self, ident: &Ident, value: Option<Span>) {
        let local = Local {
            ident: ident.clone(),
            value,
        };
        self.find(ident, Some(Target::Local(local.clone())));
        self.scopes.push(local);
    }

    fn item(&mut self, index: usize, item: &Item) {
        let this = Target::Item {
            module: self.module,
            index,
        };
        if let Some(name) = item.name() {
            self.find(name, Some(this));
        }
        match &item.kind {
            ItemKind::Import(import) => self.import(import),
            ItemKind::Cluster(c) => self.definition(&c.def),
            ItemKind::Dataset(d) => self.definition(&d.def),
            ItemKind::Model(m) => {
                self.find(&m.kind, None);
                self.definition(&m.def);
            }
            ItemKind::Struct(s) => {
                for f in &s.fields {
                    self.find(&f.name, None);
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
                    self.use_name(role);
                    if let Some(phase) = phase {
                        self.find(phase, None);
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
            self.declare(&p.name, p.default.as_ref().map(|d| d.span));
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
            self.find(&t.name, target);
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
                    self.find(seg, target);
                }
                imported
            }
            ImportSource::File(s) => {
                let m = module_named(self.modules, &join_relative(&me.name, &s.value));
                if self.contains(s.span) {
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
            self.find(alias, t);
        }
        for n in import.names.iter().flatten() {
            let t = bound(n.binding().span).map(Target::from).or_else(|| {
                let m = target?;
                let index = *self.modules.get(m).items.get(&n.name.name)?;
                Some(Target::Item { module: m, index })
            });
            self.find(&n.name, t.clone());
            if let Some(alias) = &n.alias {
                self.find(alias, t);
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
                    self.declare(name, Some(value.span));
                }
            }
            StmtKind::Assign { name, value } => {
                self.use_name(name);
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
                self.declare(var, None);
                for c in carries {
                    self.declare(&c.name, Some(c.init.span));
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
                    self.use_name(r);
                }
            }
            StmtKind::Emit { value } | StmtKind::Expr(value) => self.expr(value),
        }
    }

    fn record(&mut self, r: &Record) {
        for f in &r.fields {
            self.find(&f.name, None);
            self.expr(&f.value);
        }
    }

    fn expr(&mut self, e: &Expr) {
        if !self.contains(e.span) {
            return;
        }
        match &e.kind {
            ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) => {}
            ExprKind::Name(ident) => self.use_name(ident),
            ExprKind::Member { base, name } => {
                self.expr(base);
                if self.contains(name.span) {
                    let target = self.member(base, &name.name);
                    self.find(name, target);
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
                        self.find(n, None);
                    }
                    self.expr(&a.value);
                }
                if let Some(c) = closure {
                    let depth = self.scopes.len();
                    for p in &c.params {
                        self.declare(p, None);
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
                self.find(&scan.axis, None);
                for c in &scan.carries {
                    self.expr(&c.init);
                }
                let depth = self.scopes.len();
                for c in &scan.carries {
                    self.declare(&c.name, Some(c.init.span));
                }
                self.declare(&scan.index, None);
                self.block(&scan.body);
                self.scopes.truncate(depth);
            }
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

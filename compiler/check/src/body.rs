//! Function bodies as data: every `fn` and `const` of every module, and each `update` loss
//! closure of the pipeline (`dataflow::Loss`), with each name resolved as the checker resolved
//! it (a local, an item of a module, a module, a builtin, or free — an axis such as `T` in
//! `over: T`) and each expression's type. Kernel lowering reads these, not syntax trees.

use std::collections::{BTreeMap, HashSet};

use rlc_diagnostics::FileId;
use rlc_syntax::ast::{self, ExprKind as A, ItemKind, StmtKind};

pub use rlc_syntax::ast::{BinaryOp, ScanDirection, UnaryOp};

use crate::modules::{Binding, Modules};
use crate::types::{ExprId, Type, TypeTable};

/// The bodies of a checked program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bodies {
    /// Each module's full name (`std.algo`), by module index (0 is the root).
    pub modules: Vec<String>,
    /// Each module's own items by name → item index.
    pub names: Vec<BTreeMap<String, usize>>,
    /// Every `fn` and `const`, by (module, item index).
    pub items: BTreeMap<(usize, usize), Item>,
    /// The names the root module sees (its items and its imports) → (module, item index).
    pub root_scope: BTreeMap<String, (usize, usize)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Fn(FnBody),
    Const { name: String, value: Expr },
}

#[derive(Clone, Debug, PartialEq)]
pub struct FnBody {
    pub name: String,
    pub params: Vec<Param>,
    pub body: Block,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub ty: Option<ParamType>,
    /// Evaluated in the module's scope where a call leaves the parameter out.
    pub default: Option<Expr>,
}

/// `f32[B, T]`: the element type's name and the dimensions (`None` for a scalar).
#[derive(Clone, Debug, PartialEq)]
pub struct ParamType {
    pub name: String,
    pub dims: Option<Vec<Dim>>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    Named(String),
    Size(u64),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Let {
        name: String,
        value: Expr,
    },
    Assign {
        name: String,
        value: Expr,
    },
    Emit(Expr),
    Expr(Expr),
    /// A statement only a pipeline may hold (`loop`, `log`…).
    Pipeline,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub id: ExprId,
    /// The checker's type (`None` where it evaluated no type, e.g. in a `fn` nothing calls).
    pub ty: Option<Type>,
    pub kind: ExprKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// A number with its unit applied.
    Number(f64),
    Bool(bool),
    Str,
    Name(Name),
    Member {
        base: Box<Expr>,
        name: String,
    },
    Call {
        callee: Box<Expr>,
        args: Vec<Arg>,
        /// Whether a block follows the call (`update`'s loss: not a `fn` body's).
        closure: bool,
    },
    Index {
        base: Box<Expr>,
        indices: Vec<Expr>,
    },
    Unary {
        op: UnaryOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Record,
    List,
    Scan(Box<Scan>),
}

/// A name and what it names where it stands.
#[derive(Clone, Debug, PartialEq)]
pub struct Name {
    pub name: String,
    pub resolved: Resolved,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// A parameter, `let`, carry or scan index of an enclosing scope.
    Local,
    Item {
        module: usize,
        index: usize,
    },
    Module(usize),
    /// A builtin function (no local or item hides it).
    Builtin,
    /// Nothing in scope: an axis name (`over: T`), or a mistake the checker reported.
    Free,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    pub name: Option<String>,
    pub value: Expr,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Scan {
    pub direction: ScanDirection,
    pub axis: String,
    pub carries: Vec<(String, Expr)>,
    pub index: String,
    pub body: Block,
}

impl Bodies {
    /// The bodies of every module's `fn`s and `const`s.
    pub fn of(modules: &Modules, types: &TypeTable) -> Bodies {
        let mut out = Bodies::default();
        for (m, module) in modules.modules.iter().enumerate() {
            out.modules.push(module.name.clone());
            out.names.push(module.items.clone());
            let mut reader = Reader::new(modules, types, m, &[]);
            for (index, item) in module.ast.items.iter().enumerate() {
                match &item.kind {
                    ItemKind::Fn(def) => {
                        let body = reader.fn_body(def);
                        out.items.insert((m, index), Item::Fn(body));
                    }
                    ItemKind::Const(c) => {
                        let value = reader.expr(&c.value);
                        let name = c.name.name.clone();
                        out.items.insert((m, index), Item::Const { name, value });
                    }
                    _ => {}
                }
            }
        }
        if let Some(root) = modules.modules.first() {
            let names = root
                .items
                .keys()
                .chain(root.imports.iter().map(|i| &i.name));
            for name in names {
                if let Some(Binding::Item { module, index }) = root.lookup(0, name) {
                    out.root_scope.insert(name.clone(), (module, index));
                }
            }
        }
        out
    }

    /// The `fn` called `function` — a name the root module sees, or `module.fn` with a module's
    /// full name (`std.algo.gae`) — as (module, item index) and its body.
    pub fn function(&self, function: &str) -> Option<((usize, usize), &FnBody)> {
        let at = match function.rsplit_once('.') {
            Some((module, name)) => {
                let m = self.modules.iter().position(|n| n == module)?;
                (m, *self.names[m].get(name)?)
            }
            None => *self.root_scope.get(function)?,
        };
        match self.items.get(&at)? {
            Item::Fn(f) => Some((at, f)),
            Item::Const { .. } => None,
        }
    }
}

/// `block` of `module` with `locals` in scope: an `update` loss closure's body, where the
/// pipeline's bindings, the closure's parameter and the pipeline's numbers are locals.
pub fn block_in(
    modules: &Modules,
    types: &TypeTable,
    module: usize,
    locals: &[&str],
    block: &ast::Block,
) -> Block {
    Reader::new(modules, types, module, locals).block(block)
}

/// Reads syntax into bodies, resolving names in one module's scope.
struct Reader<'a> {
    modules: &'a Modules,
    types: &'a TypeTable,
    module: usize,
    file: FileId,
    scopes: Vec<HashSet<String>>,
}

impl<'a> Reader<'a> {
    fn new(modules: &'a Modules, types: &'a TypeTable, module: usize, locals: &[&str]) -> Self {
        Reader {
            modules,
            types,
            module,
            file: modules.get(module).file,
            scopes: vec![locals.iter().map(|l| l.to_string()).collect()],
        }
    }

    fn bind(&mut self, name: &str) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(name.to_string());
        }
    }

    fn fn_body(&mut self, def: &ast::FnDef) -> FnBody {
        // Defaults read the module's scope, not the other parameters.
        let params = def
            .params
            .iter()
            .map(|p| Param {
                name: p.name.name.clone(),
                ty: p.ty.as_ref().map(|t| ParamType {
                    name: t.name.name.clone(),
                    dims: t.dims.as_ref().map(|dims| {
                        dims.iter()
                            .map(|d| match d {
                                ast::Dim::Named(i) => Dim::Named(i.name.clone()),
                                ast::Dim::Size(n, _) => Dim::Size(*n),
                            })
                            .collect()
                    }),
                }),
                default: p.default.as_ref().map(|d| self.expr(d)),
            })
            .collect();
        self.scopes
            .push(def.params.iter().map(|p| p.name.name.clone()).collect());
        let body = self.block(&def.body);
        self.scopes.pop();
        FnBody {
            name: def.name.name.clone(),
            params,
            body,
        }
    }

    fn block(&mut self, b: &ast::Block) -> Block {
        self.scopes.push(HashSet::new());
        let stmts = b.stmts.iter().map(|s| self.stmt(&s.kind)).collect();
        self.scopes.pop();
        Block { stmts }
    }

    fn stmt(&mut self, s: &StmtKind) -> Stmt {
        match s {
            StmtKind::Let { name, value, .. } => {
                let value = self.expr(value);
                self.bind(&name.name);
                Stmt::Let {
                    name: name.name.clone(),
                    value,
                }
            }
            StmtKind::Assign { name, value } => Stmt::Assign {
                name: name.name.clone(),
                value: self.expr(value),
            },
            StmtKind::Emit { value } => Stmt::Emit(self.expr(value)),
            StmtKind::Expr(e) => Stmt::Expr(self.expr(e)),
            StmtKind::Loop { .. }
            | StmtKind::Log { .. }
            | StmtKind::Every { .. }
            | StmtKind::Checkpoint { .. } => Stmt::Pipeline,
        }
    }

    fn resolve(&self, name: &str) -> Resolved {
        if self.scopes.iter().any(|s| s.contains(name)) {
            return Resolved::Local;
        }
        match self.modules.get(self.module).lookup(self.module, name) {
            Some(Binding::Item { module, index }) => Resolved::Item { module, index },
            Some(Binding::Module(m)) => Resolved::Module(m),
            None if crate::builtins::lookup(name).is_some() => Resolved::Builtin,
            None => Resolved::Free,
        }
    }

    fn expr(&mut self, e: &ast::Expr) -> Expr {
        let kind = match &e.kind {
            A::Paren(inner) => return self.expr(inner),
            A::Number(n) => ExprKind::Number(n.scaled()),
            A::Bool(b) => ExprKind::Bool(*b),
            A::Str(_) => ExprKind::Str,
            A::Name(id) => ExprKind::Name(Name {
                name: id.name.clone(),
                resolved: self.resolve(&id.name),
            }),
            A::Member { base, name } => ExprKind::Member {
                base: Box::new(self.expr(base)),
                name: name.name.clone(),
            },
            A::Call {
                callee,
                args,
                closure,
            } => ExprKind::Call {
                callee: Box::new(self.expr(callee)),
                args: args
                    .iter()
                    .map(|a| Arg {
                        name: a.name.as_ref().map(|n| n.name.clone()),
                        value: self.expr(&a.value),
                    })
                    .collect(),
                closure: closure.is_some(),
            },
            A::Index { base, indices } => ExprKind::Index {
                base: Box::new(self.expr(base)),
                indices: indices.iter().map(|i| self.expr(i)).collect(),
            },
            A::Unary { op, operand, .. } => ExprKind::Unary {
                op: *op,
                operand: Box::new(self.expr(operand)),
            },
            A::Binary { op, lhs, rhs, .. } => ExprKind::Binary {
                op: *op,
                lhs: Box::new(self.expr(lhs)),
                rhs: Box::new(self.expr(rhs)),
            },
            A::Record(_) => ExprKind::Record,
            A::List(_) => ExprKind::List,
            A::Scan(s) => {
                // Initial values are read outside the scan.
                let carries: Vec<(String, Expr)> = s
                    .carries
                    .iter()
                    .map(|c| (c.name.name.clone(), self.expr(&c.init)))
                    .collect();
                let mut scope: HashSet<String> = carries.iter().map(|c| c.0.clone()).collect();
                scope.insert(s.index.name.clone());
                self.scopes.push(scope);
                let body = self.block(&s.body);
                self.scopes.pop();
                ExprKind::Scan(Box::new(Scan {
                    direction: s.direction,
                    axis: s.axis.name.clone(),
                    carries,
                    index: s.index.name.clone(),
                    body,
                }))
            }
        };
        let id = (self.file, e.span.start, e.span.end);
        Expr {
            id,
            ty: self.types.get(&id).cloned(),
            kind,
        }
    }
}

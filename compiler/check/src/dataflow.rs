//! The pipeline as data: the root module's `pipeline`, read once after checking into resolved,
//! typed statements and expressions — values of the step by name, role calls matched to the
//! checker's calls, dataset methods, verifier calls, `fn`, builtin and operator calls with their
//! functions, argument names and batch facts, `update` closures with what they read — so that
//! plan lowering builds a plan from data, without resolving names or walking the AST itself.

use std::collections::{BTreeMap, BTreeSet};

use rlc_diagnostics::FileId;
use rlc_syntax::ast::{self, ExprKind, ItemKind, StmtKind};

use crate::modules::{Binding, Modules};
use crate::program::{Op, Program};
use crate::recipes;
use crate::types::{ExprId, Type, TypeTable};

/// The root pipeline's body.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dataflow {
    pub body: Vec<Stmt>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `loop step in 0..steps with (beta = 0.1) { … }`.
    Loop {
        carries: Vec<Carry>,
        body: Vec<Stmt>,
    },
    /// `let name = value`.
    Let { name: String, value: Node },
    /// `name = value`: a carried value's next value.
    Assign { name: String, value: Node },
    /// An expression evaluated for its effect (`policy.update(…) { … }`).
    Eval(Node),
    /// `log { name: value, … }`.
    Log(Vec<(String, Node)>),
    /// `every N steps { … }`; `interval` when it is a known constant.
    Every {
        interval: Option<u64>,
        body: Vec<Stmt>,
    },
    /// `checkpoint a, b`: the roles, by name.
    Checkpoint(Vec<String>),
}

/// A carried value: its name and the checker's type of its initial value.
#[derive(Clone, Debug, PartialEq)]
pub struct Carry {
    pub name: String,
    pub init: Option<Type>,
}

/// An expression of the pipeline: its id, the checker's type and what it does.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub id: ExprId,
    pub ty: Option<Type>,
    pub kind: NodeKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    /// A value known before the job starts, as written (`1e-3`) or as the checker computed it.
    Const(String),
    /// A name the pipeline bound (`let`, a carried value).
    Local(String),
    /// A role.
    Model(usize),
    /// Any other name: a dataset, the loop's counter…
    Name(String),
    /// `base.name`.
    Field { base: Box<Node>, name: String },
    /// `role.generate(…)`, `role.update(…) { … }`…: the `nth` call of `op` on `model` among the
    /// checker's calls of the pipeline; `input` is its first positional argument.
    Role {
        model: usize,
        op: Op,
        nth: usize,
        input: Option<Box<Node>>,
        loss: Option<Loss>,
    },
    /// `ds.sample(n)`; `dataset` is the item's name, whatever alias the pipeline used.
    Sample { dataset: String, count: Option<u64> },
    /// `ds.demonstrations(n)` / `ds.preferences(n, split: "test")`.
    Supervised {
        dataset: String,
        preferences: bool,
        count: Option<u64>,
        /// `"train"` or `"test"` when given as such.
        split: Option<String>,
    },
    /// `verifier(rollout)`.
    Verify {
        verifier: String,
        dataset: String,
        fields: Vec<String>,
        metrics: Vec<String>,
        rollout: Option<Box<Node>>,
    },
    /// A `fn` (of `module`: `None` for the root module's and for builtins), a builtin or an
    /// operator (`sub`, `neg`, `index`) on named arguments; `batch_reduction`: it (or what it
    /// calls) reduces over the batch; `grouped`: it works on groups of rows.
    Kernel {
        function: String,
        module: Option<String>,
        args: Vec<(String, Node)>,
        batch_reduction: bool,
        grouped: bool,
    },
    /// Nothing the plan computes.
    Unknown,
}

/// An `update`'s loss closure: its parameter, the names it reads (with the field of
/// `name.field`), in order, the functions it calls and its body (lowered to a kernel) in the
/// scope of `module` (a recipe's closure names the recipe's imports), where `consts` are the
/// numbers the pipeline's parameters it reads stand for.
#[derive(Clone, Debug, PartialEq)]
pub struct Loss {
    pub param: String,
    pub reads: Vec<(String, Option<String>)>,
    pub calls: Vec<String>,
    pub body: crate::body::Block,
    /// Where the closure is written (for errors: the span of `at`).
    pub file: FileId,
    pub at: ast::Span,
    pub module: usize,
    pub consts: Vec<(String, f64)>,
}

/// The dataflow of the root module's pipeline; `None` without one.
pub fn resolve(modules: &Modules, program: &Program, types: &TypeTable) -> Option<Dataflow> {
    let root = modules.modules.first()?;
    let pipeline = root.ast.items.iter().find_map(|item| match &item.kind {
        ItemKind::Pipeline(p) if !recipes::is_generic(p) => Some(p),
        _ => None,
    })?;
    let mut r = Resolver {
        modules,
        program,
        types,
        file: root.file,
        module: 0,
        bound: BTreeSet::new(),
        params: BTreeMap::new(),
        seen: BTreeMap::new(),
        facts: BTreeMap::new(),
        depth: 0,
    };
    for p in &pipeline.params {
        if let Some(text) = p.default.as_ref().and_then(|d| r.const_text(d)) {
            r.params.insert(p.name.name.clone(), Param::Const(text));
        }
    }
    Some(Dataflow {
        body: r.block(&pipeline.body),
    })
}

/// What a pipeline's parameter stands for where the body reads it.
#[derive(Clone, Debug)]
enum Param {
    /// A number, a boolean or a string, as the plan writes it.
    Const(String),
    /// A role, a dataset, a verifier or an environment.
    Node(NodeKind),
    /// A `fn`: its module and name.
    Fn { module: usize, name: String },
}

struct Resolver<'a> {
    modules: &'a Modules,
    program: &'a Program,
    types: &'a TypeTable,
    file: FileId,
    /// The module whose pipeline (the root's or a recipe's) is being read.
    module: usize,
    /// Names the pipeline has bound so far.
    bound: BTreeSet<String>,
    /// The pipeline's parameters, as its caller (or its defaults) gave them.
    params: BTreeMap<String, Param>,
    /// Recipes being read, one inside another.
    depth: usize,
    /// `(model, op)` → calls seen so far.
    seen: BTreeMap<(usize, Op), usize>,
    /// Kernel facts of functions, memoised: (batch reduction, grouped).
    facts: BTreeMap<(usize, String), (bool, bool)>,
}

impl<'a> Resolver<'a> {
    fn block(&mut self, b: &ast::Block) -> Vec<Stmt> {
        let mut out = Vec::new();
        for s in &b.stmts {
            if let StmtKind::Expr(ast::Expr {
                kind: ExprKind::Call { callee, args, .. },
                ..
            }) = &s.kind
                && let Some((module, index)) =
                    recipes::pipeline_named(self.modules, self.module, callee, |n| {
                        self.bound.contains(n)
                    })
                && let ItemKind::Pipeline(p) = &self.modules.get(module).item(index).kind
            {
                out.extend(self.instance(module, p, args));
            } else {
                out.extend(self.stmt(s));
            }
        }
        out
    }

    /// The statements of recipe `p` of `module` as the call with `args` instantiates it (the
    /// checker checked the call; a body that got no further is left out).
    fn instance(&mut self, module: usize, p: &'a ast::Pipeline, args: &[ast::Arg]) -> Vec<Stmt> {
        if self.depth >= recipes::MAX_RECIPE_DEPTH {
            return Vec::new();
        }
        let mut params = BTreeMap::new();
        let names: Vec<&str> = p.params.iter().map(|q| q.name.name.as_str()).collect();
        let given: Vec<Option<&str>> = args
            .iter()
            .map(|a| a.name.as_ref().map(|n| n.name.as_str()))
            .collect();
        let slots = crate::args::match_args(&names, &given).slots;
        for (q, slot) in p.params.iter().zip(slots) {
            let param = match slot.map(|i| &args[i]) {
                Some(a) => self.argument(&a.value),
                None => {
                    let file = self.modules.get(module).file;
                    let default = q.default.as_ref();
                    default
                        .and_then(|d| self.types.get(&(file, d.span.start, d.span.end)))
                        .and_then(Type::const_text)
                        .map(Param::Const)
                }
            };
            if let Some(param) = param {
                params.insert(q.name.name.clone(), param);
            }
        }
        let saved = (
            std::mem::replace(&mut self.module, module),
            std::mem::replace(&mut self.file, self.modules.get(module).file),
            std::mem::take(&mut self.bound),
            std::mem::replace(&mut self.params, params),
        );
        self.depth += 1;
        let body = self.block(&p.body);
        self.depth -= 1;
        (self.module, self.file, self.bound, self.params) = saved;
        body
    }

    /// What argument `e` of a recipe's call gives its parameter.
    fn argument(&mut self, e: &ast::Expr) -> Option<Param> {
        if let Some(c) = self.const_text(e) {
            return Some(Param::Const(c));
        }
        let ExprKind::Name(n) = &e.kind else {
            return None;
        };
        if let Some(p) = self.params.get(&n.name) {
            return Some(p.clone());
        }
        if let Some(m) = self
            .program
            .model_index(&n.name)
            .filter(|_| self.module == 0)
        {
            return Some(Param::Node(NodeKind::Model(m)));
        }
        let Some(Binding::Item { module, index }) =
            self.modules.get(self.module).lookup(self.module, &n.name)
        else {
            return None;
        };
        let item = self.modules.get(module).item(index);
        let name = item.name()?.name.clone();
        Some(match &item.kind {
            ItemKind::Fn(_) => Param::Fn { module, name },
            ItemKind::Model(_) => Param::Node(NodeKind::Model(self.program.model_index(&name)?)),
            _ => Param::Node(NodeKind::Name(name)),
        })
    }

    fn stmt(&mut self, s: &ast::Stmt) -> Option<Stmt> {
        Some(match &s.kind {
            StmtKind::Loop { carries, body, .. } => {
                let carries = carries
                    .iter()
                    .map(|c| {
                        self.bound.insert(c.name.name.clone());
                        Carry {
                            name: c.name.name.clone(),
                            init: self.type_at(c.init.span).cloned(),
                        }
                    })
                    .collect();
                Stmt::Loop {
                    carries,
                    body: self.block(body),
                }
            }
            StmtKind::Assign { name, value } => Stmt::Assign {
                name: name.name.clone(),
                value: self.expr(value),
            },
            StmtKind::Let { name, value, .. } => {
                let value = self.expr(value);
                self.bound.insert(name.name.clone());
                Stmt::Let {
                    name: name.name.clone(),
                    value,
                }
            }
            StmtKind::Expr(e) => Stmt::Eval(self.expr(e)),
            StmtKind::Log { record } => Stmt::Log(
                record
                    .fields
                    .iter()
                    .map(|f| (f.name.name.clone(), self.expr(&f.value)))
                    .collect(),
            ),
            StmtKind::Every { interval, body } => Stmt::Every {
                interval: self.const_int(interval),
                body: self.block(body),
            },
            StmtKind::Checkpoint { roles } => Stmt::Checkpoint(
                roles
                    .iter()
                    .map(|r| match self.params.get(&r.name) {
                        Some(Param::Node(NodeKind::Model(m))) => {
                            self.program.models[*m].name.clone()
                        }
                        _ => r.name.clone(),
                    })
                    .collect(),
            ),
            StmtKind::Emit { .. } => return None,
        })
    }

    fn id(&self, span: ast::Span) -> ExprId {
        (self.file, span.start, span.end)
    }

    fn type_at(&self, span: ast::Span) -> Option<&Type> {
        self.types.get(&self.id(span))
    }

    fn const_int(&self, e: &ast::Expr) -> Option<u64> {
        self.type_at(e.span)?.const_int().map(|v| v.max(0) as u64)
    }

    /// A constant as written (a literal) or as the checker knows it (`steps`, `4 * 2`).
    fn const_text(&self, e: &ast::Expr) -> Option<String> {
        match &e.kind {
            ExprKind::Number(n) => return Some(n.text.clone()),
            ExprKind::Bool(b) => return Some(b.to_string()),
            ExprKind::Str(s) => return Some(format!("{:?}", s.value)),
            _ => {}
        }
        self.type_at(e.span)?.const_text()
    }

    fn node(&self, e: &ast::Expr, kind: NodeKind) -> Node {
        Node {
            id: self.id(e.span),
            ty: self.type_at(e.span).cloned(),
            kind,
        }
    }

    fn expr(&mut self, e: &ast::Expr) -> Node {
        if let Some(c) = self.const_text(e) {
            return self.node(e, NodeKind::Const(c));
        }
        let kind = match &e.kind {
            ExprKind::Paren(inner) => return self.expr(inner),
            ExprKind::Name(id) => self.name(&id.name),
            ExprKind::Member { base, name } => NodeKind::Field {
                base: Box::new(self.expr(base)),
                name: name.name.clone(),
            },
            ExprKind::Call {
                callee,
                args,
                closure,
            } => self.call(e, callee, args, closure.as_ref()),
            ExprKind::Binary { op, lhs, rhs, .. } => {
                let args = vec![
                    ("lhs".to_string(), self.expr(lhs)),
                    ("rhs".to_string(), self.expr(rhs)),
                ];
                operator(op.kernel_name().unwrap_or("binary"), args)
            }
            ExprKind::Unary { op, operand, .. } => operator(
                op.kernel_name(),
                vec![("x".to_string(), self.expr(operand))],
            ),
            ExprKind::Index { base, indices } => {
                let mut args = vec![("x".to_string(), self.expr(base))];
                for (i, ix) in indices.iter().enumerate() {
                    args.push((format!("index{i}"), self.expr(ix)));
                }
                operator("index", args)
            }
            _ => NodeKind::Unknown,
        };
        self.node(e, kind)
    }

    fn name(&self, name: &str) -> NodeKind {
        if self.bound.contains(name) {
            NodeKind::Local(name.to_string())
        } else if let Some(p) = self.params.get(name) {
            match p {
                Param::Const(c) => NodeKind::Const(c.clone()),
                Param::Node(kind) => kind.clone(),
                Param::Fn { name, .. } => NodeKind::Name(name.clone()),
            }
        } else if let Some(m) = self.program.model_index(name).filter(|_| self.module == 0) {
            NodeKind::Model(m)
        } else {
            NodeKind::Name(name.to_string())
        }
    }

    fn call(
        &mut self,
        e: &ast::Expr,
        callee: &ast::Expr,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> NodeKind {
        if let Some((verifier, dataset)) = self.program.verifier_at(self.file, e.span) {
            let rollout = args.first().map(|a| Box::new(self.expr(&a.value)));
            return NodeKind::Verify {
                verifier: verifier.name.clone(),
                dataset: dataset.name.clone(),
                fields: verifier.fields.iter().map(|(f, _)| f.clone()).collect(),
                metrics: verifier.metrics.clone(),
                rollout,
            };
        }
        match &callee.kind {
            ExprKind::Member { base, name } => {
                let base = self.expr(base);
                let dataset = |written: &String| {
                    self.program
                        .dataset_at(self.file, e.span)
                        .map_or_else(|| written.clone(), |d| d.name.clone())
                };
                match (&base.kind, name.name.as_str()) {
                    (NodeKind::Model(m), method) => self.role_call(*m, method, args, closure),
                    (NodeKind::Name(written), "sample") => NodeKind::Sample {
                        dataset: dataset(written),
                        count: args.first().and_then(|a| self.const_int(&a.value)),
                    },
                    (NodeKind::Name(written), form @ ("demonstrations" | "preferences")) => {
                        let count = args
                            .iter()
                            .find(|a| a.name.as_ref().is_none_or(|n| n.name == "n"))
                            .and_then(|a| self.const_int(&a.value));
                        let split = args
                            .iter()
                            .find(|a| a.name.as_ref().is_some_and(|n| n.name == "split"))
                            .and_then(|a| match &a.value.kind {
                                ExprKind::Str(s) if s.value == "test" || s.value == "train" => {
                                    Some(s.value.clone())
                                }
                                _ => None,
                            });
                        NodeKind::Supervised {
                            dataset: dataset(written),
                            preferences: form == "preferences",
                            count,
                            split,
                        }
                    }
                    (NodeKind::Name(written), "score") => {
                        let args = args
                            .iter()
                            .enumerate()
                            .map(|(i, a)| (arg_name(a, i, &["rollout"]), self.expr(&a.value)))
                            .collect();
                        // The task's own reward, by the name the pipeline used for its dataset.
                        operator(&format!("{written}.score"), args)
                    }
                    _ => NodeKind::Unknown,
                }
            }
            ExprKind::Name(f) => {
                // A recipe's function parameter calls the function its caller passed.
                let (scope, callee) = match self.params.get(&f.name) {
                    Some(Param::Fn { module, name }) => (*module, name.clone()),
                    _ => (self.module, f.name.clone()),
                };
                let (module, params, facts) = match self.modules.get(scope).lookup(scope, &callee) {
                    Some(Binding::Item { module, index }) => {
                        match &self.modules.get(module).item(index).kind {
                            ItemKind::Fn(def) => {
                                let params: Vec<String> =
                                    def.params.iter().map(|p| p.name.name.clone()).collect();
                                let facts = self.facts(module, &callee);
                                let module =
                                    (module != 0).then(|| self.modules.get(module).name.clone());
                                (module, params, facts)
                            }
                            _ => (None, Vec::new(), (false, false)),
                        }
                    }
                    // A builtin's arguments by its parameters' names (`where(c, a, b)`).
                    _ => (
                        None,
                        crate::builtins::lookup(&f.name).map_or_else(Vec::new, |b| {
                            b.params.iter().map(|(n, _)| n.to_string()).collect()
                        }),
                        builtin_facts(&f.name, args),
                    ),
                };
                let refs: Vec<&str> = params.iter().map(String::as_str).collect();
                let args = args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (arg_name(a, i, &refs), self.expr(&a.value)))
                    .collect();
                NodeKind::Kernel {
                    function: callee,
                    module,
                    args,
                    batch_reduction: facts.0,
                    grouped: facts.1,
                }
            }
            _ => NodeKind::Unknown,
        }
    }

    fn role_call(
        &mut self,
        model: usize,
        method: &str,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> NodeKind {
        let Some(op) = Op::from_name(method) else {
            return NodeKind::Unknown;
        };
        let seen = self.seen.entry((model, op)).or_insert(0);
        let nth = *seen;
        *seen += 1;
        let input = args
            .iter()
            .find(|a| a.name.is_none())
            .map(|a| Box::new(self.expr(&a.value)));
        let loss = closure.filter(|_| op == Op::Update).map(|c| {
            let mut reads = Vec::new();
            collect_reads_block(&c.body, &mut reads);
            let mut calls = Vec::new();
            collect_calls_block(&c.body, &mut calls);
            let mut names: Vec<String> = Vec::new();
            for (f, _) in calls {
                if !names.contains(&f) {
                    names.push(f);
                }
            }
            let param = c
                .params
                .first()
                .map_or_else(String::new, |p| p.name.clone());
            let mut consts: Vec<(String, f64)> = Vec::new();
            for (name, _) in &reads {
                if let Some(Param::Const(text)) = self.params.get(name)
                    && *name != param
                    && !self.bound.contains(name)
                    && !consts.iter().any(|(n, _)| n == name)
                    && let Ok(x) = text.parse::<f64>()
                {
                    consts.push((name.clone(), x));
                }
            }
            // The closure's names: the pipeline's bindings, its parameter, the numbers.
            let mut locals: Vec<&str> = self.bound.iter().map(String::as_str).collect();
            locals.extend(c.params.iter().map(|p| p.name.as_str()));
            locals.extend(consts.iter().map(|(n, _)| n.as_str()));
            let body =
                crate::body::block_in(self.modules, self.types, self.module, &locals, &c.body);
            Loss {
                param,
                reads,
                calls: names,
                body,
                file: self.file,
                at: c.body.span,
                module: self.module,
                consts,
            }
        });
        NodeKind::Role {
            model,
            op,
            nth,
            input,
            loss,
        }
    }

    /// Whether function `name` of `module` reduces over the batch (directly or through what it
    /// calls) and whether it works on groups of rows.
    fn facts(&mut self, module: usize, name: &str) -> (bool, bool) {
        if let Some(&f) = self.facts.get(&(module, name.to_string())) {
            return f;
        }
        self.facts
            .insert((module, name.to_string()), (false, false));
        let m = self.modules.get(module);
        let Some(Binding::Item { module: dm, index }) = m.lookup(module, name) else {
            return (false, false);
        };
        let ItemKind::Fn(def) = &self.modules.get(dm).item(index).kind else {
            return (false, false);
        };
        let mut calls = Vec::new();
        collect_calls_block(&def.body, &mut calls);
        let mut out = (false, false);
        for (callee, args) in calls {
            let f = match self.modules.get(dm).lookup(dm, &callee) {
                Some(Binding::Item {
                    module: cm,
                    index: ci,
                }) if matches!(self.modules.get(cm).item(ci).kind, ItemKind::Fn(_)) => {
                    self.facts(cm, &callee)
                }
                _ => builtin_facts(&callee, &args),
            };
            out = (out.0 || f.0, out.1 || f.1);
        }
        self.facts.insert((dm, name.to_string()), out);
        self.facts.insert((module, name.to_string()), out);
        out
    }
}

/// A builtin or operator call (no module, no batch facts of its own).
fn operator(name: &str, args: Vec<(String, Node)>) -> NodeKind {
    NodeKind::Kernel {
        function: name.to_string(),
        module: None,
        args,
        batch_reduction: false,
        grouped: false,
    }
}

/// The parameter an argument binds: its name, else the `i`-th of `params` (`x`, `arg1`… for a
/// builtin whose parameters are not listed).
fn arg_name(a: &ast::Arg, i: usize, params: &[&str]) -> String {
    match &a.name {
        Some(n) => n.name.clone(),
        None => params.get(i).map_or_else(
            || {
                if i == 0 {
                    "x".into()
                } else {
                    format!("arg{i}")
                }
            },
            |p| p.to_string(),
        ),
    }
}

/// (batch reduction, grouped) of a builtin call: a `sum`/`mean`/`count`/`min`/`max` over every
/// axis (no `over:`) or over `B` reduces over the batch; `group_*` works on groups.
fn builtin_facts(name: &str, args: &[ast::Arg]) -> (bool, bool) {
    let over = args
        .iter()
        .find(|a| a.name.as_ref().is_some_and(|n| n.name == "over"));
    let reduces = match name {
        "sum" | "mean" | "count" => true,
        "min" | "max" => args.iter().filter(|a| a.name.is_none()).count() == 1,
        _ => false,
    };
    let over_batch = match over {
        None => true,
        Some(a) => matches!(&a.value.kind, ExprKind::Name(n) if n.name == "B"),
    };
    (reduces && over_batch, name.starts_with("group_"))
}

fn collect_calls_block(b: &ast::Block, out: &mut Vec<(String, Vec<ast::Arg>)>) {
    for s in &b.stmts {
        match &s.kind {
            StmtKind::Let { value, .. }
            | StmtKind::Assign { value, .. }
            | StmtKind::Emit { value }
            | StmtKind::Expr(value) => collect_calls(value, out),
            StmtKind::Loop { body, .. } | StmtKind::Every { body, .. } => {
                collect_calls_block(body, out)
            }
            StmtKind::Log { record } => record
                .fields
                .iter()
                .for_each(|f| collect_calls(&f.value, out)),
            StmtKind::Checkpoint { .. } => {}
        }
    }
}

fn collect_calls(e: &ast::Expr, out: &mut Vec<(String, Vec<ast::Arg>)>) {
    match &e.kind {
        ExprKind::Call {
            callee,
            args,
            closure,
        } => {
            if let ExprKind::Name(n) = &callee.kind {
                out.push((n.name.clone(), args.clone()));
            } else {
                collect_calls(callee, out);
            }
            args.iter().for_each(|a| collect_calls(&a.value, out));
            if let Some(c) = closure {
                collect_calls_block(&c.body, out);
            }
        }
        ExprKind::Member { base, .. } => collect_calls(base, out),
        ExprKind::Index { base, indices } => {
            collect_calls(base, out);
            indices.iter().for_each(|i| collect_calls(i, out));
        }
        ExprKind::Unary { operand, .. } => collect_calls(operand, out),
        ExprKind::Binary { lhs, rhs, .. } => {
            collect_calls(lhs, out);
            collect_calls(rhs, out);
        }
        ExprKind::Paren(inner) => collect_calls(inner, out),
        ExprKind::Record(r) => r.fields.iter().for_each(|f| collect_calls(&f.value, out)),
        ExprKind::List(items) => items.iter().for_each(|x| collect_calls(x, out)),
        ExprKind::Scan(s) => {
            s.carries.iter().for_each(|c| collect_calls(&c.init, out));
            collect_calls_block(&s.body, out);
        }
        ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) | ExprKind::Name(_) => {}
    }
}

/// Names read by a block (with the field when read as `name.field`), in order.
fn collect_reads_block(b: &ast::Block, out: &mut Vec<(String, Option<String>)>) {
    for s in &b.stmts {
        match &s.kind {
            StmtKind::Let { value, .. }
            | StmtKind::Assign { value, .. }
            | StmtKind::Emit { value }
            | StmtKind::Expr(value) => collect_reads(value, out),
            StmtKind::Loop { body, .. } | StmtKind::Every { body, .. } => {
                collect_reads_block(body, out)
            }
            StmtKind::Log { record } => record
                .fields
                .iter()
                .for_each(|f| collect_reads(&f.value, out)),
            StmtKind::Checkpoint { .. } => {}
        }
    }
}

fn collect_reads(e: &ast::Expr, out: &mut Vec<(String, Option<String>)>) {
    match &e.kind {
        ExprKind::Name(n) => out.push((n.name.clone(), None)),
        ExprKind::Member { base, name } => match &base.kind {
            ExprKind::Name(n) => out.push((n.name.clone(), Some(name.name.clone()))),
            _ => collect_reads(base, out),
        },
        ExprKind::Call {
            callee,
            args,
            closure,
        } => {
            if !matches!(callee.kind, ExprKind::Name(_)) {
                collect_reads(callee, out);
            }
            args.iter().for_each(|a| collect_reads(&a.value, out));
            if let Some(c) = closure {
                collect_reads_block(&c.body, out);
            }
        }
        ExprKind::Index { base, indices } => {
            collect_reads(base, out);
            indices.iter().for_each(|i| collect_reads(i, out));
        }
        ExprKind::Unary { operand, .. } => collect_reads(operand, out),
        ExprKind::Binary { lhs, rhs, .. } => {
            collect_reads(lhs, out);
            collect_reads(rhs, out);
        }
        ExprKind::Paren(inner) => collect_reads(inner, out),
        ExprKind::Record(r) => r.fields.iter().for_each(|f| collect_reads(&f.value, out)),
        ExprKind::List(items) => items.iter().for_each(|x| collect_reads(x, out)),
        ExprKind::Scan(s) => {
            s.carries.iter().for_each(|c| collect_reads(&c.init, out));
            collect_reads_block(&s.body, out);
        }
        ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) => {}
    }
}

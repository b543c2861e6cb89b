//! What every rank reads and nobody writes: the plan, the checked program, the datasets and
//! the loss closures of the `update` calls, matched to the plan's ops.

use std::collections::BTreeMap;
use std::path::Path;

use rlc_check::modules::{Binding, Modules};
use rlc_plan::Plan;
use rlc_plan::model::OpKind;
use rlc_syntax::ast::{Block, Closure, Definition, Expr, ExprKind, ItemKind, Stmt, StmtKind};

use super::error::{Result, RunError};
use crate::data::Source;
use crate::hf::HfTokenizer;

pub struct Job<'a> {
    pub plan: &'a Plan,
    pub modules: &'a Modules,
    /// Each dataset the plan samples, by the name the pipeline uses.
    pub sources: BTreeMap<String, Source>,
    /// The loss closure of each `update` op, by op id.
    pub losses: BTreeMap<u32, &'a Closure>,
    /// Iterations of the step loop.
    pub steps: u64,
}

impl<'a> Job<'a> {
    /// `source_dir`: the root file's folder, which relative dataset paths start from.
    pub fn new(plan: &'a Plan, modules: &'a Modules, source_dir: &Path) -> Result<Job<'a>> {
        let mut sources = BTreeMap::new();
        for op in &plan.ops {
            if let OpKind::Sample { dataset, .. } = &op.kind
                && !sources.contains_key(dataset)
            {
                sources.insert(
                    dataset.clone(),
                    dataset_source(modules, dataset, source_dir)?,
                );
            }
        }
        let closures = update_closures(modules)?;
        let updates: Vec<u32> = plan
            .ops
            .iter()
            .filter(|op| matches!(op.kind, OpKind::Update { .. }))
            .map(|op| op.id)
            .collect();
        if closures.len() != updates.len() {
            return Err(RunError::Plan(format!(
                "the plan has {} `update` ops but the pipeline {} `update` calls with a loss",
                updates.len(),
                closures.len()
            )));
        }
        let steps = plan.steps.ok_or_else(|| {
            RunError::Unsupported("the pipeline's step count is not fixed by the program".into())
        })?;
        Ok(Job {
            plan,
            modules,
            sources,
            losses: updates.into_iter().zip(closures).collect(),
            steps,
        })
    }
}

/// The `update { logp -> … }` closures of the root module's pipeline, in source order (the
/// order lowering gives their ops).
fn update_closures(modules: &Modules) -> Result<Vec<&Closure>> {
    let root = modules.get(0);
    let pipeline = root
        .ast
        .items
        .iter()
        .find_map(|item| match &item.kind {
            ItemKind::Pipeline(p) => Some(p),
            _ => None,
        })
        .ok_or_else(|| RunError::Plan("the root module has no pipeline".into()))?;
    let mut out = Vec::new();
    collect_block(&pipeline.body, &mut out);
    Ok(out)
}

fn collect_block<'a>(block: &'a Block, out: &mut Vec<&'a Closure>) {
    for Stmt { kind, .. } in &block.stmts {
        match kind {
            StmtKind::Let { value, .. } | StmtKind::Expr(value) => collect_expr(value, out),
            StmtKind::Loop { body, .. } | StmtKind::Every { body, .. } => collect_block(body, out),
            _ => {}
        }
    }
}

fn collect_expr<'a>(expr: &'a Expr, out: &mut Vec<&'a Closure>) {
    if let ExprKind::Call {
        callee,
        closure: Some(closure),
        ..
    } = &expr.kind
        && matches!(&callee.kind, ExprKind::Member { name, .. } if name.name == "update")
    {
        out.push(closure);
    }
}

/// The prompt source a pipeline name stands for: a `dataset` item (of the root module or
/// imported) defined as `task(kind, digits)` or `jsonl(path, field)`, directly or through a
/// `fn` that returns one (`reverse_task(digits: 4)`), with literal arguments.
fn dataset_source(modules: &Modules, name: &str, source_dir: &Path) -> Result<Source> {
    let fail = |message: String| RunError::Dataset {
        name: name.to_string(),
        message,
    };
    let Some(Binding::Item { module, index }) = modules.get(0).lookup(0, name) else {
        return Err(fail("not a dataset of the program".into()));
    };
    let ItemKind::Dataset(dataset) = &modules.get(module).item(index).kind else {
        return Err(fail("not a dataset".into()));
    };
    let Definition::Expr(expr) = &dataset.def else {
        return Err(fail(
            "the runtime reads datasets written as `task(…)` or `jsonl(…)`".into(),
        ));
    };
    let (function, args) = constructor(modules, module, expr, &BTreeMap::new(), 0).map_err(fail)?;
    let text = |key: &str| match args.get(key) {
        Some(Literal::Str(s)) => Ok(s.clone()),
        _ => Err(fail(format!("`{key}` must be a string literal"))),
    };
    let source = match function.as_str() {
        "task" => {
            let digits = match args.get("digits") {
                Some(Literal::Number(n)) => *n as i64,
                None => 6,
                _ => return Err(fail("`digits` must be a number literal".into())),
            };
            Source::task(&text("kind")?, digits)
        }
        _ => {
            let path = source_dir.join(text("path")?);
            match args.get("tokenizer") {
                None => Source::jsonl(&path, &text("field")?),
                Some(_) => {
                    let dir = source_dir.join(text("tokenizer")?);
                    let tokenizer =
                        HfTokenizer::load(&dir).map_err(|e| fail(format!("its tokenizer: {e}")))?;
                    Source::jsonl_with_tokenizer(&path, &text("field")?, &tokenizer)
                }
            }
        }
    };
    source.map_err(|e| fail(e.to_string()))
}

#[derive(Clone, Debug)]
enum Literal {
    Str(String),
    Number(f64),
}

/// The `task`/`jsonl` call `expr` (in module `module`, with `env` bound) comes down to, and its
/// arguments by parameter name.
fn constructor(
    modules: &Modules,
    module: usize,
    expr: &Expr,
    env: &BTreeMap<String, Literal>,
    depth: usize,
) -> std::result::Result<(String, BTreeMap<String, Literal>), String> {
    let ExprKind::Call { callee, args, .. } = &expr.kind else {
        return Err("the runtime reads datasets made by `task(…)` or `jsonl(…)`".into());
    };
    let ExprKind::Name(function) = &callee.kind else {
        return Err("the runtime reads datasets made by `task(…)` or `jsonl(…)`".into());
    };
    let literal = |e: &Expr| match &e.kind {
        ExprKind::Str(s) => Some(Literal::Str(s.value.clone())),
        ExprKind::Number(n) => Some(Literal::Number(n.scaled())),
        ExprKind::Name(n) => env.get(&n.name).cloned(),
        _ => None,
    };
    let params: &[&str] = match function.name.as_str() {
        "task" => &["kind", "digits"],
        "jsonl" => &["path", "field", "tokenizer"],
        other => {
            let found = match modules.get(module).lookup(module, other) {
                Some(Binding::Item { module: m, index }) => {
                    match &modules.get(m).item(index).kind {
                        ItemKind::Fn(f) if depth < 8 => Some((m, f)),
                        _ => None,
                    }
                }
                _ => None,
            };
            let Some((m, f)) = found else {
                return Err(format!("`{other}(…)` is not a dataset the runtime reads"));
            };
            let mut inner = BTreeMap::new();
            for (i, p) in f.params.iter().enumerate() {
                let given = args
                    .iter()
                    .enumerate()
                    .find(|(j, a)| match &a.name {
                        Some(n) => n.name == p.name.name,
                        None => *j == i,
                    })
                    .map(|(_, a)| &a.value);
                if let Some(value) = given.or(p.default.as_ref()).and_then(literal) {
                    inner.insert(p.name.name.clone(), value);
                }
            }
            let [stmt] = f.body.stmts.as_slice() else {
                return Err(format!(
                    "`{other}` is not a plain `task(…)` or `jsonl(…)` call"
                ));
            };
            let rlc_syntax::ast::StmtKind::Expr(body) = &stmt.kind else {
                return Err(format!(
                    "`{other}` is not a plain `task(…)` or `jsonl(…)` call"
                ));
            };
            return constructor(modules, m, body, &inner, depth + 1);
        }
    };
    let mut out = BTreeMap::new();
    for (i, arg) in args.iter().enumerate() {
        let key = match &arg.name {
            Some(n) => n.name.clone(),
            None => match params.get(i) {
                Some(p) => p.to_string(),
                None => continue,
            },
        };
        if let Some(value) = literal(&arg.value) {
            out.insert(key, value);
        }
    }
    Ok((function.name.clone(), out))
}

//! What every rank reads and nobody writes: the plan, the checked program, the datasets and
//! the loss closures of the `update` calls, matched to the plan's ops.

use std::collections::BTreeMap;
use std::path::Path;

use rlc_check::modules::Modules;
use rlc_plan::Plan;
use rlc_plan::model::{DatasetSource, OpKind};
use rlc_syntax::ast::{Block, Closure, Expr, ExprKind, ItemKind, Stmt, StmtKind};

use super::error::{Result, RunError};
use crate::data::Source;
use crate::hf::HfTokenizer;

pub struct Job<'a> {
    pub plan: &'a Plan,
    pub modules: &'a Modules,
    /// Each dataset the plan samples, by the name the pipeline uses.
    pub sources: BTreeMap<String, Source>,
    /// The Hugging Face tokenizer of each dataset that has one (verifiers decode text with it).
    pub tokenizers: BTreeMap<String, HfTokenizer>,
    /// The loss closure of each `update` op, by op id.
    pub losses: BTreeMap<u32, &'a Closure>,
    /// Iterations of the step loop.
    pub steps: u64,
}

impl<'a> Job<'a> {
    /// `source_dir`: the root file's folder, which relative dataset paths start from.
    pub fn new(plan: &'a Plan, modules: &'a Modules, source_dir: &Path) -> Result<Job<'a>> {
        let mut sources = BTreeMap::new();
        let mut tokenizers = BTreeMap::new();
        for op in &plan.ops {
            if let OpKind::Sample { dataset, .. } = &op.kind
                && !sources.contains_key(dataset)
            {
                let (source, tokenizer) = dataset_source(plan, dataset, source_dir)?;
                sources.insert(dataset.clone(), source);
                if let Some(tokenizer) = tokenizer {
                    tokenizers.insert(dataset.clone(), tokenizer);
                }
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
            tokenizers,
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

/// The prompt source the plan lists as `name`, and its tokenizer where it has one. Relative
/// paths start from `source_dir`, the root file's folder.
fn dataset_source(
    plan: &Plan,
    name: &str,
    source_dir: &Path,
) -> Result<(Source, Option<HfTokenizer>)> {
    let fail = |message: String| RunError::Dataset {
        name: name.to_string(),
        message,
    };
    let dataset = plan
        .dataset(name)
        .ok_or_else(|| fail("the plan lists no such dataset".into()))?;
    match &dataset.source {
        DatasetSource::Task { task, digits } => Source::task(
            task.as_str(),
            i64::try_from(*digits).map_err(|_| fail(format!("{digits} digits")))?,
        )
        .map(|source| (source, None)),
        DatasetSource::Jsonl {
            path,
            field,
            tokenizer,
            keep,
        } => {
            let tokenizer = tokenizer
                .as_ref()
                .map(|dir| {
                    HfTokenizer::load(&source_dir.join(dir))
                        .map_err(|e| fail(format!("its tokenizer: {e}")))
                })
                .transpose()?;
            Source::jsonl_keeping(&source_dir.join(path), field, keep, tokenizer.as_ref())
                .map(|source| (source, tokenizer))
        }
    }
    .map_err(|e| fail(e.to_string()))
}

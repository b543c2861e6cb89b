//! What every rank reads and nobody writes: the plan (which carries the kernels and losses it
//! runs) and the datasets it samples.

use std::collections::BTreeMap;
use std::path::Path;

use rlc_plan::Plan;
use rlc_plan::model::{DatasetSource, OpKind};

use super::error::{Result, RunError};
use crate::data::Source;
use crate::hf::HfTokenizer;

pub struct Job<'a> {
    pub plan: &'a Plan,
    /// Each dataset the plan samples, by the name the pipeline uses.
    pub sources: BTreeMap<String, Source>,
    /// The Hugging Face tokenizer of each dataset that has one (verifiers decode text with it).
    pub tokenizers: BTreeMap<String, HfTokenizer>,
    /// Iterations of the step loop.
    pub steps: u64,
}

impl<'a> Job<'a> {
    /// `source_dir`: the root file's folder, which relative dataset paths start from.
    pub fn new(plan: &'a Plan, source_dir: &Path) -> Result<Job<'a>> {
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
        let steps = plan.steps.ok_or_else(|| {
            RunError::Unsupported("the pipeline's step count is not fixed by the program".into())
        })?;
        Ok(Job {
            plan,
            sources,
            tokenizers,
            steps,
        })
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

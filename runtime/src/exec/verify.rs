//! `Verify` ops: this rank's rollout rows, decoded to text with their dataset's tokenizer and
//! the row fields the verifier asks for, scored by the verifier's worker pool
//! (`crate::verify`). The pool starts on the rank's first call and lives as long as the rank.
//! The pool scores on a background thread while the rank runs on (`docs/verifiers.md#overlap`):
//! the op's outputs are made on the rank's thread when the first op that reads one runs, or at
//! the end of the step; tensors never leave the rank's thread.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use rlc_plan::model::{Op, OpKind};
use tch::{Device, Kind, Tensor};

use super::error::{Result, RunError};
use super::rank::Rank;
use super::rollout::DATASET_ROW;
use super::values::{Rollout, Val};
use crate::collectives::ReduceOp;
use crate::data::{Source, tokens};
use crate::hf::HfTokenizer;
use crate::verify::{Item, Outcome, Pool, apply};

/// The metric that counts a verifier's failed samples in a step (over all data ranks).
pub fn failures_key(verifier: &str) -> String {
    format!("verifier/{verifier}/failures")
}

/// A verify op whose requests the pool is scoring on a background thread: its outputs are
/// made when an op reads one of them, or at the end of the step.
pub(super) struct InFlight {
    op: u32,
    first_sample: u64,
    /// When the rank reached the op.
    started: Instant,
    /// The outcomes, and when the last one came back.
    scoring: JoinHandle<(Vec<Outcome>, Instant)>,
}

impl Rank<'_> {
    /// Decodes this rank's rows and hands them to the verifier's pool. Unless the run asks for
    /// verifiers in place, the pool scores them on a background thread while the rank runs the
    /// ops that do not read the reward; [`Rank::await_verify`] makes the outputs.
    pub(super) fn verify(&mut self, op: &Op, step: u64) -> Result<()> {
        let started = Instant::now();
        let OpKind::Verify {
            verifier,
            dataset,
            fields,
        } = &op.kind
        else {
            return Err(RunError::Plan(format!("`{}` is not a verify op", op.label)));
        };
        let plan = self.job.plan;
        let declaration = plan
            .verifiers
            .iter()
            .find(|v| v.name == *verifier)
            .ok_or_else(|| RunError::Plan(format!("no verifier `{verifier}`")))?;
        if op.outputs.len() != 1 + declaration.metrics.len() {
            return Err(RunError::Plan(format!(
                "`{}` has {} outputs, verifier `{verifier}` gives a reward and {} metrics",
                op.label,
                op.outputs.len(),
                declaration.metrics.len()
            )));
        }
        let source = self.job.sources.get(dataset).ok_or_else(|| {
            RunError::Plan(format!("`{}` reads no dataset `{dataset}`", op.label))
        })?;
        let tokenizer = self.job.tokenizers.get(dataset);
        let rollout = self.rollout_input(op)?;
        let items = items(rollout, source, tokenizer, fields, dataset)?;
        let (index, _) = self.data_rank(op)?;
        let first_sample = u64::from(index) * items.len() as u64;
        if !self.verifiers.contains_key(verifier) {
            let pool = Pool::start(declaration, &self.source_dir)
                .map_err(|message| RunError::VerifierStart { message })?;
            self.verifiers.insert(verifier.clone(), Arc::new(pool));
        }
        let pool = Arc::clone(&self.verifiers[verifier]);
        if self.verify_in_place {
            let outcomes = pool.score(&items);
            return self.verified(op, step, first_sample, outcomes);
        }
        let scoring = std::thread::Builder::new()
            .name(format!("rlc-verify-{verifier}"))
            .spawn(move || {
                let outcomes = pool.score(&items);
                (outcomes, Instant::now())
            })
            .map_err(|e| RunError::VerifierStart {
                message: format!("verifier `{verifier}`: cannot start a thread: {e}"),
            })?;
        self.in_flight.push(InFlight {
            op: op.id,
            first_sample,
            started,
            scoring,
        });
        Ok(())
    }

    /// Waits for the verify ops in flight whose outputs `reads` names (all of them with `None`)
    /// and makes their outputs, in the order the rank reached them. A failure with `on_error:
    /// fail` is raised here.
    pub(super) fn await_verify(&mut self, reads: Option<&[u32]>, step: u64) -> Result<()> {
        let plan = self.job.plan;
        let wanted = |f: &InFlight| {
            reads.is_none_or(|ids| {
                plan.ops[f.op as usize]
                    .outputs
                    .iter()
                    .any(|o| ids.contains(o))
            })
        };
        while let Some(i) = self.in_flight.iter().position(wanted) {
            let f = self.in_flight.remove(i);
            let op = &plan.ops[f.op as usize];
            let (outcomes, scored) = f.scoring.join().map_err(|panic| {
                RunError::Plan(format!(
                    "`{}`: the verifier's thread panicked: {}",
                    op.label,
                    crate::panics::panic_message(&panic)
                ))
            })?;
            // The op's span runs from the rank reaching it to its last result.
            self.trace_span(op, step, f.started, scored);
            self.verified(op, step, f.first_sample, outcomes)?;
        }
        Ok(())
    }

    /// Whether `op`'s span is written when its results are awaited rather than when it returns.
    pub(super) fn in_flight(&self, op: &Op) -> bool {
        self.in_flight.iter().any(|f| f.op == op.id)
    }

    /// The outcomes of `op` → its outputs, with `on_error` applied; the failures are counted
    /// over the data ranks at the end of the step.
    fn verified(
        &mut self,
        op: &Op,
        step: u64,
        first_sample: u64,
        outcomes: Vec<Outcome>,
    ) -> Result<()> {
        let OpKind::Verify { verifier, .. } = &op.kind else {
            return Err(RunError::Plan(format!("`{}` is not a verify op", op.label)));
        };
        let declaration = self
            .verifiers
            .get(verifier)
            .and_then(|p| p.verifier())
            .ok_or_else(|| RunError::Plan(format!("no verifier `{verifier}`")))?;
        let scores = apply(declaration, outcomes, first_sample, step)?;
        self.verify_failures.push((op.id, scores.failures));
        for (&id, t) in op.outputs.iter().zip(scores.tensors(self.device)) {
            self.values.insert(id, Val::Tensor(t));
        }
        Ok(())
    }

    /// The step's failures of each verifier (`verifier/<name>/failures`), summed over its op's
    /// data ranks, in op order (every rank of an op's group does this after the step's ops, so
    /// the collectives match).
    pub(super) fn count_verify_failures(&mut self) -> Result<Vec<(String, f64)>> {
        let plan = self.job.plan;
        let mut local = std::mem::take(&mut self.verify_failures);
        local.sort_by_key(|(op, _)| *op);
        let mut counted: Vec<(String, f64)> = Vec::new();
        for (op, failed) in local {
            let op = &plan.ops[op as usize];
            let OpKind::Verify { verifier, .. } = &op.kind else {
                continue;
            };
            let failures = self.all_reduce(op, &Tensor::from(failed as f64), ReduceOp::Sum)?;
            let (key, failed) = (failures_key(verifier), failures.double_value(&[]));
            match counted.iter_mut().find(|(k, _)| *k == key) {
                // A verifier called twice in a step: the step's failures of both calls.
                Some((_, total)) => *total += failed,
                None => counted.push((key, failed)),
            }
        }
        Ok(counted)
    }
}

/// What the verifier reads of each row of `r`.
fn items(
    r: &Rollout,
    source: &Source,
    tokenizer: Option<&HfTokenizer>,
    fields: &[String],
    dataset: &str,
) -> Result<Vec<Item>> {
    let rows = |t: &Tensor| -> Result<Vec<Vec<i64>>> {
        Ok(Vec::<Vec<i64>>::try_from(
            t.to_device(Device::Cpu).to_kind(Kind::Int64),
        )?)
    };
    let field = |name: &str| {
        r.field(name)
            .ok_or_else(|| RunError::Plan(format!("a rollout has no field `{name}`")))
    };
    let prompt_attention = r.attention.narrow(1, 0, r.prompt_len);
    let prompt_ids = rows(&r.ids.narrow(1, 0, r.prompt_len))?;
    let prompt_mask = rows(&prompt_attention)?;
    let responses = rows(field("response")?)?;
    let response_mask = rows(field("mask")?)?;
    let targets = rows(field("target")?)?;
    let dataset_rows: Vec<i64> = match r.field(DATASET_ROW) {
        Some(t) => Vec::<i64>::try_from(t.to_device(Device::Cpu).to_kind(Kind::Int64))?,
        None => vec![-1; prompt_ids.len()],
    };
    let decode = |ids: &[i64]| decode_text(tokenizer, dataset, ids);
    let specials = source.specials();
    let mut items = Vec::with_capacity(prompt_ids.len());
    for i in 0..prompt_ids.len() {
        let keep = |ids: &[i64], mask: &[i64]| -> Vec<i64> {
            ids.iter()
                .zip(mask)
                .filter(|(_, m)| **m != 0)
                .map(|(t, _)| *t)
                .collect()
        };
        let prompt = keep(&prompt_ids[i], &prompt_mask[i]);
        let response = keep(&responses[i], &response_mask[i]);
        // The text stops before the end-of-answer token.
        let text_end = specials
            .eos
            .and_then(|eos| response.iter().position(|&t| t == eos))
            .unwrap_or(response.len());
        let row = u64::try_from(dataset_rows[i]).ok();
        let row_fields = row_fields(source, tokenizer, dataset, fields, &targets[i], row)?;
        items.push(Item {
            prompt: decode(&prompt)?,
            response: decode(&response[..text_end])?,
            prompt_ids: prompt,
            response_ids: response,
            fields: row_fields,
        });
    }
    Ok(items)
}

/// `ids` as text: with the dataset's tokenizer (special tokens left out), or in the task
/// alphabet without its BOS, EOS and padding.
pub(super) fn decode_text(
    tokenizer: Option<&HfTokenizer>,
    dataset: &str,
    ids: &[i64],
) -> Result<String> {
    match tokenizer {
        Some(t) => t.decode(ids, true).map_err(|e| RunError::Dataset {
            name: dataset.to_string(),
            message: format!("cannot decode a row's tokens as text: {e}"),
        }),
        None => Ok(tokens::decode(
            &ids.iter()
                .copied()
                .filter(|t| ![tokens::BOS, tokens::EOS, tokens::PAD].contains(t))
                .collect::<Vec<_>>(),
        )),
    }
}

/// The row fields `fields` of a sample whose target is `target` and dataset row `row`: a task's
/// `answer` (its target as text), or a JSONL row's kept fields.
pub(super) fn row_fields(
    source: &Source,
    tokenizer: Option<&HfTokenizer>,
    dataset: &str,
    fields: &[String],
    target: &[i64],
    row: Option<u64>,
) -> Result<BTreeMap<String, String>> {
    let specials = source.specials();
    let mut out = BTreeMap::new();
    for name in fields {
        let value = match source {
            Source::Task(_) if name == "answer" => {
                let target: Vec<i64> = target
                    .iter()
                    .copied()
                    .take_while(|&t| Some(t) != specials.eos && t != specials.pad)
                    .collect();
                decode_text(tokenizer, dataset, &target)?
            }
            Source::Task(_) => {
                return Err(RunError::Plan(format!(
                    "dataset `{dataset}` (a task) has no field `{name}` (it has `answer`)"
                )));
            }
            Source::Jsonl(prompts) => row
                .and_then(|row| prompts.fields(row))
                .and_then(|f| f.get(name))
                .cloned()
                .ok_or_else(|| RunError::Dataset {
                    name: dataset.to_string(),
                    message: format!(
                        "a row has no kept field `{name}` (add it to the dataset's `keep: [...]`)"
                    ),
                })?,
        };
        out.insert(name.clone(), value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hf::tests::fixture;

    /// Rows left-padded to one width, as `generate` lays them out.
    fn left_padded(rows: &[&[i64]], pad: i64) -> (Tensor, Tensor) {
        let width = rows.iter().map(|r| r.len()).max().unwrap();
        let mut ids = Vec::new();
        let mut mask = Vec::new();
        for r in rows {
            let n = width - r.len();
            ids.extend(std::iter::repeat_n(pad, n).chain(r.iter().copied()));
            mask.extend(std::iter::repeat_n(0i64, n).chain(std::iter::repeat_n(1, r.len())));
        }
        let shape = [rows.len() as i64, width as i64];
        (
            Tensor::from_slice(&ids).view(shape),
            Tensor::from_slice(&mask).view(shape),
        )
    }

    #[test]
    fn rows_decode_with_the_dataset_tokenizer_and_carry_their_own_kept_fields() {
        let tokenizer = HfTokenizer::load(&fixture("qwen2-tiny")).unwrap();
        let dir = std::env::temp_dir().join(format!("rlc-verify-items-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rows.jsonl");
        std::fs::write(
            &file,
            "{\"prompt\": \"7+8=\", \"answer\": \"15\"}\n\
             {\"prompt\": \"reverse 90125 -> \", \"answer\": \"52109\"}\n",
        )
        .unwrap();
        let keep = ["answer".to_string()];
        let source = Source::jsonl_keeping(&file, "prompt", &keep, Some(&tokenizer)).unwrap();
        let Source::Jsonl(prompts) = &source else {
            unreachable!()
        };
        let specials = source.specials();
        let eos = specials.eos.unwrap();
        let [first, second] = prompts.samples() else {
            panic!("two rows")
        };
        // Rollout row 0 is the file's second row, row 1 its first: fields follow the rows.
        let (prompt_ids, prompt_mask) = left_padded(&[&second.prompt, &first.prompt], specials.pad);
        let mut long = tokenizer.encode_plain("52109").unwrap();
        long.push(eos);
        let mut short = tokenizer.encode_plain("15").unwrap();
        short.push(eos);
        let width = long.len().max(short.len());
        let mut response = Vec::new();
        let mut mask = Vec::new();
        for r in [&long, &short] {
            response.extend(
                r.iter()
                    .copied()
                    .chain(std::iter::repeat_n(specials.pad, width - r.len())),
            );
            mask.extend((0..width).map(|i| i < r.len()));
        }
        let shape = [2, width as i64];
        let response = Tensor::from_slice(&response).view(shape);
        let rollout = Rollout {
            fields: vec![
                ("response".into(), response.shallow_clone()),
                ("mask".into(), Tensor::from_slice(&mask).view(shape)),
                ("target".into(), response.zeros_like()),
                (DATASET_ROW.into(), Tensor::from_slice(&[1i64, 0])),
            ],
            ids: Tensor::cat(&[&prompt_ids, &response], 1),
            attention: Tensor::cat(&[&prompt_mask, &response.ones_like()], 1),
            prompt_len: prompt_ids.size()[1],
            response_len: width as i64,
        };
        let out = items(&rollout, &source, Some(&tokenizer), &keep, "rows").unwrap();
        assert_eq!(out[0].prompt, "reverse 90125 -> ");
        assert_eq!(out[0].prompt_ids, second.prompt, "no padding");
        assert_eq!(out[0].response, "52109", "the text stops before EOS");
        assert_eq!(out[0].response_ids, long, "the ids keep it");
        assert_eq!(out[0].fields["answer"], "52109");
        assert_eq!(out[1].prompt, "7+8=");
        assert_eq!(out[1].response, "15");
        assert_eq!(out[1].response_ids, short, "padding after EOS left out");
        assert_eq!(out[1].fields["answer"], "15");
        // A field the dataset does not keep is an error naming it.
        let e = items(
            &rollout,
            &source,
            Some(&tokenizer),
            &["level".into()],
            "rows",
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("no kept field `level`"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

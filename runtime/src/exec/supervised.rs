//! `ds.demonstrations(n)` and `ds.preferences(n, split)`: teacher-forced rollouts whose response
//! is the task's answer (or, for a pair's rejected row, a corrupted answer), so that `update`
//! trains on supervised data exactly as it trains on generated rollouts.
//!
//! Rows of a data rank are rows `first..` of the step's batch, as for `sample`: demonstration
//! `i` of step `s` is item `s·n + i` of the train split's stream, whatever the number of ranks;
//! the test split draws the same `n` items every step (a fixed held-out set). A pair takes rows
//! `2i` (chosen) and `2i + 1` (rejected) and the group id `i`.

use rlc_plan::model::{DataSplit, Op, OpKind, SampleForm};
use tch::{Device, Kind, Tensor};

use super::error::{Result, RunError};
use super::rank::Rank;
use super::values::{Rollout, Val};
use crate::data::supervised::{self, Split};
use crate::data::{Source, tokens};

impl Rank<'_> {
    /// The rollout a supervised sample op gives this rank.
    pub(super) fn supervised(&self, op: &Op, step: u64) -> Result<Val> {
        let OpKind::Sample {
            dataset,
            count,
            form: Some(form),
            split,
        } = &op.kind
        else {
            unreachable!("supervised() runs demonstrations and preferences ops")
        };
        let total = count.ok_or_else(|| {
            RunError::Unsupported(format!("drawing an unknown count from `{dataset}`"))
        })?;
        let split = match split {
            None | Some(DataSplit::Train) => Split::Train,
            Some(DataSplit::Test) => Split::Test,
        };
        let form = *form;
        let task = match self.samplers().get(dataset).map(|s| s.source()) {
            Some(Source::Task(task)) => task.clone(),
            Some(_) => {
                return Err(RunError::Unsupported(format!(
                    "`{dataset}.{}`: supervised data needs a task's reference answers",
                    form.as_str()
                )));
            }
            None => return Err(RunError::Plan(format!("no dataset `{dataset}`"))),
        };
        let (index, parts) = self.data_rank(op)?;
        if !total.is_multiple_of(u64::from(parts)) {
            return Err(RunError::Unsupported(format!(
                "`{dataset}.{}({total})` does not split over {parts} data ranks",
                form.as_str()
            )));
        }
        let share = total / u64::from(parts);
        let first = u64::from(index) * share;
        let base = match split {
            Split::Train => step * total,
            Split::Test => 0,
        };
        let width = match form {
            SampleForm::Demonstrations => task.demonstration_len(),
            SampleForm::Preferences => task.answer_len(),
        };
        let mut prompts = Vec::new();
        let mut responses = Vec::new();
        let mut trained = Vec::new();
        let mut targets = Vec::new();
        let mut groups = Vec::new();
        let mut chosen = Vec::new();
        for i in first..first + share {
            let (sample, mut rng) = supervised::draw(&task, self.seed(), base + i, split);
            match form {
                SampleForm::Demonstrations => {
                    let (response, taught) = task.demonstration(&sample);
                    targets.push(response.clone());
                    responses.push(response);
                    trained.push(taught);
                    groups.push(i as i64);
                }
                SampleForm::Preferences => {
                    let rejected = supervised::corrupt(&sample.target, &mut rng);
                    trained.push(vec![true; sample.target.len()]);
                    trained.push(vec![true; rejected.len()]);
                    responses.push(sample.target.clone());
                    responses.push(rejected);
                    prompts.push(sample.prompt.clone());
                    targets.push(sample.target.clone());
                    targets.push(sample.target);
                    groups.extend([i as i64, i as i64]);
                    chosen.extend([true, false]);
                }
            }
            prompts.push(sample.prompt);
        }
        let mut rollout = teacher_forced(&prompts, &responses, &trained, &targets, &groups, width)?;
        if form == SampleForm::Preferences {
            rollout
                .fields
                .push(("chosen".into(), Tensor::from_slice(&chosen)));
        }
        Ok(Val::Rollout(to_device(rollout, self.device)))
    }
}

/// Prompts followed by the given responses, as a rollout of `width` response columns: `mask`
/// covers the response tokens `trained` marks (a tool's answer inside a demonstration is read,
/// not trained on), never the padding after a response. Every prompt must have the same length
/// (a task's do).
pub fn teacher_forced(
    prompts: &[Vec<i64>],
    responses: &[Vec<i64>],
    trained: &[Vec<bool>],
    targets: &[Vec<i64>],
    groups: &[i64],
    width: i64,
) -> Result<Rollout> {
    let rows = prompts.len() as i64;
    let prompt_len = prompts.first().map_or(0, |p| p.len() as i64);
    if prompts.iter().any(|p| p.len() as i64 != prompt_len) {
        return Err(RunError::Unsupported(
            "demonstrations of prompts of different lengths".into(),
        ));
    }
    let padded = |rows: &[Vec<i64>]| -> Vec<i64> {
        rows.iter()
            .flat_map(|r| {
                let mut r: Vec<i64> = r.iter().copied().take(width as usize).collect();
                r.resize(width as usize, tokens::PAD);
                r
            })
            .collect()
    };
    let lengths: Vec<i64> = responses
        .iter()
        .map(|r| (r.len() as i64).min(width))
        .collect();
    let prompt = Tensor::from_slice(&prompts.concat()).view([rows, prompt_len]);
    let response = Tensor::from_slice(&padded(responses)).view([rows, width]);
    let target = Tensor::from_slice(&padded(targets)).view([rows, width]);
    let columns = Tensor::arange(width, (Kind::Int64, Device::Cpu)).unsqueeze(0);
    let lengths = Tensor::from_slice(&lengths).unsqueeze(1);
    let taught: Vec<bool> = trained
        .iter()
        .flat_map(|t| {
            let mut t: Vec<bool> = t.iter().copied().take(width as usize).collect();
            t.resize(width as usize, false);
            t
        })
        .collect();
    let mask = columns
        .lt_tensor(&lengths)
        .logical_and(&Tensor::from_slice(&taught).view([rows, width]));
    let last = columns.eq_tensor(&(lengths - 1));
    let ids = Tensor::cat(&[&prompt, &response], 1);
    let attention = ids.ones_like();
    Ok(Rollout {
        fields: vec![
            ("prompt".into(), prompt),
            ("response".into(), response),
            ("target".into(), target),
            ("mask".into(), mask),
            ("last".into(), last),
            ("group".into(), Tensor::from_slice(groups)),
        ],
        ids,
        attention,
        prompt_len,
        response_len: width,
    })
}

fn to_device(r: Rollout, device: Device) -> Rollout {
    if device == Device::Cpu {
        return r;
    }
    Rollout {
        fields: r
            .fields
            .into_iter()
            .map(|(n, t)| (n, t.to_device(device)))
            .collect(),
        ids: r.ids.to_device(device),
        attention: r.attention.to_device(device),
        prompt_len: r.prompt_len,
        response_len: r.response_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(t: &Tensor) -> Vec<Vec<i64>> {
        Vec::<Vec<i64>>::try_from(t.to_kind(Kind::Int64)).unwrap()
    }

    #[test]
    fn responses_are_padded_and_masked_after_their_end() {
        let r = teacher_forced(
            &[vec![12, 1, 11], vec![12, 2, 11]],
            &[vec![3, 4, 13], vec![5, 13]],
            &[vec![true; 3], vec![true; 2]],
            &[vec![3, 4, 13], vec![5, 13]],
            &[7, 8],
            3,
        )
        .unwrap();
        assert_eq!(
            rows(&r.ids),
            [vec![12, 1, 11, 3, 4, 13], vec![12, 2, 11, 5, 13, 14]]
        );
        assert_eq!(
            rows(r.field("mask").unwrap()),
            [vec![1, 1, 1], vec![1, 1, 0]]
        );
        assert_eq!(
            rows(r.field("last").unwrap()),
            [vec![0, 0, 1], vec![0, 1, 0]]
        );
        assert_eq!(
            Vec::<i64>::try_from(r.field("group").unwrap()).unwrap(),
            [7, 8]
        );
        assert_eq!((r.prompt_len, r.response_len), (3, 3));
    }

    /// A demonstration of addition with a calculator: the call, the tool's answer (read, not
    /// trained on) and the copied answer, as the multi-turn rollout lays the same tokens out.
    #[test]
    fn a_tool_demonstration_trains_the_call_and_the_answer_not_the_tools_reply() {
        use crate::data::Task;
        use crate::data::tokens::{BOS, EOS, EQUALS, PLUS};
        let task = Task::new("add_with_tool", 2).unwrap();
        let sample = crate::data::Sample {
            prompt: vec![BOS, 4, 7, PLUS, 5, 8, EQUALS],
            target: vec![1, 0, 5, EOS],
            row: None,
        };
        let (response, taught) = task.demonstration(&sample);
        assert_eq!(
            response,
            [4, 7, PLUS, 5, 8, EOS, EQUALS, 1, 0, 5, 1, 0, 5, EOS]
        );
        // The sum in three digits, as the calculator writes it: `10+20` gives `=030`.
        let width = task.demonstration_len();
        assert_eq!(width, 14);
        let r = teacher_forced(
            std::slice::from_ref(&sample.prompt),
            std::slice::from_ref(&response),
            std::slice::from_ref(&taught),
            std::slice::from_ref(&response),
            &[0],
            width,
        )
        .unwrap();
        let mask = rows(r.field("mask").unwrap());
        assert_eq!(
            mask,
            [vec![1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]],
            "the call and the answer, not `=105`"
        );
        // A shorter sum is written with its leading zero.
        let short = crate::data::Sample {
            prompt: vec![BOS, 1, 0, PLUS, 2, 0, EQUALS],
            target: vec![3, 0, EOS],
            row: None,
        };
        let (response, taught) = task.demonstration(&short);
        let r = teacher_forced(
            std::slice::from_ref(&short.prompt),
            std::slice::from_ref(&response),
            std::slice::from_ref(&taught),
            std::slice::from_ref(&response),
            &[0],
            width,
        )
        .unwrap();
        assert_eq!(
            rows(r.field("response").unwrap()),
            [vec![1, 0, PLUS, 2, 0, EOS, EQUALS, 0, 3, 0, 0, 3, 0, EOS]]
        );
        assert_eq!(
            rows(r.field("mask").unwrap()),
            [vec![1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]]
        );
    }
}

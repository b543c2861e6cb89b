//! Cutting stopped rows out of the batch changes what is computed, not what is generated: a
//! large batch whose rows stop at many different lengths gives the same rollout with and without
//! it, and decodes fewer rows.

use std::cell::Cell;

use tch::{Device, Tensor, nn};

use super::*;
use crate::model::{Heads, ModelConfig};

/// A decoder that counts the rows it is asked to decode.
struct Counting<'a> {
    model: &'a Transformer,
    rows: Cell<i64>,
}

impl Decode for Counting<'_> {
    fn config(&self) -> &ModelConfig {
        Decode::config(self.model)
    }

    fn has_lm_head(&self) -> bool {
        Decode::has_lm_head(self.model)
    }

    fn new_cache(&self, positions: i64) -> KvCache {
        Decode::new_cache(self.model, positions)
    }

    fn next_logits(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, GenerateError> {
        self.rows.set(self.rows.get() + ids.size()[0]);
        self.model.next_logits(ids, mask, cache)
    }
}

fn lengths(mask: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(mask.sum_dim_intlist(1, false, Kind::Int64)).unwrap()
}

#[test]
fn stopped_rows_leave_the_batch_and_the_rollout_is_the_same() {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Transformer::new(&vs.root(), &ModelConfig::tiny(), Heads::POLICY, 5).unwrap();
    let prompts: Vec<Vec<i64>> = (0..32).map(|i| vec![1 + i % 7, 2 + i % 11, 3]).collect();
    let (ids, mask) = left_pad(&prompts, 0);
    let sampled = |compact: bool, eos: Option<i64>| GenerateConfig {
        max_new: 24,
        samples_per_prompt: 8,
        eos_token_id: eos,
        sampling: SamplingConfig::at_temperature(1.5),
        seed: 9,
        return_logits: true,
        compact_finished: compact,
        ..GenerateConfig::default()
    };
    // The token sampled most often first stops rows early and late.
    let probe = generate(&model, &ids, &mask, &sampled(false, None)).unwrap();
    let eos = probe
        .response_ids
        .flatten(0, -1)
        .bincount(None::<Tensor>, 48)
        .argmax(0, false)
        .int64_value(&[]);
    let run = |compact: bool| {
        let counting = Counting {
            model: &model,
            rows: Cell::new(0),
        };
        let out = generate(&counting, &ids, &mask, &sampled(compact, Some(eos))).unwrap();
        (out, counting.rows.get())
    };
    let (cut, cut_rows) = run(true);
    let (whole, whole_rows) = run(false);
    assert_eq!(cut.response_ids.size()[0], 256);
    let lens = lengths(&whole.response_mask);
    let distinct: std::collections::BTreeSet<i64> = lens.iter().copied().collect();
    assert!(
        distinct.len() >= 8 && lens.contains(&24),
        "rows should stop at many lengths, some never: {distinct:?}"
    );
    assert!(cut.response_ids.equal(&whole.response_ids));
    assert!(cut.response_mask.equal(&whole.response_mask));
    let diff = |a: &Tensor, b: &Tensor| (a - b).abs().max().double_value(&[]);
    let logp = diff(&cut.token_logprobs, &whole.token_logprobs);
    let logits = diff(&cut.logits.unwrap(), &whole.logits.unwrap());
    assert!(logp < 1e-5 && logits < 1e-4, "{logp} {logits}");
    assert!(
        (cut_rows as f64) < 0.9 * whole_rows as f64,
        "decoded {cut_rows} rows with compaction, {whole_rows} without"
    );
}

//! Stopped rows leaving the batch (`GenerateConfig::compact_finished`): 256 rows of the main
//! example's policy (2 layers, hidden 64) sample up to 24 new tokens at temperature 1.0 with an
//! EOS, so that rows stop at many lengths (a few run to the end), decoded from the KV cache with
//! and without compaction, alternately. Prints each side's median time, the tokens the rollouts
//! hold, and the ratio; asserts the two rollouts equal.
//!
//! libtorch runs on one thread, as one rank of the example's two ranks does on a 2-core machine.
//!
//! `cargo bench -p rlc-runtime --bench compaction`

mod common;

use rlc_runtime::generate::{GenerateConfig, SamplingConfig, generate, left_pad};
use std::time::Instant;
use tch::Kind;

const ROWS: i64 = 256;
const MAX_NEW: i64 = 24;

fn main() {
    tch::set_num_threads(1);
    let (_vs, model, config) = common::example_model();
    let device = common::device();
    let prompts: Vec<Vec<i64>> = (0..ROWS / 16)
        .map(|i| {
            (0..8)
                .map(|j| 1 + (i * 7 + j * 3) % (config.vocab - 1))
                .collect()
        })
        .collect();
    let (ids, mask) = left_pad(&prompts, 0);
    let (ids, mask) = (ids.to_device(device), mask.to_device(device));
    let how = |compact: bool| GenerateConfig {
        max_new: MAX_NEW,
        samples_per_prompt: 16,
        eos_token_id: Some(1),
        sampling: SamplingConfig::at_temperature(1.0),
        seed: 3,
        compact_finished: compact,
        ..GenerateConfig::default()
    };
    let calls = if common::benchmarking() { 7 } else { 1 };
    let mut times = [Vec::new(), Vec::new()];
    let mut outs = [None, None];
    for _ in 0..calls {
        for (side, compact) in [(0, true), (1, false)] {
            let start = Instant::now();
            let out = generate(&model, &ids, &mask, &how(compact)).expect("generates");
            common::sync(device);
            times[side].push(start.elapsed().as_secs_f64());
            outs[side] = Some(out);
        }
    }
    let [cut, whole] = outs.map(|o| o.expect("ran"));
    assert!(cut.response_ids.equal(&whole.response_ids));
    let lengths = whole.response_mask.sum_dim_intlist(1, false, Kind::Int64);
    let tokens = lengths.sum(Kind::Int64).int64_value(&[]);
    let longest = lengths.max().int64_value(&[]);
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let (c, w) = (median(&mut times[0]), median(&mut times[1]));
    let width = whole.response_ids.size()[1];
    println!(
        "compaction ({ROWS} rows, up to {MAX_NEW} new tokens, {tokens} generated, mean length {:.1}, longest {longest}, {width} decode steps, {:?}, {}):",
        tokens as f64 / ROWS as f64,
        device,
        if common::benchmarking() {
            "median of 7 alternated calls"
        } else {
            "test mode: one call each, not a measurement"
        }
    );
    println!(
        "  stopped rows cut out: {:.1} ms ({:.0} tokens/s)   kept: {:.1} ms ({:.0} tokens/s)   speed-up {:.2}x",
        c * 1e3,
        tokens as f64 / c,
        w * 1e3,
        tokens as f64 / w,
        w / c
    );
}

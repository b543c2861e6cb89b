//! Rollout speed: `generate` on the main example's policy (`examples/grpo_digits.rl`: 2 layers,
//! hidden 64, 4 heads, vocabulary 16) from prompts of 8 tokens, 16 new tokens per row with no EOS
//! (every row makes all 16), temperature 1.0, at batch 1 and batch 16, decoding from the KV cache
//! and (the comparison) recomputing the whole sequence every step. Criterion reports tokens/s;
//! a line per batch gives tokens/s with and without the cache and the speed-up. Asserts nothing
//! about time (the goal is that the cache is never slower).
//!
//! Then the cache itself: preallocated (written in place, the decoder's) against one that
//! concatenates each new position (copying the whole cache each step), at batch 16 and 120 new
//! tokens, where that copy grows with the length; the same tokens, checked.
//!
//! libtorch runs on one thread, as one rank of the example's two ranks does on a 2-core machine.
//!
//! `cargo bench -p rlc-runtime --bench rollout`

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, black_box};
use rlc_runtime::generate::{
    Decode, GenerateConfig, GenerateError, SamplingConfig, generate, left_pad,
};
use rlc_runtime::model::{KvCache, ModelConfig, Transformer};
use rlc_runtime::rng::Rng;
use std::time::{Duration, Instant};
use tch::Tensor;

const PROMPT: usize = 8;
const MAX_NEW: i64 = 16;
const BATCHES: [i64; 2] = [1, 16];

/// New tokens per row where the preallocated cache is set against concatenation.
const LONG_NEW: i64 = 120;

/// The model, with a cache that concatenates (the comparison for the preallocated one).
struct Concatenating<'a>(&'a Transformer);

impl Decode for Concatenating<'_> {
    fn config(&self) -> &ModelConfig {
        self.0.config()
    }

    fn has_lm_head(&self) -> bool {
        Decode::has_lm_head(self.0)
    }

    fn new_cache(&self, _positions: i64) -> KvCache {
        KvCache::new(self.0.config().layers as usize)
    }

    fn next_logits(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, GenerateError> {
        self.0.next_logits(ids, mask, cache)
    }
}

fn generate_config(use_kv_cache: bool) -> GenerateConfig {
    GenerateConfig {
        max_new: MAX_NEW,
        eos_token_id: None,
        sampling: SamplingConfig::at_temperature(1.0),
        seed: 3,
        use_kv_cache,
        ..GenerateConfig::default()
    }
}

/// `batch` prompts of `PROMPT` random tokens (1..vocab, so none is the pad id 0).
fn prompts(batch: i64, vocab: i64) -> (Tensor, Tensor) {
    let mut rng = Rng::new(11);
    let rows: Vec<Vec<i64>> = (0..batch)
        .map(|_| {
            (0..PROMPT)
                .map(|_| 1 + (rng.next_u64() % (vocab as u64 - 1)) as i64)
                .collect()
        })
        .collect();
    let (ids, mask) = left_pad(&rows, 0);
    let device = common::device();
    (ids.to_device(device), mask.to_device(device))
}

fn rollout<M: Decode>(model: &M, ids: &Tensor, mask: &Tensor, config: &GenerateConfig) -> Tensor {
    let out = generate(model, ids, mask, config).expect("generates");
    assert_eq!(out.response_ids.size(), [ids.size()[0], config.max_new]);
    common::sync(ids.device());
    out.response_ids
}

/// Median seconds per `generate` call over calls made for about `budget` (at least 3; one call
/// when `budget` is zero), after a warm-up call.
fn seconds_per_call<M: Decode>(
    model: &M,
    ids: &Tensor,
    mask: &Tensor,
    config: &GenerateConfig,
    budget: Duration,
) -> f64 {
    let _ = rollout(model, ids, mask, config);
    let start = Instant::now();
    let mut times = Vec::new();
    loop {
        let t = Instant::now();
        let _ = black_box(rollout(model, ids, mask, config));
        times.push(t.elapsed().as_secs_f64());
        if budget.is_zero() || (times.len() >= 3 && start.elapsed() >= budget) {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    tch::set_num_threads(1);
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let (_vs, model, config) = common::example_model_up_to(PROMPT as i64 + LONG_NEW);
    let inputs: Vec<(i64, Tensor, Tensor)> = BATCHES
        .iter()
        .map(|&batch| {
            let (ids, mask) = prompts(batch, config.vocab);
            (batch, ids, mask)
        })
        .collect();

    let mut group = criterion.benchmark_group("rollout");
    for (batch, ids, mask) in &inputs {
        group.throughput(Throughput::Elements((batch * MAX_NEW) as u64));
        for (name, cache) in [("kv_cache", true), ("no_cache", false)] {
            let how = generate_config(cache);
            group.bench_with_input(BenchmarkId::new(name, batch), &how, |b, how| {
                b.iter(|| rollout(&model, black_box(ids), black_box(mask), how))
            });
        }
    }
    group.finish();

    let (budget, timing) = if common::benchmarking() {
        (Duration::from_secs(1), "median of ~1 s of calls")
    } else {
        (
            Duration::ZERO,
            "test mode: one call each, not a measurement",
        )
    };
    println!(
        "rollout figures ({} model, {:?}, prompt {PROMPT}, {MAX_NEW} new tokens per row, 1 libtorch thread, {timing}):",
        common::model_name(),
        common::device(),
    );
    for (batch, ids, mask) in &inputs {
        let tokens = (batch * MAX_NEW) as f64;
        let cached = seconds_per_call(&model, ids, mask, &generate_config(true), budget);
        let uncached = seconds_per_call(&model, ids, mask, &generate_config(false), budget);
        println!(
            "  batch {batch:>2}: KV cache {:>8.0} tokens/s ({:.2} ms/rollout)  no cache {:>8.0} tokens/s ({:.2} ms/rollout)  speed-up {:.2}x",
            tokens / cached,
            cached * 1e3,
            tokens / uncached,
            uncached * 1e3,
            uncached / cached,
        );
    }
    let (ids, mask) = prompts(16, config.vocab);
    let long = GenerateConfig {
        max_new: LONG_NEW,
        ..generate_config(true)
    };
    let concatenating = Concatenating(&model);
    assert!(
        rollout(&model, &ids, &mask, &long).equal(&rollout(&concatenating, &ids, &mask, &long)),
        "a preallocated cache must decode the tokens a concatenating one does"
    );
    let tokens = (16 * LONG_NEW) as f64;
    let preallocated = seconds_per_call(&model, &ids, &mask, &long, budget);
    let concatenated = seconds_per_call(&concatenating, &ids, &mask, &long, budget);
    println!(
        "  batch 16, {LONG_NEW} new tokens: preallocated cache {:>8.0} tokens/s ({:.2} ms/rollout)  concatenated {:>8.0} tokens/s ({:.2} ms/rollout)  speed-up {:.2}x",
        tokens / preallocated,
        preallocated * 1e3,
        tokens / concatenated,
        concatenated * 1e3,
        concatenated / preallocated,
    );
    criterion.final_summary();
}

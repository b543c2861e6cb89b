//! Training speed: one policy update step of the main example's model (`examples/grpo_digits.rl`:
//! 2 layers, hidden 64, 4 heads, vocabulary 16) the way `rlc run` takes it: one minibatch of
//! 128 sequences of 6 prompt + 4 response tokens, `logprobs` over the response, the PPO clipped
//! loss of `std.algo.ppo_clip` (dual clip, ε = 0.2) averaged over the response tokens, backward,
//! gradient clipping to norm 1 and an AdamW step. Throughput counts the response tokens trained
//! per step (128 × 4). Prints ms/step and tokens/s; asserts nothing about time (the goal is a
//! step well under the rollout that feeds it).
//!
//! libtorch runs on one thread, as one rank of the example's two ranks does on a 2-core machine
//! (in the example each rank takes half of a minibatch; here one thread takes all 128 rows).
//!
//! `cargo bench -p rlc-runtime --bench train_step`

mod common;

use criterion::{Criterion, SamplingMode, Throughput, black_box};
use rlc_runtime::model::Transformer;
use rlc_runtime::optim::{AdamW, AdamWConfig, clip_grad_norm};
use rlc_runtime::rng::Rng;
use std::time::{Duration, Instant};
use tch::{Kind, Tensor};

const ROWS: i64 = 128;
const PROMPT: i64 = 6;
const RESPONSE: i64 = 4;
/// The example's learning rate (after warm-up).
const LR: f64 = 1e-3;

/// What the loss reads besides the model: a fixed batch, as a rollout would hand it over.
struct Batch {
    /// `[ROWS, PROMPT + RESPONSE]` token ids and the all-ones attention mask.
    ids: Tensor,
    mask: Tensor,
    /// `[ROWS, RESPONSE]`: the log-probabilities at rollout time, the advantages, the mask.
    old_logp: Tensor,
    adv: Tensor,
    response_mask: Tensor,
}

impl Batch {
    fn new(model: &Transformer, vocab: i64) -> Self {
        let mut rng = Rng::new(5);
        let width = PROMPT + RESPONSE;
        let ids: Vec<i64> = (0..ROWS * width)
            .map(|_| (rng.next_u64() % vocab as u64) as i64)
            .collect();
        let device = common::device();
        let ids = Tensor::from_slice(&ids)
            .view([ROWS, width])
            .to_device(device);
        let mask = ids.ones_like();
        let old_logp = tch::no_grad(|| response_logprobs(model, &ids, &mask));
        let adv = rng.normal_tensor(&[ROWS, RESPONSE], 1.0).to_device(device);
        let response_mask = Tensor::ones([ROWS, RESPONSE], (Kind::Float, device));
        Self {
            ids,
            mask,
            old_logp,
            adv,
            response_mask,
        }
    }
}

/// `[ROWS, RESPONSE]`: each response token's log-probability, as `exec::rollout::logprobs` cuts it.
fn response_logprobs(model: &Transformer, ids: &Tensor, mask: &Tensor) -> Tensor {
    model.logprobs(ids, mask).narrow(1, PROMPT - 1, RESPONSE)
}

/// `std.algo.ppo_clip(logp, old_logp, adv, eps)` per token (dual clip `c = 3`).
fn ppo_clip(logp: &Tensor, old_logp: &Tensor, adv: &Tensor, eps: f64) -> Tensor {
    let ratio = (logp - old_logp).exp();
    let plain = (-adv * &ratio).maximum(&(-adv * ratio.clamp(1.0 - eps, 1.0 + eps)));
    let dual = (-adv * 3.0).minimum(&plain);
    dual.where_self(&adv.lt(0.0), &plain)
}

/// `std.algo.token_mean(x, m)`: the mean over the real tokens.
fn token_mean(x: &Tensor, mask: &Tensor) -> Tensor {
    (x * mask).sum(Kind::Float) / mask.sum(Kind::Float)
}

/// One optimiser step on `batch`; returns the loss.
fn train_step(model: &Transformer, optimizer: &mut AdamW, batch: &Batch) -> f64 {
    optimizer.zero_grad();
    let logp = response_logprobs(model, &batch.ids, &batch.mask);
    let loss = token_mean(
        &ppo_clip(&logp, &batch.old_logp, &batch.adv, 0.2),
        &batch.response_mask,
    );
    let value = loss.double_value(&[]);
    assert!(value.is_finite(), "the loss is {value}");
    loss.backward();
    let params = optimizer.params();
    clip_grad_norm(&params, 1.0);
    optimizer.step(LR);
    common::sync(logp.device());
    value
}

fn main() {
    tch::set_num_threads(1);
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let (vs, model, config) = common::example_model();
    let mut optimizer = AdamW::for_var_store(&vs, AdamWConfig::default());
    let batch = Batch::new(&model, config.vocab);
    let tokens = ROWS * RESPONSE;

    let mut group = criterion.benchmark_group("train_step");
    group
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(tokens as u64));
    group.bench_function(format!("{ROWS}x({PROMPT}+{RESPONSE})"), |b| {
        b.iter(|| train_step(&model, &mut optimizer, black_box(&batch)))
    });
    group.finish();

    // Median over about a second of steps (one step under `cargo test --benches`).
    let budget = if common::benchmarking() {
        Duration::from_secs(1)
    } else {
        Duration::ZERO
    };
    let start = Instant::now();
    let mut times = Vec::new();
    loop {
        let t = Instant::now();
        let _ = black_box(train_step(&model, &mut optimizer, &batch));
        times.push(t.elapsed().as_secs_f64());
        if budget.is_zero() || (times.len() >= 3 && start.elapsed() >= budget) {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    let step = times[times.len() / 2];
    println!(
        "train step ({ROWS} rows x ({PROMPT} prompt + {RESPONSE} response) tokens, {} model, {:?}, 1 libtorch thread, {}): {:.1} ms/step, {:.0} tokens/s trained",
        common::model_name(),
        common::device(),
        if budget.is_zero() {
            "test mode: one step, not a measurement".to_string()
        } else {
            format!("median of {} steps", times.len())
        },
        step * 1e3,
        tokens as f64 / step,
    );
    criterion.final_summary();
}

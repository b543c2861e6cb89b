//! Training speed: one policy update step of the main example's model (`examples/grpo_digits.rl`:
//! 2 layers, hidden 64, 4 heads, vocabulary 16) the way `rlc run` takes it: one minibatch of
//! 128 sequences of 6 prompt + 4 response tokens, `logprobs` over the response (the head at the
//! positions read, `Transformer::logprobs_at`), the PPO clipped loss of `std.algo.ppo_clip`
//! (dual clip, ε = 0.2) averaged over the response tokens, backward, gradient clipping to norm 1
//! and an AdamW step. Throughput counts the response tokens trained per step (128 × 4). Prints
//! ms/step and tokens/s; asserts nothing about time (the goal is a step well under the rollout
//! that feeds it).
//!
//! `RLC_BENCH_ROWS`, `RLC_BENCH_PROMPT` and `RLC_BENCH_RESPONSE` change the batch (a GPU wants
//! thousands of tokens a step); `RLC_BENCH_PRECISION=bf16` holds the model in bfloat16 with
//! float32 master weights, as `precision = bf16` does; with `RLC_BENCH_PEAK_TFLOPS` (the
//! device's peak for matrix products in that precision) it also prints the model FLOPs
//! utilisation, counted as `benches/pytorch/train_step.py` counts it for PyTorch eager on the
//! same shapes (see [`model_flops`]).
//!
//! libtorch runs on one thread, as one rank of the example's two ranks does on a 2-core machine
//! (in the example each rank takes half of a minibatch; here one thread takes all 128 rows).
//!
//! `cargo bench -p rlc-runtime --bench train_step`

mod common;

use criterion::{Criterion, SamplingMode, Throughput, black_box};
use rlc_runtime::model::{ModelConfig, Rows, Transformer};
use rlc_runtime::optim::{AdamW, AdamWConfig, clip_grad_norm};
use rlc_runtime::rng::Rng;
use std::time::{Duration, Instant};
use tch::{Kind, Tensor};

/// The example's learning rate (after warm-up).
const LR: f64 = 1e-3;

/// The batch a step trains on: `rows` sequences of `prompt + response` tokens.
#[derive(Clone, Copy)]
struct Shape {
    rows: i64,
    prompt: i64,
    response: i64,
}

impl Shape {
    /// The example's minibatch, or what `RLC_BENCH_ROWS` / `_PROMPT` / `_RESPONSE` say.
    fn from_env() -> Self {
        let read = common::positive_from_env;
        Self {
            rows: read("RLC_BENCH_ROWS", 128),
            prompt: read("RLC_BENCH_PROMPT", 6),
            response: read("RLC_BENCH_RESPONSE", 4),
        }
    }

    fn width(self) -> i64 {
        self.prompt + self.response
    }

    /// The positions whose next token the loss reads.
    fn read(self) -> Rows {
        Rows {
            first: self.prompt - 1,
            len: self.response,
        }
    }
}

/// The matrix-product FLOPs of one training step (forward and backward: 3 × the forward's),
/// counted alike for PyTorch (`benches/pytorch/train_step.py::model_flops`): every layer at every
/// position (attention over the whole width, as MFU's convention counts it, causal or not), the
/// head at the positions read. Element-wise work is not counted.
fn model_flops(config: &ModelConfig, shape: Shape) -> f64 {
    let (d, layers) = (config.hidden as f64, config.layers as f64);
    let head_dim = d / config.heads as f64;
    let (q, kv) = (d, config.kv_heads as f64 * head_dim);
    let per_position = 2.0 * (d * q + 2.0 * d * kv + q * d + 3.0 * d * config.ffn as f64)
        + 2.0 * 2.0 * shape.width() as f64 * q;
    let positions = (shape.rows * shape.width()) as f64;
    let head = 2.0 * d * config.vocab as f64 * (shape.rows * shape.response) as f64;
    3.0 * (layers * per_position * positions + head)
}

/// What the loss reads besides the model: a fixed batch, as a rollout would hand it over.
struct Batch {
    /// `[rows, prompt + response]` token ids and the all-ones attention mask.
    ids: Tensor,
    mask: Tensor,
    /// `[rows, response]`: the log-probabilities at rollout time, the advantages, the mask.
    old_logp: Tensor,
    adv: Tensor,
    response_mask: Tensor,
    shape: Shape,
}

impl Batch {
    fn new(model: &Transformer, vocab: i64, shape: Shape) -> Self {
        let mut rng = Rng::new(5);
        let ids: Vec<i64> = (0..shape.rows * shape.width())
            .map(|_| (rng.next_u64() % vocab as u64) as i64)
            .collect();
        let device = common::device();
        let ids = Tensor::from_slice(&ids)
            .view([shape.rows, shape.width()])
            .to_device(device);
        let mask = ids.ones_like();
        let old_logp = tch::no_grad(|| model.logprobs_at(&ids, &mask, shape.read()));
        let adv = rng
            .normal_tensor(&[shape.rows, shape.response], 1.0)
            .to_device(device);
        let response_mask = Tensor::ones([shape.rows, shape.response], (Kind::Float, device));
        Self {
            ids,
            mask,
            old_logp,
            adv,
            response_mask,
            shape,
        }
    }
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
    // `[rows, response]`: each response token's log-probability, as `exec::rollout` computes it.
    let logp = model.logprobs_at(&batch.ids, &batch.mask, batch.shape.read());
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
    let shape = Shape::from_env();
    let (kind, precision, _) = common::precision();
    let (mut vs, model, config) = common::example_model_up_to(shape.width().max(32));
    vs.set_kind(kind);
    let mut optimizer = AdamW::for_var_store(&vs, AdamWConfig::default());
    let batch = Batch::new(&model, config.vocab, shape);
    let tokens = shape.rows * shape.response;
    let (rows, prompt, response) = (shape.rows, shape.prompt, shape.response);

    let mut group = criterion.benchmark_group("train_step");
    group
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(tokens as u64));
    group.bench_function(format!("{rows}x({prompt}+{response})"), |b| {
        b.iter(|| train_step(&model, &mut optimizer, black_box(&batch)))
    });
    group.finish();

    // Median over about three seconds of steps, as `benches/pytorch/train_step.py` takes it
    // (one step under `cargo test --benches`).
    let budget = if common::benchmarking() {
        Duration::from_secs(3)
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
    let utilisation = match std::env::var("RLC_BENCH_PEAK_TFLOPS") {
        Ok(peak) => {
            let peak: f64 = peak
                .parse()
                .unwrap_or_else(|_| panic!("RLC_BENCH_PEAK_TFLOPS={peak}: a number"));
            let flops = model_flops(&config, shape);
            format!(
                "; {:.2} TFLOP a step, {:.1} TFLOP/s: MFU {:.1} % of {peak} TFLOP/s",
                flops / 1e12,
                flops / step / 1e12,
                100.0 * flops / step / (peak * 1e12)
            )
        }
        Err(_) => String::new(),
    };
    println!(
        "train step ({rows} rows x ({prompt} prompt + {response} response) tokens, {} model in {precision}, {:?}, 1 libtorch thread, {}): {:.1} ms/step, {:.0} tokens/s trained{utilisation}",
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

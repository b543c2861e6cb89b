//! Decoding against its roofline: `generate` from the KV cache (prompts of 8 tokens, 64 new
//! tokens per row, no EOS, temperature 1.0) at batch 1, 16 and 256 (`RLC_BENCH_BATCHES`, comma
//! separated) for the model `RLC_BENCH_MODEL` names (`common`: example, medium, qwen2-0.5b) on
//! `RLC_BENCH_DEVICE`, in the precision `RLC_BENCH_PRECISION` names (`f32`, the default, or
//! `bf16`: the model as `precision = bf16` holds it). Beside each figure, its roofline: a decode
//! step reads every weight once and the keys and values of every position so far (4 bytes each
//! in float32, 2 in bfloat16), so with memory bandwidth `RLC_BENCH_BANDWIDTH_GBS` (GB/s; H200:
//! 4800, unset on the CPU: no roofline) no step can take less than those bytes over it.
//! `benches/pytorch/decode.py` measures PyTorch eager (a static KV cache, as Hugging Face's
//! generate uses) on the same shapes. Asserts nothing about time.
//!
//! `RLC_BENCH_DEVICE=cuda RLC_BENCH_MODEL=qwen2-0.5b RLC_BENCH_BANDWIDTH_GBS=4800 cargo bench -p
//! rlc-runtime --bench decode` (`scripts/gpu-check.sh` runs it on a GPU)

mod common;

use rlc_runtime::generate::{GenerateConfig, SamplingConfig, generate, left_pad};
use rlc_runtime::model::{ModelConfig, Transformer};
use std::time::Instant;
use tch::Tensor;

const PROMPT: i64 = 8;
const NEW: i64 = 64;

/// Bytes one decode step reads at batch `batch` with `context` positions cached: every
/// parameter once, and each layer's keys and values of those positions, `width` bytes each.
fn bytes_per_step(
    config: &ModelConfig,
    parameters: i64,
    batch: i64,
    context: i64,
    width: f64,
) -> f64 {
    let head_dim = config.hidden / config.heads;
    let kv = 2 * config.layers * config.kv_heads * head_dim * context * batch;
    width * (parameters + kv) as f64
}

/// Seconds of one `generate` call, the device's queued work included.
fn seconds(model: &Transformer, ids: &Tensor, mask: &Tensor, config: &GenerateConfig) -> f64 {
    let start = Instant::now();
    let out = generate(model, ids, mask, config).expect("generates");
    assert_eq!(out.response_ids.size(), [ids.size()[0], NEW]);
    common::sync(ids.device());
    start.elapsed().as_secs_f64()
}

fn main() {
    tch::set_num_threads(1);
    let (kind, precision, width) = common::precision();
    let (mut vs, model, config) = common::example_model_up_to(PROMPT + NEW);
    vs.set_kind(kind);
    let parameters: i64 = vs
        .trainable_variables()
        .iter()
        .map(Tensor::numel)
        .sum::<usize>() as i64;
    let batches: Vec<i64> = std::env::var("RLC_BENCH_BATCHES")
        .unwrap_or_else(|_| "1,16,256".into())
        .split(',')
        .map(|b| {
            b.trim()
                .parse()
                .expect("RLC_BENCH_BATCHES: batch sizes, comma separated")
        })
        .collect();
    let bandwidth: Option<f64> = std::env::var("RLC_BENCH_BANDWIDTH_GBS")
        .ok()
        .map(|b| b.parse::<f64>().expect("RLC_BENCH_BANDWIDTH_GBS: GB/s") * 1e9);
    let calls = if common::benchmarking() { 3 } else { 1 };
    let generating = GenerateConfig {
        max_new: NEW,
        eos_token_id: None,
        sampling: SamplingConfig::at_temperature(1.0),
        seed: 5,
        ..GenerateConfig::default()
    };
    // Decode steps replay captured graphs on CUDA where the library is there (RLC_CUDA_GRAPH_LIB).
    let graphs = common::device().is_cuda()
        && rlc_runtime::cuda_graph::available().expect("the CUDA graph library loads");
    println!(
        "decode figures ({} model, {parameters} parameters in {precision}, {:?}, {}, prompt {PROMPT}, {NEW} new tokens per row, {}):",
        common::model_name(),
        common::device(),
        if graphs {
            "decode steps as captured CUDA graphs"
        } else {
            "eager decode steps"
        },
        if calls > 1 {
            "median of 3 calls after a warm-up"
        } else {
            "test mode: one call, not a measurement"
        }
    );
    for batch in batches {
        let prompts: Vec<Vec<i64>> = (0..batch)
            .map(|r| {
                (0..PROMPT)
                    .map(|i| 1 + (r * 7 + i * 3) % (config.vocab - 1))
                    .collect()
            })
            .collect();
        let (ids, mask) = left_pad(&prompts, 0);
        let (ids, mask) = (
            ids.to_device(common::device()),
            mask.to_device(common::device()),
        );
        if calls > 1 {
            let _ = seconds(&model, &ids, &mask, &generating);
        }
        let mut times: Vec<f64> = (0..calls)
            .map(|_| seconds(&model, &ids, &mask, &generating))
            .collect();
        times.sort_by(f64::total_cmp);
        let call = times[times.len() / 2];
        let tokens_per_s = (batch * NEW) as f64 / call;
        let mut line = format!(
            "  batch {batch:>3}: {tokens_per_s:>9.0} tokens/s ({:.3} ms a step)",
            call / NEW as f64 * 1e3
        );
        if let Some(bandwidth) = bandwidth {
            // The mean context of the decode steps: the prompt, then half the new tokens.
            let bytes = bytes_per_step(&config, parameters, batch, PROMPT + NEW / 2, width);
            let floor = bytes / bandwidth;
            let roofline = batch as f64 / floor;
            line += &format!(
                "; roofline {roofline:.0} tokens/s ({:.3} ms a step: {:.0} MB of weights and KV cache): {:.1}x the roofline's time",
                floor * 1e3,
                bytes / 1e6,
                roofline / tokens_per_s
            );
        }
        println!("{line}");
    }
}

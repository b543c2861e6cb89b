//! What the runtime benchmarks share: the model under test, the device and criterion's run-mode
//! rule. Each bench uses the part it needs.
//!
//! `RLC_BENCH_DEVICE=cuda` runs the model benches on CUDA device 0 (`scripts/gpu-check.sh`);
//! `RLC_BENCH_MODEL=medium` replaces the example's model by a 12-layer, 768-wide one with a
//! 32 000-token vocabulary (GPT-2-small-sized), where a GPU has work to do;
//! `RLC_BENCH_MODEL=qwen2-0.5b` by one of Qwen2-0.5B's shape.
#![allow(dead_code)]

/// The allocator `rlc-run` runs jobs with — mimalloc, for Rust's allocations and, by symbol
/// interposition, for libtorch's (`src/bin/rlc-run/memory.rs`) —, so that a bench measures what
/// a run does: with glibc's `malloc` every allocation over 32 MB is mapped afresh, and a large
/// model's optimizer step faulted in new pages for each of its whole-model temporaries.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use rlc_runtime::model::{Heads, ModelConfig, Transformer};
use tch::{Device, Kind, nn};

/// `tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: 16)`, the policy of examples/grpo_digits.rl
/// (or the model `RLC_BENCH_MODEL` names, see above), on the bench's device.
pub fn example_model() -> (nn::VarStore, Transformer, ModelConfig) {
    example_model_up_to(32)
}

/// [`example_model`] for sequences of up to `max_len` positions (the same weights).
pub fn example_model_up_to(max_len: i64) -> (nn::VarStore, Transformer, ModelConfig) {
    let config = bench_model_config(max_len);
    let vs = nn::VarStore::new(device());
    let model = Transformer::new(&vs.root(), &config, Heads::POLICY, 7).expect("a valid model");
    (vs, model, config)
}

/// What `RLC_BENCH_MODEL` names (`example` when unset).
pub fn model_name() -> String {
    std::env::var("RLC_BENCH_MODEL").unwrap_or_else(|_| "example".into())
}

/// The shape `RLC_BENCH_MODEL` names: `example` (the default), `medium` or `qwen2-0.5b`.
pub fn bench_model_config(max_len: i64) -> ModelConfig {
    let example = ModelConfig {
        layers: 2,
        hidden: 64,
        heads: 4,
        kv_heads: 4,
        ffn: 256,
        vocab: 16,
        max_len,
        rope_theta: 10000.0,
        norm_eps: 1e-5,
        tie_embeddings: true,
        qkv_bias: false,
        positions: Default::default(),
    };
    match model_name().as_str() {
        "example" => example,
        "medium" => ModelConfig {
            layers: 12,
            hidden: 768,
            heads: 12,
            kv_heads: 12,
            ffn: 3072,
            vocab: 32_000,
            ..example
        },
        // Qwen2-0.5B's shape (494 M parameters: 24 layers, grouped-query attention over 2
        // key/value heads, q/k/v biases, a 151 936-token vocabulary tied to the embedding).
        "qwen2-0.5b" => ModelConfig {
            layers: 24,
            hidden: 896,
            heads: 14,
            kv_heads: 2,
            ffn: 4864,
            vocab: 151_936,
            rope_theta: 1_000_000.0,
            norm_eps: 1e-6,
            qkv_bias: true,
            ..example
        },
        other => panic!("RLC_BENCH_MODEL={other}: example, medium or qwen2-0.5b"),
    }
}

/// The device of the model benches: the CPU, or CUDA device 0 under `RLC_BENCH_DEVICE=cuda`
/// (a bench asked for CUDA without it stops with the reason).
pub fn device() -> Device {
    match std::env::var("RLC_BENCH_DEVICE").as_deref() {
        Ok("cuda") => match rlc_runtime::device::cuda_devices() {
            Ok(_) => Device::Cuda(0),
            Err(why) => panic!("RLC_BENCH_DEVICE=cuda: CUDA is not available: {why}"),
        },
        _ => Device::Cpu,
    }
}

/// Waits for the device's queued work (a timed call must include it).
pub fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Criterion's own rule: benchmarks run only under `cargo bench` (`--bench`, and not `--test`);
/// `cargo test --benches` runs each once.
pub fn benchmarking() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    has("--bench") && !has("--test") && !has("--list")
}

/// The positive whole number the environment variable `name` holds, `default` when unset; any
/// other value stops the bench with the reason (a bench never measures another shape than asked).
pub fn positive_from_env(name: &str, default: i64) -> i64 {
    match std::env::var(name) {
        Ok(text) => match text.parse::<i64>() {
            Ok(n) if n > 0 => n,
            _ => panic!("{name}={text}: a positive whole number"),
        },
        Err(_) => default,
    }
}

/// `RLC_BENCH_PRECISION` (`f32`, the default, or `bf16`): the kind the model is held in, as
/// `precision = …` holds it (set it on the var store before building the optimizer, which then
/// keeps float32 master weights), its name and its bytes per value.
pub fn precision() -> (Kind, &'static str, f64) {
    match std::env::var("RLC_BENCH_PRECISION").as_deref() {
        Err(_) | Ok("f32") => (Kind::Float, "f32", 4.0),
        Ok("bf16") => (Kind::BFloat16, "bf16", 2.0),
        Ok(other) => panic!("RLC_BENCH_PRECISION={other}: `f32` or `bf16`"),
    }
}

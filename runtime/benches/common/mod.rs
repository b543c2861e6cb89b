//! What the runtime benchmarks share: the model under test, the device and criterion's run-mode
//! rule. Each bench uses the part it needs.
//!
//! `RLC_BENCH_DEVICE=cuda` runs the model benches on CUDA device 0 (`scripts/gpu-check.sh`);
//! `RLC_BENCH_MODEL=medium` replaces the example's model by a 12-layer, 768-wide one with a
//! 32 000-token vocabulary (GPT-2-small-sized), where a GPU has work to do.
#![allow(dead_code)]

use rlc_runtime::model::{Heads, ModelConfig, Transformer};
use tch::{Device, nn};

/// `tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: 16)`, the policy of examples/grpo_digits.rl
/// (or the medium model, see above), on the bench's device.
pub fn example_model() -> (nn::VarStore, Transformer, ModelConfig) {
    example_model_up_to(32)
}

/// [`example_model`] for sequences of up to `max_len` positions (the same weights).
pub fn example_model_up_to(max_len: i64) -> (nn::VarStore, Transformer, ModelConfig) {
    let medium = std::env::var("RLC_BENCH_MODEL").is_ok_and(|m| m == "medium");
    let config = ModelConfig {
        layers: if medium { 12 } else { 2 },
        hidden: if medium { 768 } else { 64 },
        heads: if medium { 12 } else { 4 },
        kv_heads: if medium { 12 } else { 4 },
        ffn: if medium { 3072 } else { 256 },
        vocab: if medium { 32_000 } else { 16 },
        max_len,
        rope_theta: 10000.0,
        norm_eps: 1e-5,
        tie_embeddings: true,
        qkv_bias: false,
        positions: Default::default(),
    };
    let vs = nn::VarStore::new(device());
    let model = Transformer::new(&vs.root(), &config, Heads::POLICY, 7).expect("a valid model");
    (vs, model, config)
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

//! What the runtime benchmarks share: the main example's model and criterion's run-mode rule.
//! Each bench uses the part it needs.
#![allow(dead_code)]

use rlc_runtime::model::{Heads, ModelConfig, Transformer};
use tch::{Device, nn};

/// `tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: 16)`, the policy of examples/grpo_digits.rl.
pub fn example_model() -> (nn::VarStore, Transformer, ModelConfig) {
    let config = ModelConfig {
        layers: 2,
        hidden: 64,
        heads: 4,
        kv_heads: 4,
        ffn: 256,
        vocab: 16,
        max_len: 32,
        rope_theta: 10000.0,
        norm_eps: 1e-5,
        tie_embeddings: true,
        qkv_bias: false,
    };
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Transformer::new(&vs.root(), &config, Heads::POLICY, 7).expect("a valid model");
    (vs, model, config)
}

/// Criterion's own rule: benchmarks run only under `cargo bench` (`--bench`, and not `--test`);
/// `cargo test --benches` runs each once.
pub fn benchmarking() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    has("--bench") && !has("--test") && !has("--list")
}

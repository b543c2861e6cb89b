//! `std.models`: architectures, as `Arch` values for a `model`'s `arch` field.
//!
//! The presets copy the shapes of the published Hugging Face `config.json` of each base
//! model: `num_hidden_layers` → `layers`, `hidden_size` → `hidden`, `num_attention_heads` →
//! `heads`, `num_key_value_heads` → `kv_heads`, `intermediate_size` → `ffn`, `vocab_size` →
//! `vocab`, `max_position_embeddings` → `max_len`, `rope_theta`, `tie_word_embeddings` →
//! `tie_embeddings`, `rms_norm_eps` → `norm_eps`. Instruct variants share the shapes (some
//! publish a shorter `max_position_embeddings`, noted below).

/// A small GPT-style decoder for synthetic tasks and tests: multi-head attention
/// (`kv_heads = heads`), a feed-forward width of `4 · hidden`, tied embeddings.
/// `hidden` must be a multiple of `heads`; pass the task's vocabulary, e.g.
/// `tiny_gpt(vocab: reverse.vocab)`.
pub fn tiny_gpt(layers = 2, hidden = 128, heads = 4, vocab = 16, max_len = 64, rope_theta = 10000.0) -> Arch {
  arch(
    layers: layers,
    hidden: hidden,
    heads: heads,
    kv_heads: heads,
    ffn: 4 * hidden,
    vocab: vocab,
    max_len: max_len,
    rope_theta: rope_theta,
    tie_embeddings: true,
    norm_eps: 1e-5,
  )
}

/// `tiny_gpt` with learned absolute positions instead of RoPE (`positions: "learned"`: a
/// `[max_len, hidden]` table added to the token embeddings, as GPT-2 has). Prefer it for short
/// synthetic tasks whose answer digit `j` must copy the prompt token at a fixed position, such
/// as reversing digits: with rotary (relative) positions alone the model must first infer where
/// it is from the prompt, and in `examples/grpo_digits.rl` one answer digit stays at chance
/// (every rotary variant stalls at a mean reward of ~0.75); with absolute positions the same job
/// reaches 0.8 in 38–67 steps (docs/benchmarks.md, "Learning efficiency of the main job").
/// Everything else is `tiny_gpt`'s (RMSNorm, SwiGLU, `ffn = 4 · hidden`) except the LM head, a
/// matrix of its own unless `tie_embeddings` (untied learned faster there: 38–40 steps against
/// 38–49 tied at lr 3e-3, as GPT-2-style scripts have it).
pub fn tiny_gpt_abs(layers = 2, hidden = 128, heads = 4, vocab = 16, max_len = 64, tie_embeddings = false) -> Arch {
  arch(
    layers: layers,
    hidden: hidden,
    heads: heads,
    kv_heads: heads,
    ffn: 4 * hidden,
    vocab: vocab,
    max_len: max_len,
    tie_embeddings: tie_embeddings,
    norm_eps: 1e-5,
    positions: "learned",
  )
}

/// Meta Llama 3 8B (`meta-llama/Meta-Llama-3-8B`): 32 layers, hidden 4096, 32 heads with
/// 8 KV heads (GQA), FFN 14336, vocabulary 128256, context 8192, RoPE θ 500000.
pub let llama3_8b = arch(
  layers: 32,
  hidden: 4096,
  heads: 32,
  kv_heads: 8,
  ffn: 14336,
  vocab: 128256,
  max_len: 8192,
  rope_theta: 500000.0,
  tie_embeddings: false,
  norm_eps: 1e-5,
)

/// Meta Llama 3 70B (`meta-llama/Meta-Llama-3-70B`): 80 layers, hidden 8192, 64 heads with
/// 8 KV heads, FFN 28672, vocabulary 128256, context 8192, RoPE θ 500000.
pub let llama3_70b = arch(
  layers: 80,
  hidden: 8192,
  heads: 64,
  kv_heads: 8,
  ffn: 28672,
  vocab: 128256,
  max_len: 8192,
  rope_theta: 500000.0,
  tie_embeddings: false,
  norm_eps: 1e-5,
)

/// Qwen2 0.5B (`Qwen/Qwen2-0.5B`): 24 layers, hidden 896, 14 heads with 2 KV heads,
/// FFN 4864, vocabulary 151936, tied embeddings, RoPE θ 1e6. Context 131072 (the Instruct
/// model publishes 32768).
pub let qwen2_0_5b = arch(
  layers: 24,
  hidden: 896,
  heads: 14,
  kv_heads: 2,
  ffn: 4864,
  vocab: 151936,
  max_len: 131072,
  rope_theta: 1000000.0,
  tie_embeddings: true,
  norm_eps: 1e-6,
)

/// Qwen2 7B (`Qwen/Qwen2-7B`): 28 layers, hidden 3584, 28 heads with 4 KV heads,
/// FFN 18944, vocabulary 152064, RoPE θ 1e6. Context 131072 (the Instruct model publishes
/// 32768).
pub let qwen2_7b = arch(
  layers: 28,
  hidden: 3584,
  heads: 28,
  kv_heads: 4,
  ffn: 18944,
  vocab: 152064,
  max_len: 131072,
  rope_theta: 1000000.0,
  tie_embeddings: false,
  norm_eps: 1e-6,
)

/// Qwen2 72B (`Qwen/Qwen2-72B`): 80 layers, hidden 8192, 64 heads with 8 KV heads,
/// FFN 29568, vocabulary 152064, RoPE θ 1e6, RMSNorm ε 1e-5. Context 131072 (the Instruct
/// model publishes 32768 and ε 1e-6).
pub let qwen2_72b = arch(
  layers: 80,
  hidden: 8192,
  heads: 64,
  kv_heads: 8,
  ffn: 29568,
  vocab: 152064,
  max_len: 131072,
  rope_theta: 1000000.0,
  tie_embeddings: false,
  norm_eps: 1e-5,
)

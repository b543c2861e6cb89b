//! A Llama/Qwen2-style decoder-only transformer (RMSNorm, RoPE, grouped-query attention, SwiGLU)
//! with LM, value and score heads.

mod cache;
mod config;
mod layers;
mod rope;
mod transformer;

pub use cache::KvCache;
pub use config::{ConfigError, ModelConfig};
pub use layers::INIT_STD;
pub use transformer::{Heads, Transformer, token_logprobs};

#[cfg(test)]
mod tests;

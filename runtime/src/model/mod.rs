//! A Llama/Qwen2-style decoder-only transformer (RMSNorm, RoPE, grouped-query attention, SwiGLU)
//! with LM, value and score heads.

mod cache;
mod config;
pub mod init;
mod layers;
mod rope;
mod short_attention;
mod transformer;

pub use cache::KvCache;
pub use config::{ConfigError, ModelConfig, Positions};
pub use layers::{INIT_STD, Rows};
pub use transformer::{Heads, Transformer, token_logprobs};

// The blocks a model is built from, for the parallel layouts that rebuild it in shards.
pub(crate) use cache::LayerCache;
pub(crate) use layers::{DecoderLayer, Draw, HeadCounts, RmsNorm, grouped_attention};
pub(crate) use rope::{Rope, RopeAngles};
pub(crate) use transformer::{add_positions, additive_bias, attention_bias, token_positions};

#[cfg(test)]
mod tests;

//! The shape of a decoder-only transformer, independent of where its weights come from.

use serde::{Deserialize, Serialize};

/// Sizes and constants of a Llama/Qwen2-style decoder. Dimensions are `i64` because that is what
/// libtorch takes for shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub layers: i64,
    pub hidden: i64,
    /// Query heads.
    pub heads: i64,
    /// Key/value heads (grouped-query attention); equal to `heads` for plain multi-head attention.
    pub kv_heads: i64,
    /// Inner width of the SwiGLU MLP.
    pub ffn: i64,
    pub vocab: i64,
    /// Longest sequence (prompt + response) the model is meant for.
    pub max_len: i64,
    pub rope_theta: f64,
    pub norm_eps: f64,
    /// The LM head reuses the token embedding matrix.
    pub tie_embeddings: bool,
    /// Biases on the q/k/v projections (Qwen2 has them, Llama does not).
    pub qkv_bias: bool,
    /// How tokens learn their position. Configs saved before it was a setting were rotary.
    #[serde(default)]
    pub positions: Positions,
}

/// A decoder's position encoding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Positions {
    /// Rotary embeddings on queries and keys (Llama, Qwen2), base `rope_theta`: relative
    /// positions only.
    #[default]
    Rope,
    /// A learned `[max_len, hidden]` table, `model.embed_positions.weight`, added to the token
    /// embeddings (GPT-2): absolute positions, no rotation.
    Learned,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("model config: `{field}` must be positive, got {value}")]
    NotPositive { field: &'static str, value: i64 },
    #[error("model config: hidden size {hidden} is not a multiple of {heads} heads")]
    HiddenNotDivisibleByHeads { hidden: i64, heads: i64 },
    #[error("model config: {heads} query heads are not a multiple of {kv_heads} key/value heads")]
    HeadsNotDivisibleByKvHeads { heads: i64, kv_heads: i64 },
    #[error("model config: head dimension {head_dim} must be even for rotary embeddings")]
    OddHeadDim { head_dim: i64 },
}

impl ModelConfig {
    pub fn head_dim(&self) -> i64 {
        self.hidden / self.heads
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let sizes = [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("ffn", self.ffn),
            ("vocab", self.vocab),
            ("max_len", self.max_len),
        ];
        if let Some(&(field, value)) = sizes.iter().find(|(_, value)| *value <= 0) {
            return Err(ConfigError::NotPositive { field, value });
        }
        if self.hidden % self.heads != 0 {
            return Err(ConfigError::HiddenNotDivisibleByHeads {
                hidden: self.hidden,
                heads: self.heads,
            });
        }
        if self.heads % self.kv_heads != 0 {
            return Err(ConfigError::HeadsNotDivisibleByKvHeads {
                heads: self.heads,
                kv_heads: self.kv_heads,
            });
        }
        if self.head_dim() % 2 != 0 {
            return Err(ConfigError::OddHeadDim {
                head_dim: self.head_dim(),
            });
        }
        Ok(())
    }

    /// A model small enough for unit tests (a few thousand parameters).
    pub fn tiny() -> Self {
        Self {
            layers: 2,
            hidden: 32,
            heads: 4,
            kv_heads: 2,
            ffn: 64,
            vocab: 48,
            max_len: 64,
            rope_theta: 10_000.0,
            norm_eps: 1e-6,
            tie_embeddings: false,
            qkv_bias: false,
            positions: Positions::Rope,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json() {
        let config = ModelConfig::tiny();
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(serde_json::from_str::<ModelConfig>(&json).unwrap(), config);
    }

    #[test]
    fn rejects_inconsistent_head_counts() {
        let mut config = ModelConfig::tiny();
        config.kv_heads = 3;
        assert_eq!(
            config.validate(),
            Err(ConfigError::HeadsNotDivisibleByKvHeads {
                heads: 4,
                kv_heads: 3
            })
        );
        config.kv_heads = 0;
        assert!(matches!(
            config.validate(),
            Err(ConfigError::NotPositive {
                field: "kv_heads",
                ..
            })
        ));
        assert_eq!(ModelConfig::tiny().validate(), Ok(()));
    }
}

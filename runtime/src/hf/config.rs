//! `config.json` of Llama and Qwen2 checkpoints → [`ModelConfig`].

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::HfError;
use crate::model::{ModelConfig, Positions};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Qwen2,
}

/// The fields we read; everything else in the file is ignored.
#[derive(Debug, Deserialize)]
struct RawConfig {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    hidden_size: i64,
    intermediate_size: i64,
    num_hidden_layers: i64,
    num_attention_heads: i64,
    num_key_value_heads: Option<i64>,
    head_dim: Option<i64>,
    vocab_size: i64,
    max_position_embeddings: Option<i64>,
    rms_norm_eps: f64,
    /// Older releases put θ at the top level, newer ones in `rope_parameters`.
    rope_theta: Option<f64>,
    rope_parameters: Option<RopeParameters>,
    rope_scaling: Option<RopeParameters>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    hidden_act: Option<String>,
    use_sliding_window: Option<bool>,
    /// rlc's own key for a checkpoint of a model with a learned position table
    /// (`model.embed_positions.weight`): `"learned"`. Absent: rotary, as Llama and Qwen2 are.
    rlc_positions: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RopeParameters {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
    #[serde(rename = "type")]
    legacy_type: Option<String>,
}

/// Reads `dir/config.json`.
pub fn load_config(dir: &Path) -> Result<(ModelConfig, Architecture), HfError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| HfError::Io {
        path: path.clone(),
        source,
    })?;
    parse_config(&text, &path)
}

/// Parses the text of a `config.json`; `path` is only used in errors.
pub fn parse_config(text: &str, path: &Path) -> Result<(ModelConfig, Architecture), HfError> {
    let raw: RawConfig = serde_json::from_str(text).map_err(|source| HfError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    let architecture = architecture(&raw, path)?;
    let unsupported = |setting: String| {
        Err(HfError::UnsupportedSetting {
            path: path.to_path_buf(),
            setting,
        })
    };

    if let Some(act) = raw.hidden_act.as_deref().filter(|act| *act != "silu") {
        return unsupported(format!("hidden_act `{act}` (only silu)"));
    }
    if raw.mlp_bias == Some(true) {
        return unsupported("mlp_bias = true".into());
    }
    if raw.use_sliding_window == Some(true) {
        return unsupported("use_sliding_window = true".into());
    }
    for rope in [&raw.rope_parameters, &raw.rope_scaling]
        .into_iter()
        .flatten()
    {
        if let Some(kind) = rope
            .rope_type
            .as_ref()
            .or(rope.legacy_type.as_ref())
            .filter(|k| *k != "default")
        {
            return unsupported(format!("rope type `{kind}` (only default)"));
        }
    }
    let positions = match raw.rlc_positions.as_deref() {
        None | Some("rope") => Positions::Rope,
        Some("learned") => Positions::Learned,
        Some(other) => {
            return unsupported(format!("rlc_positions `{other}` (only rope and learned)"));
        }
    };
    let heads = raw.num_attention_heads;
    if let Some(head_dim) = raw
        .head_dim
        .filter(|&d| heads > 0 && d * heads != raw.hidden_size)
    {
        return unsupported(format!(
            "head_dim {head_dim} with {heads} heads and hidden size {}",
            raw.hidden_size
        ));
    }
    let qkv_bias = match architecture {
        Architecture::Qwen2 => true,
        Architecture::Llama => {
            // Llama's attention_bias also puts a bias on o_proj, which this model does not have.
            if raw.attention_bias == Some(true) {
                return unsupported("attention_bias = true for Llama".into());
            }
            false
        }
    };
    let rope_theta = raw
        .rope_parameters
        .as_ref()
        .and_then(|rope| rope.rope_theta)
        .or(raw.rope_theta)
        .unwrap_or(10_000.0);

    let config = ModelConfig {
        layers: raw.num_hidden_layers,
        hidden: raw.hidden_size,
        heads,
        kv_heads: raw.num_key_value_heads.unwrap_or(heads),
        ffn: raw.intermediate_size,
        vocab: raw.vocab_size,
        max_len: raw.max_position_embeddings.unwrap_or(2048),
        rope_theta,
        norm_eps: raw.rms_norm_eps,
        tie_embeddings: raw.tie_word_embeddings.unwrap_or(false),
        qkv_bias,
        positions,
    };
    config.validate().map_err(|source| HfError::InvalidConfig {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((config, architecture))
}

fn architecture(raw: &RawConfig, path: &Path) -> Result<Architecture, HfError> {
    let name = raw
        .architectures
        .as_ref()
        .and_then(|names| names.first().cloned())
        .or_else(|| raw.model_type.clone())
        .unwrap_or_default();
    match name.as_str() {
        "LlamaForCausalLM" | "llama" => Ok(Architecture::Llama),
        "Qwen2ForCausalLM" | "qwen2" => Ok(Architecture::Qwen2),
        _ => Err(HfError::UnsupportedArchitecture {
            path: PathBuf::from(path),
            name,
        }),
    }
}

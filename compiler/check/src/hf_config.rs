//! The architecture of a model whose `init = hf("dir")` gives none: read from `dir/config.json`
//! (through the `SourceLoader`, as modules are), so the placement and memory checks see the
//! real heads, layers and vocabulary. The families the runtime loads are Llama and Qwen2; the
//! file is read as the runtime's loader reads it (`runtime/src/hf/config.rs`): the class from
//! `architectures`, else `model_type`, and 2048 positions when `max_position_embeddings` is absent.

use crate::program::{Arch, Positions};

/// Model classes whose weights the runtime can load, and the `model_type` of each.
pub const SUPPORTED: &[(&str, &str)] =
    &[("LlamaForCausalLM", "llama"), ("Qwen2ForCausalLM", "qwen2")];

/// What the runtime assumes when `max_position_embeddings` is absent.
const DEFAULT_MAX_LEN: u64 = 2048;

/// The architecture `text` (a `config.json`) describes, or what is wrong with it.
pub fn arch_of(text: &str) -> Result<Arch, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("it is not valid JSON ({e})"))?;
    let class = json["architectures"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(|c| c.as_str())
        .or_else(|| json["model_type"].as_str());
    match class {
        Some(class) if SUPPORTED.iter().any(|&(c, t)| class == c || class == t) => {}
        Some(class) => return Err(format!("its architecture `{class}` is not supported")),
        None => return Err("it names no `architectures` or `model_type`".into()),
    }
    let number = |key: &str| -> Result<u64, String> {
        json[key]
            .as_u64()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("`{key}` is missing or not a positive integer"))
    };
    let heads = number("num_attention_heads")?;
    Ok(Arch {
        preset: None,
        layers: number("num_hidden_layers")?,
        hidden: number("hidden_size")?,
        heads,
        kv_heads: json["num_key_value_heads"].as_u64().unwrap_or(heads),
        ffn: number("intermediate_size")?,
        vocab: number("vocab_size")?,
        max_len: match json.get("max_position_embeddings") {
            None | Some(serde_json::Value::Null) => DEFAULT_MAX_LEN,
            Some(_) => number("max_position_embeddings")?,
        },
        tie_embeddings: json["tie_word_embeddings"].as_bool().unwrap_or(false),
        // Newer configs keep θ under `rope_parameters`, as the runtime's loader reads it.
        rope_theta: json["rope_parameters"]["rope_theta"]
            .as_f64()
            .or_else(|| json["rope_theta"].as_f64()),
        norm_eps: json["rms_norm_eps"].as_f64(),
        // The Llama/Qwen2 families the runtime loads are rotary.
        positions: Positions::Rope,
    })
}

/// The vocabulary size a `tokenizer.json` (`text`) encodes into: one more than the largest id
/// of its model's vocabulary (a token → id map for BPE and WordPiece, a list for Unigram) and
/// its added tokens, as the `tokenizers` crate counts it with added tokens.
pub fn tokenizer_vocab(text: &str) -> Result<u64, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("it is not valid JSON ({e})"))?;
    let model_ids: Vec<u64> = match &json["model"]["vocab"] {
        serde_json::Value::Object(map) => map.values().filter_map(|v| v.as_u64()).collect(),
        serde_json::Value::Array(list) => (0..list.len() as u64).collect(),
        _ => return Err("it has no `model.vocab`".into()),
    };
    let added = json["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["id"].as_u64());
    model_ids
        .into_iter()
        .chain(added)
        .max()
        .map(|id| id + 1)
        .ok_or_else(|| "its vocabulary is empty".into())
}

/// The sizes in which an `arch` written in the program differs from the one `config.json` gives:
/// `(what, written, config)`. The runtime builds an `hf(…)` model from its config.json, so the
/// checks must see that one, and a θ or ε written beside it that it would not use is a mistake
/// too (one left out is no claim).
pub fn differences(written: &Arch, config: &Arch) -> Vec<(&'static str, String, String)> {
    let sizes = [
        ("layers", written.layers, config.layers),
        ("hidden", written.hidden, config.hidden),
        ("heads", written.heads, config.heads),
        ("kv_heads", written.kv_heads, config.kv_heads),
        ("ffn", written.ffn, config.ffn),
        ("vocab", written.vocab, config.vocab),
    ]
    .into_iter()
    .filter(|(_, a, b)| a != b)
    .map(|(what, a, b)| (what, a.to_string(), b.to_string()));
    let numbers = [
        ("rope_theta", written.rope_theta, config.rope_theta()),
        ("norm_eps", written.norm_eps, config.norm_eps()),
    ]
    .into_iter()
    .filter_map(|(what, a, b)| Some((what, a?, b)))
    .filter(|(_, a, b)| a != b)
    .map(|(what, a, b)| (what, a.to_string(), b.to_string()));
    let positions = (written.positions != config.positions).then(|| {
        (
            "positions",
            written.positions.as_str().to_string(),
            config.positions.as_str().to_string(),
        )
    });
    sizes.chain(numbers).chain(positions).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_llama_config_gives_its_architecture() {
        let arch = arch_of(
            r#"{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
                "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256}"#,
        )
        .unwrap();
        assert_eq!(
            (
                arch.layers,
                arch.hidden,
                arch.heads,
                arch.kv_heads,
                arch.ffn,
                arch.vocab
            ),
            (2, 64, 4, 2, 128, 100)
        );
        assert_eq!((arch.max_len, arch.tie_embeddings), (256, false));
    }

    #[test]
    fn what_cannot_be_used_is_said() {
        assert!(arch_of("{").unwrap_err().contains("not valid JSON"));
        assert!(
            arch_of(r#"{"architectures": ["BertModel"]}"#)
                .unwrap_err()
                .contains("`BertModel` is not supported")
        );
        assert!(
            arch_of(r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 8}"#)
                .unwrap_err()
                .contains("`num_attention_heads`")
        );
        // The runtime refuses Mistral, so the checker does too.
        assert!(
            arch_of(r#"{"architectures": ["MistralForCausalLM"]}"#)
                .unwrap_err()
                .contains("`MistralForCausalLM` is not supported")
        );
        assert!(arch_of("{}").unwrap_err().contains("no `architectures`"));
    }

    #[test]
    fn the_class_may_come_from_model_type_and_max_len_has_a_default() {
        let arch = arch_of(
            r#"{"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64,
                "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}"#,
        )
        .unwrap();
        assert_eq!((arch.kv_heads, arch.max_len), (4, 2048));
    }

    #[test]
    fn differences_name_each_size() {
        let config = arch_of(
            r#"{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
                "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 128, "vocab_size": 100}"#,
        )
        .unwrap();
        assert!(differences(&config, &config).is_empty());
        let written = Arch {
            layers: 3,
            vocab: 16,
            max_len: 64,
            ..config.clone()
        };
        assert_eq!(
            differences(&written, &config),
            [
                ("layers", "3".into(), "2".into()),
                ("vocab", "16".into(), "100".into())
            ]
        );
        let other_theta = Arch {
            rope_theta: Some(5e5),
            ..config.clone()
        };
        assert_eq!(
            differences(&other_theta, &config),
            [("rope_theta", "500000".into(), "10000".into())]
        );
        let learned = Arch {
            positions: Positions::Learned,
            ..config.clone()
        };
        assert_eq!(
            differences(&learned, &config),
            [("positions", "learned".into(), "rope".into())]
        );
    }
}

//! The architecture of a model whose `init = hf("dir")` gives none: read from `dir/config.json`
//! (through the `SourceLoader`, as modules are), so the placement and memory checks see the
//! real heads, layers and vocabulary. The families the runtime loads are Llama and Qwen2.

use crate::program::Arch;

/// Model classes whose weights the runtime can load.
pub const SUPPORTED: &[&str] = &["LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"];

/// The architecture `text` (a `config.json`) describes, or what is wrong with it.
pub fn arch_of(text: &str) -> Result<Arch, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("it is not valid JSON ({e})"))?;
    let classes: Vec<&str> = json["architectures"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
        .unwrap_or_default();
    match classes.first() {
        Some(class) if SUPPORTED.contains(class) => {}
        Some(class) => return Err(format!("its architecture `{class}` is not supported")),
        None => return Err("it names no `architectures`".into()),
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
        max_len: number("max_position_embeddings")?,
        tie_embeddings: json["tie_word_embeddings"].as_bool().unwrap_or(false),
    })
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
    }
}

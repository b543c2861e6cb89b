use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tch::{Device, Tensor};

use super::*;
use crate::generate::{GenerateConfig, generate};
use crate::model::Heads;

/// The shared fixtures (see their README); `RLC_HF_FIXTURES` overrides the location.
fn fixture(name: &str) -> PathBuf {
    let root = std::env::var_os("RLC_HF_FIXTURES")
        // `shared/` stands beside the repository (here and in CI).
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/hf"),
            PathBuf::from,
        );
    let dir = root.join(name);
    assert!(
        dir.join("config.json").exists(),
        "fixture {} not found (set RLC_HF_FIXTURES)",
        dir.display()
    );
    dir
}

fn reference(dir: &Path) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(dir.join("reference.safetensors"))
        .unwrap()
        .into_iter()
        .collect()
}

/// A scratch copy of a fixture directory that a test may modify.
fn scratch_copy(name: &str, test: &str) -> PathBuf {
    let from = fixture(name);
    let to = std::env::temp_dir().join(format!("rlc-runtime-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&to);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
    to
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut json);
    // Fixture copies are read-only like their source; the directory is not.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
}

fn matches_transformers(name: &str) {
    let dir = fixture(name);
    let expected = reference(&dir);
    let (_, model) = load_model(&dir, Heads::POLICY, Device::Cpu).unwrap();

    let ids = &expected["input_ids"];
    let mask = ids.ones_like();
    let logits = tch::no_grad(|| model.logits(ids, &mask));
    let err = (logits - &expected["logits"]).abs().max().double_value(&[]);
    assert!(
        err <= 1e-4,
        "{name}: logits differ from transformers by {err}"
    );

    let prompt = &expected["prompt_ids"];
    let config = GenerateConfig {
        max_new: 12,
        eos_token_id: None,
        ..GenerateConfig::default()
    };
    let rollout = generate(&model, prompt, &prompt.ones_like(), &config).unwrap();
    let greedy = Tensor::cat(&[prompt, &rollout.response_ids], 1);
    assert_eq!(
        Vec::<Vec<i64>>::try_from(&greedy).unwrap(),
        Vec::<Vec<i64>>::try_from(&expected["greedy_ids"]).unwrap(),
        "{name}: greedy tokens differ from transformers"
    );
}

#[test]
fn qwen2_single_file_matches_transformers() {
    matches_transformers("qwen2-tiny");
}

#[test]
fn llama_sharded_tied_matches_transformers() {
    matches_transformers("llama-tiny");
}

#[test]
fn configs_are_read_in_both_rope_layouts() {
    let (qwen, architecture) = load_config(&fixture("qwen2-tiny")).unwrap();
    assert_eq!(architecture, Architecture::Qwen2);
    assert_eq!(
        (
            qwen.layers,
            qwen.hidden,
            qwen.heads,
            qwen.kv_heads,
            qwen.ffn
        ),
        (2, 64, 4, 2, 128)
    );
    assert!(qwen.qkv_bias && !qwen.tie_embeddings);
    assert_eq!((qwen.rope_theta, qwen.norm_eps), (1e4, 1e-6));

    let (llama, architecture) = load_config(&fixture("llama-tiny")).unwrap();
    assert_eq!(architecture, Architecture::Llama);
    assert!(!llama.qkv_bias && llama.tie_embeddings);
    assert_eq!(
        (
            llama.heads,
            llama.kv_heads,
            llama.rope_theta,
            llama.norm_eps
        ),
        (8, 4, 5e5, 1e-5)
    );

    let old_layout = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
        "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 320,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": true,
        "max_position_embeddings": 128}"#;
    let (old, _) = parse_config(old_layout, Path::new("old/config.json")).unwrap();
    assert_eq!(old, llama);
}

#[test]
fn unsupported_architecture_is_named() {
    let text = r#"{"architectures": ["MistralForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
        "num_hidden_layers": 1, "num_attention_heads": 8, "vocab_size": 320, "rms_norm_eps": 1e-5}"#;
    let err = parse_config(text, Path::new("m/config.json")).unwrap_err();
    assert!(
        matches!(&err, HfError::UnsupportedArchitecture { name, .. } if name == "MistralForCausalLM")
    );
    assert!(
        err.to_string()
            .starts_with("m/config.json: unsupported architecture `MistralForCausalLM`"),
        "{err}"
    );

    let scaled = text
        .replace("MistralForCausalLM", "LlamaForCausalLM")
        .replace(
            "\"vocab_size\"",
            "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}, \"vocab_size\"",
        );
    let err = parse_config(&scaled, Path::new("m/config.json")).unwrap_err();
    assert!(err.to_string().contains("rope type `yarn`"), "{err}");
}

#[test]
fn missing_tensor_names_the_file_and_the_tensor() {
    let dir = scratch_copy("qwen2-tiny", "missing");
    let file = dir.join("model.safetensors");
    let kept: Vec<(String, Tensor)> = Tensor::read_safetensors(&file)
        .unwrap()
        .into_iter()
        .filter(|(name, _)| name != "model.layers.1.mlp.up_proj.weight")
        .collect();
    std::fs::remove_file(&file).unwrap();
    Tensor::write_safetensors(&kept, &file).unwrap();
    let err = load_model(&dir, Heads::POLICY, Device::Cpu).unwrap_err();
    assert!(
        matches!(&err, HfError::MissingTensor { path, name } if *path == file && name == "model.layers.1.mlp.up_proj.weight"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("model.safetensors: tensor `model.layers.1.mlp.up_proj.weight` is missing")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shape_mismatch_names_the_shard_and_the_tensor() {
    let dir = scratch_copy("llama-tiny", "shape");
    edit_config(&dir, |json| json["intermediate_size"] = 96.into());
    let err = load_model(&dir, Heads::POLICY, Device::Cpu).unwrap_err();
    let HfError::ShapeMismatch {
        path,
        name,
        expected,
        found,
    } = &err
    else {
        panic!("expected a shape mismatch, got {err}");
    };
    assert!(name.starts_with("model.layers.0.mlp."), "{name}");
    assert!(
        path.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("model-000"),
        "{}",
        path.display()
    );
    assert_eq!(
        (expected[0].max(expected[1]), found[0].max(found[1])),
        (96, 160)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_critic_keeps_its_value_head_and_loads_the_trunk() {
    let dir = fixture("qwen2-tiny");
    let (vs, critic) = load_model(&dir, Heads::CRITIC, Device::Cpu).unwrap();
    let stored: HashMap<String, Tensor> = Tensor::read_safetensors(dir.join("model.safetensors"))
        .unwrap()
        .into_iter()
        .collect();
    let variables = vs.variables();
    assert!(variables["model.norm.weight"].equal(&stored["model.norm.weight"]));
    assert!(
        variables.contains_key("value_head.weight") && !variables.contains_key("lm_head.weight")
    );
    let ids = Tensor::from_slice(&[5i64, 6, 7]).view([1, 3]);
    assert_eq!(critic.values(&ids, &ids.ones_like()).size(), [1, 3]);
}

#[test]
fn a_shard_without_its_indexed_tensor_is_named() {
    let dir = scratch_copy("llama-tiny", "shard");
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    let name = "model.norm.weight";
    let shard = dir.join(index["weight_map"][name].as_str().unwrap());
    let kept: Vec<(String, Tensor)> = Tensor::read_safetensors(&shard)
        .unwrap()
        .into_iter()
        .filter(|(stored, _)| stored != name)
        .collect();
    std::fs::remove_file(&shard).unwrap();
    Tensor::write_safetensors(&kept, &shard).unwrap();
    let err = load_model(&dir, Heads::POLICY, Device::Cpu).unwrap_err();
    assert!(
        matches!(&err, HfError::MissingTensor { path, name: missing } if *path == shard && missing == name),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

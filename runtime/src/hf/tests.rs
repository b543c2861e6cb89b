use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tch::{Device, Tensor};

use super::*;
use crate::generate::{GenerateConfig, generate};
use crate::model::Heads;

/// The shared fixtures (see their README); `RLC_HF_FIXTURES` overrides the location. The
/// runtime's other tests find them here too.
pub(crate) fn fixture(name: &str) -> PathBuf {
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
    assert_eq!(
        err.to_string(),
        format!(
            "{}: tensor `{name}` has shape {found:?}, the model expects {expected:?}",
            path.display()
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_vocabulary_that_does_not_match_config_json_names_the_tensor() {
    let dir = scratch_copy("qwen2-tiny", "vocab");
    edit_config(&dir, |json| json["vocab_size"] = 300.into());
    let err = load_model(&dir, Heads::POLICY, Device::Cpu)
        .unwrap_err()
        .to_string();
    // Tensors are checked in name order: the LM head comes before the embedding.
    assert_eq!(
        err,
        format!(
            "{}: tensor `lm_head.weight` has shape [320, 64], the model expects [300, 64]",
            dir.join("model.safetensors").display()
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tensor_config_json_has_no_place_for_is_named() {
    // One layer fewer in config.json: the checkpoint's last layer is left over.
    let dir = scratch_copy("llama-tiny", "extra");
    edit_config(&dir, |json| json["num_hidden_layers"] = 2.into());
    let err = load_model(&dir, Heads::POLICY, Device::Cpu).unwrap_err();
    let HfError::UnexpectedTensor { path, name } = &err else {
        panic!("expected an unexpected tensor, got {err}");
    };
    assert!(name.starts_with("model.layers.2."), "{name}");
    assert!(
        err.to_string()
            .starts_with(&format!("{}: tensor `model.layers.2.", path.display()))
    );
    assert!(
        err.to_string()
            .ends_with("has no place in this model (wrong config or architecture?)")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_and_unreadable_weight_files_are_named() {
    let dir = scratch_copy("qwen2-tiny", "weights");
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_model(&dir, Heads::POLICY, Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("{}: cannot read safetensors", file.display())),
        "{err}"
    );
    std::fs::remove_file(&file).unwrap();
    let err = load_model(&dir, Heads::POLICY, Device::Cpu)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "{}: no model.safetensors or model.safetensors.index.json",
            dir.display()
        )
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

/// The texts `reference.safetensors`' `input_ids` were made from (see the fixtures' README).
const REFERENCE_TEXTS: [&str; 2] = [
    "12+34=46 and 7+8=15, then 50+9=59",
    "reverse 90125 -> 52109 and sort ",
];

fn ids(tensor: &Tensor) -> Vec<Vec<i64>> {
    Vec::<Vec<i64>>::try_from(tensor).unwrap()
}

#[test]
fn the_tokenizer_encodes_as_transformers_did() {
    for name in ["qwen2-tiny", "llama-tiny"] {
        let dir = fixture(name);
        let expected = reference(&dir);
        let tokenizer = HfTokenizer::load(&dir).unwrap();
        assert_eq!(tokenizer.vocab_size(), 320);
        assert_eq!(
            (tokenizer.eos_id(), tokenizer.pad_id()),
            (Some(0), Some(1)),
            "{name}: special tokens from tokenizer_config.json"
        );
        assert_eq!(tokenizer.token_id("<|endoftext|>"), Some(0));

        let prompt = &ids(&expected["prompt_ids"])[0];
        assert_eq!(&tokenizer.encode("7+8=").unwrap(), prompt, "{name}");
        assert_eq!(tokenizer.decode(prompt, false).unwrap(), "7+8=");

        for (row, text) in ids(&expected["input_ids"]).iter().zip(REFERENCE_TEXTS) {
            assert_eq!(tokenizer.decode(row, false).unwrap(), text);
            assert_eq!(&tokenizer.encode(text).unwrap(), row, "{name}: {text:?}");
        }
        // Special tokens are kept or skipped on request.
        assert_eq!(
            tokenizer.decode(&[24, 12, 25, 30, 0], false).unwrap(),
            "7+8=<|endoftext|>"
        );
        assert_eq!(
            tokenizer.decode(&[24, 12, 25, 30, 0], true).unwrap(),
            "7+8="
        );
    }
}

#[test]
fn a_fixture_runs_from_text_to_text() {
    // Text in, the reference's greedy continuation out: tokenizer, model and generation together.
    let dir = fixture("qwen2-tiny");
    let expected = reference(&dir);
    let tokenizer = HfTokenizer::load(&dir).unwrap();
    let (_, model) = load_model(&dir, Heads::POLICY, Device::Cpu).unwrap();
    let prompt = tokenizer.encode("7+8=").unwrap();
    let prompt = Tensor::from_slice(&prompt).view([1, -1]);
    let config = GenerateConfig {
        max_new: 12,
        eos_token_id: None,
        ..GenerateConfig::default()
    };
    let rollout = generate(&model, &prompt, &prompt.ones_like(), &config).unwrap();
    let greedy = &ids(&expected["greedy_ids"])[0];
    assert_eq!(ids(&rollout.response_ids)[0], greedy[4..]);
    assert_eq!(
        tokenizer
            .decode(&ids(&rollout.response_ids)[0], false)
            .unwrap(),
        tokenizer.decode(&greedy[4..], false).unwrap()
    );
}

#[test]
fn an_unknown_tokenizer_model_names_the_file() {
    let dir = scratch_copy("qwen2-tiny", "tokenizer-model");
    let path = dir.join("tokenizer.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    json["model"]["type"] = "SentencePieceChar".into();
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, json.to_string()).unwrap();
    let err = HfTokenizer::load(&dir).unwrap_err();
    assert!(
        matches!(&err, HfError::UnknownTokenizerModel { path: p, name } if *p == path && name == "SentencePieceChar"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{}: unknown tokenizer model `SentencePieceChar` (the tokenizers crate reads BPE, \
             WordPiece, WordLevel and Unigram)",
            path.display()
        )
    );

    // A known type with fields that do not fit it: the crate's reason, under the file's name.
    json["model"]["type"] = "WordPiece".into();
    json["model"]["vocab"] = 3.into();
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, json.to_string()).unwrap();
    let err = HfTokenizer::load(&dir).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}: cannot read the tokenizer", path.display())),
        "{err}"
    );

    // Not a tokenizer at all, and no file.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, "{\"version\": \"1.0\"}").unwrap();
    let err = HfTokenizer::load(&dir).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json: no `model`"), "{err}");
    std::fs::remove_file(&path).unwrap();
    let err = HfTokenizer::load(&dir).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json: cannot read"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tokenizer_special_tokens_and_ids_are_checked() {
    let dir = scratch_copy("llama-tiny", "tokenizer-special");
    let tokenizer = HfTokenizer::load(&dir).unwrap();
    let err = tokenizer.decode(&[5, 320], false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: token id 320 is not in the vocabulary (320 tokens)",
            dir.join("tokenizer.json").display()
        )
    );
    assert!(tokenizer.decode(&[-1], false).is_err());

    let config = dir.join("tokenizer_config.json");
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, r#"{"eos_token": {"content": "<|end|>"}}"#).unwrap();
    let err = HfTokenizer::load(&dir).unwrap_err().to_string();
    assert!(
        err.contains(
            "tokenizer_config.json: `eos_token` is `<|end|>`, which is not in the vocabulary"
        ),
        "{err}"
    );
    // Without tokenizer_config.json the ids come from config.json.
    std::fs::remove_file(&config).unwrap();
    let tokenizer = HfTokenizer::load(&dir).unwrap();
    assert_eq!(
        (tokenizer.bos_id(), tokenizer.eos_id(), tokenizer.pad_id()),
        (Some(0), Some(0), None)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn jsonl_prompts_can_be_encoded_with_the_model_tokenizer() {
    use crate::data::Source;
    let dir = fixture("qwen2-tiny");
    let tokenizer = HfTokenizer::load(&dir).unwrap();
    let scratch = std::env::temp_dir().join(format!("rlc-runtime-{}-jsonl", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let file = scratch.join("prompts.jsonl");
    std::fs::write(
        &file,
        "{\"prompt\": \"7+8=\", \"target\": \"15\"}\n{\"prompt\": \"reverse 90125 -> \"}\n",
    )
    .unwrap();
    let source = Source::jsonl_with_tokenizer(&file, "prompt", &tokenizer).unwrap();
    assert_eq!(source.vocab(), 320);
    let Source::Jsonl(prompts) = &source else {
        unreachable!()
    };
    let samples = prompts.samples();
    // The reference's prompt ids, no BOS added (this tokenizer's post-processor adds none).
    assert_eq!(samples[0].prompt, ids(&reference(&dir)["prompt_ids"])[0]);
    let mut target = tokenizer.encode_plain("15").unwrap();
    target.push(0); // <|endoftext|>
    assert_eq!(samples[0].target, target);
    assert_eq!(
        tokenizer.decode(&samples[1].prompt, false).unwrap(),
        "reverse 90125 -> "
    );
    assert!(samples[1].target.is_empty());

    // Text outside the task alphabet is fine here; an empty prompt is not.
    std::fs::write(&file, "{\"prompt\": \"\"}\n").unwrap();
    let err = Source::jsonl_with_tokenizer(&file, "prompt", &tokenizer)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("prompts.jsonl: line 1: field `prompt` encodes to no tokens"),
        "{err}"
    );
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// Every variable of two stores, equal bit for bit.
fn assert_same_weights(a: &tch::nn::VarStore, b: &tch::nn::VarStore) {
    let (a, b) = (a.variables(), b.variables());
    let mut names: Vec<&String> = a.keys().collect();
    names.sort();
    assert_eq!(names.len(), b.len());
    for name in names {
        assert!(a[name].equal(&b[name]), "`{name}` changed");
    }
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Load → save → load gives the same config, bit-identical tensors and the reference outputs.
/// Returns how many weight files the save wrote.
fn round_trips(name: &str, max_shard_bytes: u64) -> usize {
    let from = fixture(name);
    let original = read_json(&from.join("config.json"));
    let (vs, model) = load_model(&from, Heads::POLICY, Device::Cpu).unwrap();
    let to = std::env::temp_dir().join(format!("rlc-runtime-{}-save-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&to);
    let options = SaveOptions {
        max_shard_bytes,
        base_config: Some(&original),
    };
    let saved = save_model(&to, &model, &vs, &options).unwrap();
    assert_eq!(saved.index.is_some(), saved.shards.len() > 1, "{name}");

    // The architecture reads back the same, and the keys the runtime does not use are kept.
    assert_eq!(load_config(&to).unwrap(), load_config(&from).unwrap());
    let config = read_json(&to.join("config.json"));
    for key in [
        "architectures",
        "model_type",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "max_position_embeddings",
        "rms_norm_eps",
        "tie_word_embeddings",
        "rope_parameters",
        "bos_token_id",
        "eos_token_id",
        "transformers_version",
        "dtype",
    ] {
        assert_eq!(config[key], original[key], "{name}: `{key}`");
    }

    let (again_vs, again) = load_model(&to, Heads::POLICY, Device::Cpu).unwrap();
    assert_same_weights(&vs, &again_vs);
    let expected = reference(&from);
    let ids = &expected["input_ids"];
    let logits = tch::no_grad(|| again.logits(ids, &ids.ones_like()));
    assert!(logits.equal(&tch::no_grad(|| model.logits(ids, &ids.ones_like()))));
    let err = (logits - &expected["logits"]).abs().max().double_value(&[]);
    assert!(err <= 1e-4, "{name}: {err}");

    // Each file is safetensors with the metadata transformers checks, and the index (if any)
    // maps every tensor to the shard that holds it and sums their sizes.
    let mut total = 0u64;
    let mut held = Vec::new();
    for shard in &saved.shards {
        let bytes = std::fs::read(shard).unwrap();
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
        assert_eq!(header["__metadata__"]["format"], "pt");
        for (tensor, info) in header.as_object().unwrap() {
            if tensor != "__metadata__" {
                let [start, end] = [0, 1].map(|i| info["data_offsets"][i].as_u64().unwrap());
                total += end - start;
                held.push((tensor.clone(), shard.file_name().unwrap().to_owned()));
            }
        }
    }
    assert_eq!(held.len(), vs.variables().len());
    if let Some(index) = &saved.index {
        let index = read_json(index);
        assert_eq!(index["metadata"]["total_size"], total);
        let map = index["weight_map"].as_object().unwrap();
        assert_eq!(map.len(), held.len());
        for (tensor, file) in &held {
            assert_eq!(map[tensor.as_str()], file.to_str().unwrap(), "{tensor}");
        }
        // No shard goes past the limit unless it holds a single larger tensor.
        for shard in &saved.shards {
            let in_shard = held
                .iter()
                .filter(|(_, f)| f == shard.file_name().unwrap())
                .count();
            let size = std::fs::metadata(shard).unwrap().len();
            assert!(
                in_shard == 1 || size <= max_shard_bytes + 4096,
                "{}",
                shard.display()
            );
        }
    }
    std::fs::remove_dir_all(&to).unwrap();
    saved.shards.len()
}

#[test]
fn a_single_file_model_round_trips_through_save() {
    assert_eq!(round_trips("qwen2-tiny", save::DEFAULT_MAX_SHARD_BYTES), 1);
}

#[test]
fn a_sharded_tied_model_round_trips_through_save() {
    // 40 kB shards: the 80 kB embedding and each 41 kB MLP matrix go alone, the rest fill shards.
    assert!(round_trips("llama-tiny", 40_000) > 10);
}

#[test]
fn saving_again_replaces_the_earlier_layout() {
    let from = fixture("llama-tiny");
    let (vs, model) = load_model(&from, Heads::POLICY, Device::Cpu).unwrap();
    let to = std::env::temp_dir().join(format!("rlc-runtime-{}-resave", std::process::id()));
    let _ = std::fs::remove_dir_all(&to);
    let sharded = SaveOptions {
        max_shard_bytes: 20_000,
        ..SaveOptions::default()
    };
    let first = save_model(&to, &model, &vs, &sharded).unwrap();
    assert!(first.index.is_some() && first.shards.len() > 3);
    // Sharded again more coarsely, then into one file: nothing of the earlier saves is left for
    // the loader to pick up instead.
    let coarser = SaveOptions {
        max_shard_bytes: 100_000,
        ..SaveOptions::default()
    };
    let second = save_model(&to, &model, &vs, &coarser).unwrap();
    assert!(second.shards.len() < first.shards.len());
    let third = save_model(&to, &model, &vs, &SaveOptions::default()).unwrap();
    assert_eq!(third.shards, [to.join("model.safetensors")]);
    let mut files: Vec<String> = std::fs::read_dir(&to)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["config.json", "model.safetensors"]);
    let (again, _) = load_model(&to, Heads::POLICY, Device::Cpu).unwrap();
    assert_same_weights(&vs, &again);
    std::fs::remove_dir_all(&to).unwrap();
}

#[test]
fn a_random_model_saves_as_a_config_the_loader_reads() {
    // Llama without q/k/v biases, Qwen2 with them: the family follows from the model's shape.
    for qkv_bias in [false, true] {
        let config = crate::model::ModelConfig {
            qkv_bias,
            ..crate::model::ModelConfig::tiny()
        };
        let vs = tch::nn::VarStore::new(Device::Cpu);
        let model = crate::model::Transformer::new(&vs.root(), &config, Heads::CRITIC, 3).unwrap();
        let to = std::env::temp_dir().join(format!(
            "rlc-runtime-{}-random-{qkv_bias}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&to);
        save_model(&to, &model, &vs, &SaveOptions::default()).unwrap();
        let (read, architecture) = load_config(&to).unwrap();
        assert_eq!(read, config);
        let expected = if qkv_bias {
            Architecture::Qwen2
        } else {
            Architecture::Llama
        };
        assert_eq!(architecture, expected);
        assert_eq!(read_json(&to.join("config.json"))["torch_dtype"], "float32");
        // The critic's value head is saved and loaded back with the trunk.
        let (again, _) = load_model(&to, Heads::CRITIC, Device::Cpu).unwrap();
        assert_same_weights(&vs, &again);
        std::fs::remove_dir_all(&to).unwrap();
    }
}

#[test]
fn shard_paths_stay_inside_the_model_folder() {
    for (test, shard) in [
        ("up", "../../x"),
        ("absolute", "/etc/passwd"),
        ("empty", ""),
    ] {
        let dir = scratch_copy("llama-tiny", &format!("outside-{test}"));
        let index_path = dir.join("model.safetensors.index.json");
        let mut index = read_json(&index_path);
        index["weight_map"]["model.norm.weight"] = serde_json::json!(shard);
        std::fs::remove_file(&index_path).unwrap();
        std::fs::write(&index_path, index.to_string()).unwrap();
        let err = load_model(&dir, Heads::POLICY, Device::Cpu).unwrap_err();
        assert!(
            matches!(&err, HfError::ShardOutside { path, shard: named } if *path == index_path && named == shard),
            "{err}"
        );
        assert!(
            err.to_string().contains("not inside the model folder"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(weights_inside("./model-00001-of-00002.safetensors"));
    assert!(weights_inside("shards/model-00001.safetensors"));
    assert!(!weights_inside("shards/../../model.safetensors"));
}

fn weights_inside(shard: &str) -> bool {
    super::weights::inside(shard)
}

/// A random model saved as an rlc checkpoint (weights, optimizer, state, config, manifest).
fn checkpoint_folder(test: &str) -> (PathBuf, tch::nn::VarStore) {
    let config = crate::model::ModelConfig::tiny();
    let vs = tch::nn::VarStore::new(Device::Cpu);
    let model = crate::model::Transformer::new(&vs.root(), &config, Heads::POLICY, 4).unwrap();
    let mut weights: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    weights.sort_by(|a, b| a.0.cmp(&b.0));
    let dir = std::env::temp_dir().join(format!(
        "rlc-runtime-{}-checkpoint-{test}/step-000002",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let saved = crate::checkpoint::Checkpoint {
        step: 2,
        weights,
        optimizer: Vec::new(),
        state: serde_json::json!({}),
        config: Some(config_json(model.config(), None)),
        lagged: Vec::new(),
    };
    crate::checkpoint::save(&dir, &saved).unwrap();
    (dir, vs)
}

#[test]
fn an_rlc_checkpoint_folder_is_verified_against_its_manifest() {
    let (dir, vs) = checkpoint_folder("verified");
    let (read, _) = load_model(&dir, Heads::POLICY, Device::Cpu).unwrap();
    assert_same_weights(&vs, &read);
    // A flipped bit, then 4 KiB of garbage in place of the weights.
    let weights = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&weights, &bytes).unwrap();
    let err = load_model(&dir, Heads::POLICY, Device::Cpu).unwrap_err();
    assert!(matches!(err, HfError::Checkpoint(_)), "{err:?}");
    let said = err.to_string();
    assert!(
        said.contains("is corrupt: model.safetensors has SHA-256") && said.contains("step-000002"),
        "{said}"
    );
    std::fs::write(&weights, vec![0x5a; 4096]).unwrap();
    let said = load_model(&dir, Heads::POLICY, Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("model.safetensors is 4096 bytes but the manifest says"),
        "{said}"
    );
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn a_learned_position_model_round_trips_through_an_rlc_checkpoint() {
    let config = crate::model::ModelConfig {
        positions: crate::model::Positions::Learned,
        tie_embeddings: true,
        ..crate::model::ModelConfig::tiny()
    };
    let vs = tch::nn::VarStore::new(Device::Cpu);
    let model = crate::model::Transformer::new(&vs.root(), &config, Heads::POLICY, 6).unwrap();
    let mut weights: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    weights.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(
        weights
            .iter()
            .any(|(name, _)| name == "model.embed_positions.weight")
    );
    let dir = std::env::temp_dir().join(format!(
        "rlc-runtime-{}-checkpoint-learned/step-000001",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let json = config_json(model.config(), None);
    assert_eq!(json["rlc_positions"], "learned");
    let saved = crate::checkpoint::Checkpoint {
        step: 1,
        weights,
        optimizer: Vec::new(),
        state: serde_json::json!({}),
        config: Some(json),
        lagged: Vec::new(),
    };
    crate::checkpoint::save(&dir, &saved).unwrap();
    let (read, again) = load_model(&dir, Heads::POLICY, Device::Cpu).unwrap();
    assert_eq!(again.config(), &config);
    assert_same_weights(&vs, &read);
    let ids = Tensor::from_slice(&[1i64, 2, 3, 4, 5]).view([1, 5]);
    let mask = Tensor::ones([1, 5], (tch::Kind::Int64, Device::Cpu));
    assert!(model.logits(&ids, &mask).equal(&again.logits(&ids, &mask)));
    // A rotary model's config does not carry the key, even from a base that had it.
    let rope = config_json(
        &crate::model::ModelConfig::tiny(),
        Some(&config_json(&config, None)),
    );
    assert!(rope.get("rlc_positions").is_none());
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn an_unknown_position_encoding_in_config_json_is_named() {
    let text = r#"{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1,
        "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 16,
        "vocab_size": 10, "rms_norm_eps": 1e-5, "rlc_positions": "alibi"}"#;
    let err = parse_config(text, Path::new("m/config.json")).unwrap_err();
    assert!(
        matches!(&err, HfError::UnsupportedSetting { setting, .. } if setting.contains("rlc_positions `alibi`")),
        "{err}"
    );
    // Without the key a Llama config is rotary.
    let rope = text.replace(r#", "rlc_positions": "alibi""#, "");
    let (config, _) = parse_config(&rope, Path::new("m/config.json")).unwrap();
    assert_eq!(config.positions, crate::model::Positions::Rope);
}

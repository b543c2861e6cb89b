//! Saving a model in the Hugging Face layout `save_pretrained` writes, so that `transformers`
//! (and this runtime's [`load_model`](super::load_model)) read it back: `config.json` plus
//! `model.safetensors`, or, above a size threshold, `model-0000i-of-0000n.safetensors` shards
//! and `model.safetensors.index.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tch::{Tensor, nn};

use super::HfError;
use super::config::Architecture;
use crate::model::{ModelConfig, Positions, Transformer};
use crate::tensor_file::write_safetensors;

const CONFIG_FILE: &str = "config.json";
const SINGLE_FILE: &str = "model.safetensors";
const INDEX_FILE: &str = "model.safetensors.index.json";

/// `save_pretrained`'s default `max_shard_size` ("5GB") in bytes.
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 5_000_000_000;

/// How [`save_model`] writes a folder.
#[derive(Debug, Clone)]
pub struct SaveOptions<'a> {
    /// A shard holds at most this many bytes of tensor data (a larger tensor gets a shard of its
    /// own); when everything fits in one, there is a single `model.safetensors` and no index.
    pub max_shard_bytes: u64,
    /// The `config.json` the model was loaded from: its other keys (token ids, versions, …) are
    /// kept, the architecture's keys are written from the model.
    pub base_config: Option<&'a Value>,
}

impl Default for SaveOptions<'_> {
    fn default() -> Self {
        SaveOptions {
            max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
            base_config: None,
        }
    }
}

/// The files [`save_model`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub config: PathBuf,
    /// The weight files, in shard order.
    pub shards: Vec<PathBuf>,
    /// `model.safetensors.index.json` when the weights are sharded.
    pub index: Option<PathBuf>,
}

/// Writes `model` (its parameters in `vs`) to `dir` in the Hugging Face layout, creating `dir`
/// if needed. Weight files of an earlier save in `dir` that this one does not write (a stale
/// index or shards) are removed, so the folder loads as what was saved.
pub fn save_model(
    dir: &Path,
    model: &Transformer,
    vs: &nn::VarStore,
    options: &SaveOptions,
) -> Result<Saved, HfError> {
    let mut weights: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    weights.sort_by_cached_key(|(name, _)| natural_key(name));
    let mut config = config_json(model.config(), options.base_config);
    if let Some((_, embedding)) = weights
        .iter()
        .find(|(name, _)| name == "model.embed_tokens.weight")
    {
        let dtype = torch_dtype_name(embedding.kind());
        // transformers 5 writes `dtype`, earlier releases `torch_dtype`.
        let key = if config.get("dtype").is_some() {
            "dtype"
        } else {
            "torch_dtype"
        };
        config[key] = dtype.into();
    }
    create_dir(dir)?;
    let config_path = dir.join(CONFIG_FILE);
    let text = serde_json::to_string_pretty(&config).expect("a JSON value always serialises");
    write(&config_path, format!("{text}\n").as_bytes())?;
    let (shards, index) = save_weights(dir, &weights, options.max_shard_bytes)?;
    Ok(Saved {
        config: config_path,
        shards,
        index,
    })
}

/// The `config.json` of a model of shape `config`: `base` (when given) with every key this
/// runtime reads overwritten, so [`parse_config`](super::parse_config) gives `config` back.
/// The architecture is Qwen2 when the q/k/v projections have biases, Llama otherwise.
pub fn config_json(config: &ModelConfig, base: Option<&Value>) -> Value {
    let mut json = match base {
        Some(Value::Object(base)) => Value::Object(base.clone()),
        _ => json!({}),
    };
    let (class, model_type) = match architecture_of(config) {
        Architecture::Llama => ("LlamaForCausalLM", "llama"),
        Architecture::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
    };
    let fields = json!({
        "architectures": [class],
        "model_type": model_type,
        "hidden_size": config.hidden,
        "intermediate_size": config.ffn,
        "num_hidden_layers": config.layers,
        "num_attention_heads": config.heads,
        "num_key_value_heads": config.kv_heads,
        "head_dim": config.head_dim(),
        "vocab_size": config.vocab,
        "max_position_embeddings": config.max_len,
        "rms_norm_eps": config.norm_eps,
        "hidden_act": "silu",
        "tie_word_embeddings": config.tie_embeddings,
        // Both layouts: newer readers take `rope_parameters`, older ones the top-level θ.
        "rope_theta": config.rope_theta,
        "rope_parameters": {"rope_theta": config.rope_theta, "rope_type": "default"},
    });
    for (key, value) in fields.as_object().expect("an object literal") {
        json[key.as_str()] = value.clone();
    }
    match architecture_of(config) {
        Architecture::Llama => {
            json["attention_bias"] = false.into();
            json["mlp_bias"] = false.into();
        }
        Architecture::Qwen2 => json["use_sliding_window"] = false.into(),
    }
    // rlc's key for a learned position table (Hugging Face's Llama and Qwen2 have none: their
    // loaders would not know `model.embed_positions.weight`); a rotary model does not write it.
    match config.positions {
        Positions::Learned => json["rlc_positions"] = "learned".into(),
        Positions::Rope => {
            if let Some(object) = json.as_object_mut() {
                object.remove("rlc_positions");
            }
        }
    }
    // A per-layer list from a base with another number of layers would contradict the model.
    if let Some(object) = json.as_object_mut() {
        object.remove("rope_scaling");
        if object
            .get("layer_types")
            .and_then(Value::as_array)
            .is_some_and(|types| types.len() as i64 != config.layers)
        {
            object.remove("layer_types");
        }
    }
    json
}

/// Qwen2 is the family with q/k/v biases; the loader refuses them for Llama.
fn architecture_of(config: &ModelConfig) -> Architecture {
    if config.qkv_bias {
        Architecture::Qwen2
    } else {
        Architecture::Llama
    }
}

/// Writes `weights` (in the order given) into `dir` as `save_pretrained` does: tensors fill a
/// shard in order until the next would take it past `max_shard_bytes`; one shard is
/// `model.safetensors`, several are `model-0000i-of-0000n.safetensors` with an index. Returns the
/// weight files and the index, if any.
pub fn save_weights(
    dir: &Path,
    weights: &[(String, Tensor)],
    max_shard_bytes: u64,
) -> Result<(Vec<PathBuf>, Option<PathBuf>), HfError> {
    let mut shards: Vec<Vec<&(String, Tensor)>> = Vec::new();
    let mut current: Vec<&(String, Tensor)> = Vec::new();
    let mut current_bytes = 0u64;
    let mut total_bytes = 0u64;
    for entry in weights {
        let bytes = byte_size(&entry.1);
        total_bytes += bytes;
        if bytes > max_shard_bytes {
            shards.push(vec![entry]);
            continue;
        }
        if current_bytes + bytes > max_shard_bytes && !current.is_empty() {
            shards.push(std::mem::take(&mut current));
            current_bytes = 0;
        }
        current.push(entry);
        current_bytes += bytes;
    }
    if !current.is_empty() || shards.is_empty() {
        shards.push(current);
    }

    let count = shards.len();
    let names: Vec<String> = if count == 1 {
        vec![SINGLE_FILE.to_string()]
    } else {
        (1..=count)
            .map(|i| format!("model-{i:05}-of-{count:05}.safetensors"))
            .collect()
    };
    let mut weight_map = BTreeMap::new();
    let mut written = Vec::with_capacity(count);
    for (shard, name) in shards.iter().zip(&names) {
        let path = dir.join(name);
        write_safetensors(&path, shard.iter().map(|(n, t)| (n.as_str(), t)))?;
        for (tensor_name, _) in shard {
            weight_map.insert(tensor_name.clone(), name.clone());
        }
        written.push(path);
    }
    let index = if count > 1 {
        let path = dir.join(INDEX_FILE);
        let index = json!({
            "metadata": {"total_size": total_bytes},
            "weight_map": weight_map,
        });
        let text = serde_json::to_string_pretty(&index).expect("a JSON value always serialises");
        write(&path, format!("{text}\n").as_bytes())?;
        Some(path)
    } else {
        None
    };
    let mut keep = names;
    keep.extend(index.is_some().then(|| INDEX_FILE.to_string()));
    remove_stale(dir, &keep)?;
    Ok((written, index))
}

fn byte_size(tensor: &Tensor) -> u64 {
    (tensor.numel() * tensor.kind().elt_size_in_bytes()) as u64
}

/// What transformers calls a dtype in `config.json`.
fn torch_dtype_name(kind: tch::Kind) -> &'static str {
    match kind {
        tch::Kind::BFloat16 => "bfloat16",
        tch::Kind::Half => "float16",
        tch::Kind::Double => "float64",
        _ => "float32",
    }
}

/// Weight files of the Hugging Face layout in `dir` that are not in `keep`.
fn remove_stale(dir: &Path, keep: &[String]) -> Result<(), HfError> {
    let entries = std::fs::read_dir(dir).map_err(|source| HfError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| HfError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let weights_file = name == SINGLE_FILE || name == INDEX_FILE || is_shard_name(&name);
        if weights_file && !keep.contains(&name) {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|source| HfError::Write { path, source })?;
        }
    }
    Ok(())
}

/// `model-00001-of-00003.safetensors`.
fn is_shard_name(name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix("model-")
        .and_then(|rest| rest.strip_suffix(".safetensors"))
    else {
        return false;
    };
    let Some((index, count)) = rest.split_once("-of-") else {
        return false;
    };
    [index, count]
        .iter()
        .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

/// Orders `model.layers.10` after `model.layers.9`: runs of digits compare as numbers.
fn natural_key(name: &str) -> Vec<(u64, String)> {
    name.split('.')
        .map(|part| match part.parse::<u64>() {
            Ok(number) => (number, String::new()),
            Err(_) => (u64::MAX, part.to_string()),
        })
        .collect()
}

fn create_dir(dir: &Path) -> Result<(), HfError> {
    std::fs::create_dir_all(dir).map_err(|source| HfError::Write {
        path: dir.to_path_buf(),
        source,
    })
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), HfError> {
    std::fs::write(path, bytes).map_err(|source| HfError::Write {
        path: path.to_path_buf(),
        source,
    })
}

//! `tokenizer.json` of Hugging Face models (the `tokenizers` crate): text → token ids as
//! `transformers`' `tokenizer(text)` gives them, ids → text, and the special tokens
//! (`tokenizer_config.json`, else `config.json`) a prompt source needs.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::HfError;

pub const TOKENIZER_FILE: &str = "tokenizer.json";
const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
const CONFIG_FILE: &str = "config.json";

/// The model types `tokenizers` reads (`model.type` in `tokenizer.json`).
pub const TOKENIZER_MODELS: [&str; 4] = ["BPE", "WordPiece", "WordLevel", "Unigram"];

/// A loaded `tokenizer.json` with the ids of its special tokens, where the folder names them.
#[derive(Clone)]
pub struct HfTokenizer {
    /// The `tokenizer.json` it came from, named in every error.
    path: PathBuf,
    inner: tokenizers::Tokenizer,
    bos: Option<i64>,
    eos: Option<i64>,
    pad: Option<i64>,
}

impl fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("path", &self.path)
            .field("vocab", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("pad", &self.pad)
            .finish()
    }
}

impl HfTokenizer {
    /// Reads `dir/tokenizer.json`, and the special tokens from `dir/tokenizer_config.json`
    /// (`bos_token`, `eos_token`, `pad_token`), falling back to the ids in `dir/config.json`.
    pub fn load(dir: &Path) -> Result<HfTokenizer, HfError> {
        let mut tokenizer = HfTokenizer::from_file(&dir.join(TOKENIZER_FILE))?;
        let config_path = dir.join(TOKENIZER_CONFIG_FILE);
        if let Some(config) = read_json_if_present(&config_path)? {
            tokenizer.bos = tokenizer.special(&config, "bos_token", &config_path)?;
            tokenizer.eos = tokenizer.special(&config, "eos_token", &config_path)?;
            tokenizer.pad = tokenizer.special(&config, "pad_token", &config_path)?;
        }
        let model_config_path = dir.join(CONFIG_FILE);
        if let Some(config) = read_json_if_present(&model_config_path)? {
            let id = |key: &str| -> Result<Option<i64>, HfError> {
                // `eos_token_id` may be a list (several stop tokens): the first is the EOS.
                let value = match &config[key] {
                    Value::Array(ids) => ids.first().cloned().unwrap_or(Value::Null),
                    other => other.clone(),
                };
                match value {
                    Value::Null => Ok(None),
                    value => match value.as_i64() {
                        Some(id) => tokenizer.check_id(id).map(|()| Some(id)),
                        None => Err(HfError::Tokenizer {
                            path: model_config_path.clone(),
                            message: format!("`{key}` is {value}, not a token id"),
                        }),
                    },
                }
            };
            let (bos, eos, pad) = (
                id("bos_token_id")?,
                id("eos_token_id")?,
                id("pad_token_id")?,
            );
            tokenizer.bos = tokenizer.bos.or(bos);
            tokenizer.eos = tokenizer.eos.or(eos);
            tokenizer.pad = tokenizer.pad.or(pad);
        }
        Ok(tokenizer)
    }

    /// Reads one `tokenizer.json`, without special tokens. A model type `tokenizers` does not
    /// know is [`HfError::UnknownTokenizerModel`]; anything else it cannot read is
    /// [`HfError::Tokenizer`] with its reason.
    pub fn from_file(path: &Path) -> Result<HfTokenizer, HfError> {
        let text = std::fs::read_to_string(path).map_err(|source| HfError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        // `tokenizers` reports an unknown model type as "data did not match any variant of
        // untagged enum", so the type is looked at first.
        let json: Value = serde_json::from_str(&text).map_err(|source| HfError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        match json.get("model").map(|model| model.get("type")) {
            None => {
                return Err(HfError::Tokenizer {
                    path: path.to_path_buf(),
                    message: "no `model` (not a tokenizer.json?)".into(),
                });
            }
            Some(Some(kind)) if !kind.as_str().is_some_and(|k| TOKENIZER_MODELS.contains(&k)) => {
                return Err(HfError::UnknownTokenizerModel {
                    path: path.to_path_buf(),
                    name: kind
                        .as_str()
                        .map_or_else(|| kind.to_string(), str::to_string),
                });
            }
            // Files written before `type` existed are recognised by their fields.
            Some(_) => {}
        }
        let inner = text
            .parse::<tokenizers::Tokenizer>()
            .map_err(|e| HfError::Tokenizer {
                path: path.to_path_buf(),
                message: format!("cannot read the tokenizer: {e}"),
            })?;
        Ok(HfTokenizer {
            path: path.to_path_buf(),
            inner,
            bos: None,
            eos: None,
            pad: None,
        })
    }

    /// The `tokenizer.json` this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Token ids of `text`, with the special tokens the tokenizer's post-processor adds (what
    /// `tokenizer(text)["input_ids"]` gives in `transformers`).
    pub fn encode(&self, text: &str) -> Result<Vec<i64>, HfError> {
        self.encode_with(text, true)
    }

    /// Token ids of `text` alone, without the post-processor's special tokens (an answer that
    /// continues a prompt).
    pub fn encode_plain(&self, text: &str) -> Result<Vec<i64>, HfError> {
        self.encode_with(text, false)
    }

    fn encode_with(&self, text: &str, special: bool) -> Result<Vec<i64>, HfError> {
        let encoding = self
            .inner
            .encode(text, special)
            .map_err(|e| HfError::Tokenizer {
                path: self.path.clone(),
                message: format!("cannot encode text: {e}"),
            })?;
        Ok(encoding.get_ids().iter().map(|&id| i64::from(id)).collect())
    }

    /// The text of `ids`; special tokens are left out when `skip_special`. An id outside the
    /// vocabulary is an error naming it.
    pub fn decode(&self, ids: &[i64], skip_special: bool) -> Result<String, HfError> {
        let ids = ids
            .iter()
            .map(|&id| self.check_id(id).map(|()| id as u32))
            .collect::<Result<Vec<u32>, _>>()?;
        self.inner
            .decode(&ids, skip_special)
            .map_err(|e| HfError::Tokenizer {
                path: self.path.clone(),
                message: format!("cannot decode: {e}"),
            })
    }

    /// Ids the tokenizer can produce: its model's vocabulary and the added tokens.
    pub fn vocab_size(&self) -> i64 {
        self.inner.get_vocab_size(true) as i64
    }

    /// The id of `token` (a vocabulary entry or an added token).
    pub fn token_id(&self, token: &str) -> Option<i64> {
        self.inner.token_to_id(token).map(i64::from)
    }

    pub fn bos_id(&self) -> Option<i64> {
        self.bos
    }

    pub fn eos_id(&self) -> Option<i64> {
        self.eos
    }

    pub fn pad_id(&self) -> Option<i64> {
        self.pad
    }

    fn check_id(&self, id: i64) -> Result<(), HfError> {
        let vocab = self.vocab_size();
        if (0..vocab).contains(&id) && self.inner.id_to_token(id as u32).is_some() {
            Ok(())
        } else {
            Err(HfError::TokenOutOfRange {
                path: self.path.clone(),
                id,
                vocab,
            })
        }
    }

    /// The id of special token `key` of `tokenizer_config.json`: a string or an added-token
    /// object (`{"content": …}`); absent or null is none.
    fn special(&self, config: &Value, key: &str, path: &Path) -> Result<Option<i64>, HfError> {
        let token = match &config[key] {
            Value::Null => return Ok(None),
            Value::String(token) => token.as_str(),
            Value::Object(object) => match object.get("content").and_then(Value::as_str) {
                Some(token) => token,
                None => {
                    return Err(HfError::Tokenizer {
                        path: path.to_path_buf(),
                        message: format!("`{key}` has no `content` string"),
                    });
                }
            },
            other => {
                return Err(HfError::Tokenizer {
                    path: path.to_path_buf(),
                    message: format!("`{key}` is {other}, not a token"),
                });
            }
        };
        self.token_id(token)
            .map(Some)
            .ok_or_else(|| HfError::Tokenizer {
                path: path.to_path_buf(),
                message: format!(
                    "`{key}` is `{token}`, which is not in the vocabulary of {}",
                    self.path.display()
                ),
            })
    }
}

/// The JSON in `path`, or `None` when there is no such file.
fn read_json_if_present(path: &Path) -> Result<Option<Value>, HfError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(HfError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|source| HfError::Json {
            path: path.to_path_buf(),
            source,
        })
}

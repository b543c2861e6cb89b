//! The decoder trunk and its heads.

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor, nn};

use super::cache::{KvCache, LayerCache};
use super::config::{ConfigError, ModelConfig, Positions};
use super::layers::{DecoderLayer, Draw, RmsNorm, Rows, normal_var};
use super::rope::{Rope, RopeAngles};
use crate::rng::Rng;

/// Which output heads a model carries on top of the shared trunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heads {
    /// Next-token logits (`lm_head.weight`, or the embedding when tied).
    pub lm: bool,
    /// A scalar per token (`value_head.weight`), for critics.
    pub value: bool,
    /// A scalar per sequence read at its last real token (`score.weight`), for reward models.
    pub score: bool,
}

impl Heads {
    pub const POLICY: Heads = Heads {
        lm: true,
        value: false,
        score: false,
    };
    pub const CRITIC: Heads = Heads {
        lm: false,
        value: true,
        score: false,
    };
    pub const REWARD: Heads = Heads {
        lm: false,
        value: false,
        score: true,
    };
}

#[derive(Debug)]
pub struct Transformer {
    config: ModelConfig,
    embed_tokens: Tensor,
    /// The learned position table `[max_len, hidden]` (`model.embed_positions.weight`), for
    /// `Positions::Learned`.
    embed_positions: Option<Tensor>,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    rope: Rope,
    lm_head: Option<Tensor>,
    value_head: Option<Tensor>,
    score_head: Option<Tensor>,
}

impl Transformer {
    /// Registers the parameters under `root` with Hugging Face Llama names
    /// (`model.embed_tokens.weight`, `model.layers.{i}.self_attn.q_proj.weight`, …,
    /// `lm_head.weight`; with learned positions `model.embed_positions.weight` too) and draws
    /// them from a generator seeded with `seed` (the position table right after the token
    /// embedding, from the same N(0, 0.02²)).
    pub fn new(
        root: &nn::Path,
        config: &ModelConfig,
        heads: Heads,
        seed: u64,
    ) -> Result<Self, ConfigError> {
        Self::build(root, config, heads, Draw::Seeded(Rng::new(seed)))
    }

    /// The model's blocks with every N(0, σ²) weight a zero-element variable (norms and biases
    /// hold their init: they are vectors): parameters to be set whole later, and no memory for
    /// the model's matrices meanwhile.
    pub(crate) fn skeleton(
        root: &nn::Path,
        config: &ModelConfig,
        heads: Heads,
    ) -> Result<Self, ConfigError> {
        Self::build(root, config, heads, Draw::Skeleton)
    }

    fn build(
        root: &nn::Path,
        config: &ModelConfig,
        heads: Heads,
        mut rng: Draw,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let trunk = root / "model";
        let embed_tokens = normal_var(
            &(&trunk / "embed_tokens"),
            "weight",
            &[config.vocab, config.hidden],
            &mut rng,
        );
        let embed_positions = (config.positions == Positions::Learned).then(|| {
            normal_var(
                &(&trunk / "embed_positions"),
                "weight",
                &[config.max_len, config.hidden],
                &mut rng,
            )
        });
        let layers = (0..config.layers)
            .map(|i| DecoderLayer::new(&(&trunk / "layers" / i), config, &mut rng))
            .collect();
        let norm = RmsNorm::new(&(&trunk / "norm"), config.hidden, config.norm_eps);
        let lm_head = heads.lm.then(|| {
            if config.tie_embeddings {
                embed_tokens.shallow_clone()
            } else {
                normal_var(
                    &(root / "lm_head"),
                    "weight",
                    &[config.vocab, config.hidden],
                    &mut rng,
                )
            }
        });
        let value_head = heads.value.then(|| {
            normal_var(
                &(root / "value_head"),
                "weight",
                &[1, config.hidden],
                &mut rng,
            )
        });
        let score_head = heads
            .score
            .then(|| normal_var(&(root / "score"), "weight", &[1, config.hidden], &mut rng));
        Ok(Self {
            config: config.clone(),
            embed_tokens,
            embed_positions,
            layers,
            norm,
            rope: Rope::for_config(config, root.device()),
            lm_head,
            value_head,
            score_head,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The kind the weights are held in (float32, or bfloat16 under `precision = bf16`): the
    /// kind of the activations, while log-probabilities, values and scores come out float32.
    pub fn kind(&self) -> Kind {
        self.embed_tokens.kind()
    }

    /// The token embedding matrix `[vocab, hidden]`.
    pub(crate) fn embedding(&self) -> &Tensor {
        &self.embed_tokens
    }

    /// The learned position table `[max_len, hidden]`, when the model has one.
    pub(crate) fn position_table(&self) -> Option<&Tensor> {
        self.embed_positions.as_ref()
    }

    pub(crate) fn decoder_layers(&self) -> &[DecoderLayer] {
        &self.layers
    }

    pub(crate) fn final_norm(&self) -> &RmsNorm {
        &self.norm
    }

    pub(crate) fn rope(&self) -> &Rope {
        &self.rope
    }

    pub fn heads(&self) -> Heads {
        Heads {
            lm: self.lm_head.is_some(),
            value: self.value_head.is_some(),
            score: self.score_head.is_some(),
        }
    }

    /// Final-norm hidden states `[B, T, hidden]` of the `T` new tokens `ids`.
    ///
    /// `mask` (`[B, S]`, 1 = real token, any numeric or bool kind) covers the cached positions and
    /// then the new ones, so `S = cache.len() + T`; without a cache `S = T`. Padding may be on
    /// either side: positions count real tokens only, and padded keys are never attended to.
    ///
    /// # Panics
    /// If `S` does not match the cache, or (in libtorch) if an id is outside the vocabulary.
    pub fn hidden_states(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Tensor {
        self.hidden_states_at(ids, mask, cache, None)
    }

    /// [`Self::hidden_states`] of the new positions `queries` only (`[B, queries.len, hidden]`),
    /// the same values: the last layer's queries, MLP and final norm run on those rows alone
    /// (every position is still a key and value, and enters the cache), so a caller that reads
    /// a few positions — the response's log-probs, the next token's logits — does not pay for
    /// the others. `None`: every new position.
    pub fn hidden_states_at(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
        queries: Option<Rows>,
    ) -> Tensor {
        let steps = ids.size()[1];
        let mask = mask.ne(0);
        let total = mask.size()[1];
        let past = cache.as_ref().map_or(0, |cache| cache.len());
        assert_eq!(
            total,
            past + steps,
            "the mask must cover the cached positions and the new ones"
        );
        let positions = token_positions(&mask, past, steps);
        let angles = self.rope.angles(&positions);
        let bias = attention_bias(&mask, past, steps, self.kind());
        let x = self.embed(ids, &positions);
        self.through_layers(x, &angles, &bias, cache, queries)
    }

    /// Hidden states `[B, T, hidden]` of new tokens `ids` (`[B, T]`) at `positions` (`[B, T]`),
    /// their keys and values written at the columns of `cache` ([`KvCache::at_columns`]),
    /// attending where `bias` (`[B, 1, T, room]`, the cache's whole buffers) allows: a decode
    /// step (`T = 1`) whose shapes and host values do not depend on the position, so that one
    /// captured device graph replays it for every token. `queries`: as in
    /// [`Self::hidden_states_at`].
    pub(crate) fn hidden_states_static(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        bias: &Tensor,
        cache: &mut KvCache,
        queries: Option<Rows>,
    ) -> Tensor {
        let x = self.embed(ids, positions);
        self.through_layers(x, &self.rope.angles(positions), bias, Some(cache), queries)
    }

    /// The embeddings `[B, T, hidden]` of tokens `ids` at `positions` (both `[B, T]`).
    fn embed(&self, ids: &Tensor, positions: &Tensor) -> Tensor {
        add_positions(
            Tensor::embedding(&self.embed_tokens, ids, -1, false, false),
            self.embed_positions.as_ref(),
            positions,
        )
    }

    /// The decoder layers and the final norm over embedded tokens `x`.
    fn through_layers(
        &self,
        mut x: Tensor,
        angles: &RopeAngles,
        bias: &Tensor,
        cache: Option<&mut KvCache>,
        queries: Option<Rows>,
    ) -> Tensor {
        let last = self.layers.len().saturating_sub(1);
        let mut caches: Vec<Option<&mut LayerCache>> = match cache {
            Some(cache) => cache.layers_mut().iter_mut().map(Some).collect(),
            None => self.layers.iter().map(|_| None).collect(),
        };
        for (i, (layer, layer_cache)) in self.layers.iter().zip(caches.iter_mut()).enumerate() {
            let rows = if i == last { queries } else { None };
            x = layer.forward(&x, angles, bias, layer_cache.take(), rows);
        }
        if self.layers.is_empty()
            && let Some(rows) = queries
        {
            x = rows.of(&x);
        }
        self.norm.forward(&x)
    }

    /// Logits `[B, T, vocab]` from hidden states.
    ///
    /// # Panics
    /// If the model has no LM head.
    pub fn lm_head(&self, hidden: &Tensor) -> Tensor {
        let weight = self.lm_head.as_ref().expect("model has no LM head");
        hidden.linear(weight, None::<&Tensor>)
    }

    /// Values `[B, T]` from hidden states.
    ///
    /// # Panics
    /// If the model has no value head.
    pub fn value_head(&self, hidden: &Tensor) -> Tensor {
        let weight = self.value_head.as_ref().expect("model has no value head");
        hidden
            .linear(weight, None::<&Tensor>)
            .squeeze_dim(-1)
            .to_kind(Kind::Float)
    }

    /// Scores `[B]` read at each row's last real token (right or left padding alike).
    ///
    /// # Panics
    /// If the model has no score head.
    pub fn score_head(&self, hidden: &Tensor, mask: &Tensor) -> Tensor {
        let weight = self.score_head.as_ref().expect("model has no score head");
        let last = last_real_index(mask);
        let batch = hidden.size()[0];
        let picked = hidden
            .gather(
                1,
                &last
                    .view([batch, 1, 1])
                    .expand([batch, 1, hidden.size()[2]], false),
                false,
            )
            .squeeze_dim(1);
        picked
            .linear(weight, None::<&Tensor>)
            .squeeze_dim(-1)
            .to_kind(Kind::Float)
    }

    pub fn logits(&self, ids: &Tensor, mask: &Tensor) -> Tensor {
        self.lm_head(&self.hidden_states(ids, mask, None))
    }

    pub fn values(&self, ids: &Tensor, mask: &Tensor) -> Tensor {
        self.value_head(&self.hidden_states(ids, mask, None))
    }

    pub fn scores(&self, ids: &Tensor, mask: &Tensor) -> Tensor {
        self.score_head(&self.hidden_states(ids, mask, None), mask)
    }

    /// Log-probabilities `[B, T-1]` of each realised next token `ids[:, t+1]` given `ids[:, ..=t]`.
    pub fn logprobs(&self, ids: &Tensor, mask: &Tensor) -> Tensor {
        token_logprobs(&self.logits(ids, mask), ids)
    }

    /// [`Self::logprobs`] of the tokens `ids[:, rows.first + 1 ..= rows.first + rows.len]`
    /// only (`[B, rows.len]`, e.g. a rollout's response), computing the last layer's queries,
    /// its MLP and the head at the `rows` positions that predict them.
    pub fn logprobs_at(&self, ids: &Tensor, mask: &Tensor, rows: Rows) -> Tensor {
        let logits = self.lm_head(&self.hidden_states_read(ids, mask, rows));
        logits
            .log_softmax(-1, Kind::Float)
            .gather(
                2,
                &ids.narrow(1, rows.first + 1, rows.len).unsqueeze(-1),
                false,
            )
            .squeeze_dim(-1)
    }

    /// Values `[B, rows.len]` at positions `rows` only (the last layer's queries, MLP and head
    /// at those positions).
    pub fn values_at(&self, ids: &Tensor, mask: &Tensor, rows: Rows) -> Tensor {
        self.value_head(&self.hidden_states_read(ids, mask, rows))
    }

    /// Hidden states at `rows`, the positions a rollout's outputs read. Where rows share the
    /// positions before `rows` — a group's samples of one prompt — those positions run once per
    /// distinct prefix, as a prefill whose cache every row then reads (values and gradients as
    /// one pass: causal attention makes a prefix's states independent of what follows).
    fn hidden_states_read(&self, ids: &Tensor, mask: &Tensor, rows: Rows) -> Tensor {
        if rows.len < 1 {
            // Nothing read (e.g. demonstrations without a token): the whole pass, cut to none.
            return self.hidden_states(ids, mask, None).narrow(1, rows.first, 0);
        }
        let prefix = rows.first + 1;
        let after = ids.size()[1] - prefix;
        let Some(shared) = SharedPrefix::find(ids, mask, prefix).filter(|_| after >= rows.len - 1)
        else {
            return self.hidden_states_at(ids, mask, None, Some(rows));
        };
        let mut cache = KvCache::new(self.layers.len());
        let last = Rows {
            first: prefix - 1,
            len: 1,
        };
        let first = self
            .hidden_states_at(&shared.ids, &shared.mask, Some(&mut cache), Some(last))
            .index_select(0, &shared.rows);
        if rows.len == 1 {
            return first;
        }
        cache.select_rows(&shared.rows);
        let rest = self.hidden_states_at(
            &ids.narrow(1, prefix, rows.len - 1),
            &mask.narrow(1, 0, prefix + rows.len - 1),
            Some(&mut cache),
            None,
        );
        Tensor::cat(&[first, rest], 1)
    }
}

/// The distinct prefixes of a batch's rows, when few enough to pay for a second pass.
struct SharedPrefix {
    /// `[U, P]` ids and mask of the distinct prefixes.
    ids: Tensor,
    mask: Tensor,
    /// `[B]`: each row's prefix.
    rows: Tensor,
}

impl SharedPrefix {
    /// The distinct `[ids, mask]` prefixes of length `len`, where at most half as many as rows.
    fn find(ids: &Tensor, mask: &Tensor, len: i64) -> Option<Self> {
        let batch = ids.size()[0];
        let both = Tensor::cat(
            &[
                ids.narrow(1, 0, len),
                mask.narrow(1, 0, len).to_kind(Kind::Int64),
            ],
            1,
        );
        let (distinct, rows, _) = both.unique_dim(0, true, true, false);
        (2 * distinct.size()[0] <= batch).then(|| Self {
            ids: distinct.narrow(1, 0, len),
            mask: distinct.narrow(1, len, len),
            rows,
        })
    }
}

/// `log_softmax(logits[:, t]).gather(ids[:, t+1])` for `t < T-1`, in float32.
pub fn token_logprobs(logits: &Tensor, ids: &Tensor) -> Tensor {
    let steps = ids.size()[1];
    logits
        .narrow(1, 0, steps - 1)
        .log_softmax(-1, Kind::Float)
        .gather(2, &ids.narrow(1, 1, steps - 1).unsqueeze(-1), false)
        .squeeze_dim(-1)
}

/// Position of each of the `steps` new tokens (`[B, steps]`): real tokens before it, so left
/// padding does not shift positions. `mask` (`[B, past + steps]`) is boolean.
pub(crate) fn token_positions(mask: &Tensor, past: i64, steps: i64) -> Tensor {
    (mask.cumsum(-1, Kind::Int64) - 1)
        .clamp_min(0)
        .narrow(1, past, steps)
}

/// Token embeddings `x` (`[B, T, hidden]`) plus, for a model with a learned position `table`
/// (`[max_len, hidden]`), the rows of their `positions` (`[B, T]`). Positions past the table's
/// end (the plan refuses generation longer than `max_len`) read its last row rather than
/// make libtorch abort.
pub(crate) fn add_positions(x: Tensor, table: Option<&Tensor>, positions: &Tensor) -> Tensor {
    match table {
        None => x,
        Some(table) => {
            let last = table.size()[0] - 1;
            let rows = positions.clamp_max(last);
            x + Tensor::embedding(table, &rows, -1, false, false)
        }
    }
}

/// Index of the last position where `mask` is non-zero, per row `[B]`.
fn last_real_index(mask: &Tensor) -> Tensor {
    let steps = mask.size()[1];
    let positions = Tensor::arange(steps, (Kind::Int64, mask.device()));
    (mask.ne(0).to_kind(Kind::Int64) * positions).argmax(-1, false)
}

/// Additive bias `[B, 1, T, S]` of `kind`: 0 where query `past + i` may attend key `j` (causal
/// and `j` is a real token), the most negative value elsewhere ([`additive_bias`]).
pub(crate) fn attention_bias(mask: &Tensor, past: i64, steps: i64, kind: Kind) -> Tensor {
    let total = mask.size()[1];
    let device = mask.device();
    let keys = Tensor::arange(total, (Kind::Int64, device)).view([1, total]);
    let queries = Tensor::arange_start(past, past + steps, (Kind::Int64, device)).view([steps, 1]);
    let causal = keys.le_tensor(&queries).view([1, 1, steps, total]);
    additive_bias(&causal.logical_and(&mask.view([-1, 1, 1, total])), kind)
}

/// The attention bias of a boolean `allowed`, in `kind` (the activations', so that attention is
/// one fused op): 0 where a query may attend a key, the most negative finite value of `kind`
/// elsewhere. A finite value rather than -inf keeps rows of padded queries, which see no real
/// key, at a uniform softmax instead of NaN.
pub(crate) fn additive_bias(allowed: &Tensor, kind: Kind) -> Tensor {
    let lowest = match kind {
        // `torch.finfo(torch.bfloat16).min`: f32::MIN would round to -inf.
        Kind::BFloat16 => -3.389_531_389_251_535_5e38,
        Kind::Half => -65504.0,
        _ => f32::MIN as f64,
    };
    Tensor::where_scalar(allowed, 0.0, lowest).to_kind(kind)
}

//! The whole transformer over a TP group, built from the full model's named weights.

use std::collections::BTreeMap;

use tch::{Kind, Tensor, nn};

use super::TpError;
use super::clip::tp_clip_grad_norm;
use super::layers::TpDecoderLayer;
use super::shard::{ShardLoader, ShardedParam, check_divisible, gather_full_weights};
use super::vocab::{VocabParallelEmbedding, VocabParallelHead};
use crate::collectives::{CollectiveError, Communicator};
use crate::generate::{Decode, GenerateError};
use crate::model::{
    Heads, KvCache, ModelConfig, Positions, RmsNorm, Rope, RopeAngles, add_positions,
    attention_bias, token_positions,
};
use crate::parallel::tape::Tape;

/// This rank's part of a Llama/Qwen2 transformer split over the TP group `tp`. Every forward
/// pass must be run by all ranks of the group together, on the same inputs.
#[derive(Debug)]
pub struct TpTransformer<'c> {
    config: ModelConfig,
    tp: &'c Communicator,
    embedding: VocabParallelEmbedding<'c>,
    /// The learned position table, replicated (`Positions::Learned`).
    position_table: Option<Tensor>,
    layers: Vec<TpDecoderLayer<'c>>,
    norm: RmsNorm,
    rope: Rope,
    lm_head: Option<VocabParallelHead<'c>>,
    value_head: Option<Tensor>,
    score_head: Option<Tensor>,
    params: Vec<ShardedParam>,
}

impl<'c> TpTransformer<'c> {
    /// Keeps this rank's shards of `weights` (full tensors under Hugging Face names, as a
    /// checkpoint or `VarStore::variables` gives them) and registers them under the same names
    /// in `root`, which should belong to an empty var store. `heads` says which output heads to
    /// load (`lm_head.weight` is not read when the config ties it to the embedding).
    pub fn new(
        root: &nn::Path,
        weights: &BTreeMap<String, Tensor>,
        config: &ModelConfig,
        heads: Heads,
        tp: &'c Communicator,
    ) -> Result<Self, TpError> {
        Self::load(ShardLoader::new(root, weights, tp), root, config, heads, tp)
    }

    /// As [`TpTransformer::new`] from this rank's shards alone (e.g. the flat destination shards
    /// `parallel::reshard` returns for a `tp` layout; see [`ShardLoader::from_shards`]): a rank
    /// re-sharded from a training layout never holds a full weight.
    pub fn from_shards(
        root: &nn::Path,
        shards: &BTreeMap<String, Tensor>,
        config: &ModelConfig,
        heads: Heads,
        tp: &'c Communicator,
    ) -> Result<Self, TpError> {
        Self::load(
            ShardLoader::from_shards(root, shards, tp),
            root,
            config,
            heads,
            tp,
        )
    }

    /// As [`TpTransformer::from_shards`], each shard becoming its variable without a copy (see
    /// [`ShardLoader::from_owned_shards`]): what a rank materialising its initial shards uses.
    pub fn from_owned_shards(
        root: &nn::Path,
        shards: BTreeMap<String, Tensor>,
        config: &ModelConfig,
        heads: Heads,
        tp: &'c Communicator,
    ) -> Result<Self, TpError> {
        let empty = BTreeMap::new();
        Self::load(
            ShardLoader::from_owned_shards(root, shards, &empty, tp),
            root,
            config,
            heads,
            tp,
        )
    }

    fn load(
        mut loader: ShardLoader,
        root: &nn::Path,
        config: &ModelConfig,
        heads: Heads,
        tp: &'c Communicator,
    ) -> Result<Self, TpError> {
        config.validate()?;
        check_divisible(config, tp.world_size())?;
        let embedding = VocabParallelEmbedding::load(&mut loader, config, tp)?;
        let position_table = (config.positions == Positions::Learned)
            .then(|| {
                loader.load(
                    "model.embed_positions.weight",
                    &[config.max_len, config.hidden],
                )
            })
            .transpose()?;
        let layers = (0..config.layers)
            .map(|i| TpDecoderLayer::load(&mut loader, i, config, tp))
            .collect::<Result<Vec<_>, _>>()?;
        let norm = loader.load_norm("model.norm", config.hidden, config.norm_eps)?;
        let lm_head = match (heads.lm, config.tie_embeddings) {
            (false, _) => None,
            (true, true) => Some(VocabParallelHead::tied(&embedding)),
            (true, false) => Some(VocabParallelHead::load(&mut loader, config, tp)?),
        };
        let scalar_head = |loader: &mut ShardLoader, wanted: bool, name: &str| {
            wanted
                .then(|| loader.load(name, &[1, config.hidden]))
                .transpose()
        };
        let value_head = scalar_head(&mut loader, heads.value, "value_head.weight")?;
        let score_head = scalar_head(&mut loader, heads.score, "score.weight")?;
        Ok(Self {
            config: config.clone(),
            tp,
            embedding,
            position_table,
            layers,
            norm,
            rope: Rope::for_config(config, root.device()),
            lm_head,
            value_head,
            score_head,
            params: loader.into_params(),
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The kind the weights are held in (float32, or bfloat16 under `precision = bf16`): the
    /// activations', while log-probabilities, values and scores come out float32.
    pub fn kind(&self) -> Kind {
        self.embedding.weight().kind()
    }

    pub fn heads(&self) -> Heads {
        Heads {
            lm: self.lm_head.is_some(),
            value: self.value_head.is_some(),
            score: self.score_head.is_some(),
        }
    }

    pub fn embedding(&self) -> &VocabParallelEmbedding<'c> {
        &self.embedding
    }

    pub fn layers(&self) -> &[TpDecoderLayer<'c>] {
        &self.layers
    }

    pub fn lm_head(&self) -> Option<&VocabParallelHead<'c>> {
        self.lm_head.as_ref()
    }

    /// Every parameter with its name and split, in load order (a tied head appears once).
    pub fn params(&self) -> &[ShardedParam] {
        &self.params
    }

    /// Final-norm hidden states `[B, T, hidden]` of the `T` new tokens `ids`, replicated on
    /// every rank; `mask` as in [`crate::model::Transformer::hidden_states`].
    pub fn hidden_states(
        &self,
        tape: &Tape<'c>,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, TpError> {
        let past = cache.as_ref().map_or(0, |cache| cache.len());
        let (angles, bias, positions) = self.positions(ids, mask, past)?;
        let mut x = add_positions(
            self.embedding.forward(ids)?,
            self.position_table.as_ref(),
            &positions,
        );
        match cache {
            Some(cache) => {
                let layer_caches = cache.layers_mut();
                if layer_caches.len() != self.layers.len() {
                    return Err(TpError::CacheLayers {
                        expected: self.layers.len(),
                        found: layer_caches.len(),
                    });
                }
                for (layer, layer_cache) in self.layers.iter().zip(layer_caches) {
                    x = layer.forward(tape, &x, &angles, &bias, Some(layer_cache))?;
                }
            }
            None => {
                for layer in &self.layers {
                    x = layer.forward(tape, &x, &angles, &bias, None)?;
                }
            }
        }
        Ok(self.norm.forward(&x))
    }

    /// Rotary angles, attention bias and positions of the new tokens, after checking the inputs' shapes
    /// and ids (libtorch would abort on an id outside the vocabulary; a shard would silently
    /// embed zeros).
    fn positions(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        past: i64,
    ) -> Result<(RopeAngles, Tensor, Tensor), TpError> {
        let (ids_shape, mask_shape) = (ids.size(), mask.size());
        let fits = ids_shape.len() == 2
            && mask_shape.len() == 2
            && ids_shape[0] == mask_shape[0]
            && ids.numel() > 0
            && mask_shape[1] == past + ids_shape[1];
        if !fits {
            return Err(TpError::InputShape {
                ids: ids_shape,
                mask: mask_shape,
                cached: past,
            });
        }
        let vocab = self.config.vocab;
        for id in [ids.min().int64_value(&[]), ids.max().int64_value(&[])] {
            if !(0..vocab).contains(&id) {
                return Err(TpError::TokenOutOfRange { id, vocab });
            }
        }
        let steps = ids_shape[1];
        let mask = mask.ne(0);
        let positions = token_positions(&mask, past, steps);
        let angles = self.rope.angles(&positions);
        Ok((
            angles,
            attention_bias(&mask, past, steps, self.kind()),
            positions,
        ))
    }

    fn head(&self) -> Result<&VocabParallelHead<'c>, TpError> {
        self.lm_head.as_ref().ok_or(TpError::NoHead("LM"))
    }

    /// Full logits `[B, T, vocab]` on every rank (gathered: for inspection and tests; training
    /// uses [`TpTransformer::logprobs`]).
    pub fn logits(&self, tape: &Tape<'c>, ids: &Tensor, mask: &Tensor) -> Result<Tensor, TpError> {
        let head = self.head()?;
        let hidden = self.hidden_states(tape, ids, mask, None)?;
        Ok(head.logits(tape, &hidden)?)
    }

    /// Log-probabilities `[B, T-1]` of each realised next token, computed vocabulary-parallel.
    pub fn logprobs(
        &self,
        tape: &Tape<'c>,
        ids: &Tensor,
        mask: &Tensor,
    ) -> Result<Tensor, TpError> {
        let head = self.head()?;
        let hidden = self.hidden_states(tape, ids, mask, None)?;
        Ok(head.token_logprobs(tape, &hidden, ids)?)
    }

    /// Values `[B, T]` (replicated head on replicated hidden states).
    pub fn values(&self, tape: &Tape<'c>, ids: &Tensor, mask: &Tensor) -> Result<Tensor, TpError> {
        let weight = self.value_head.as_ref().ok_or(TpError::NoHead("value"))?;
        let hidden = self.hidden_states(tape, ids, mask, None)?;
        Ok(hidden
            .linear(weight, None::<&Tensor>)
            .squeeze_dim(-1)
            .to_kind(Kind::Float))
    }

    /// Scores `[B]` read at each row's last real token.
    pub fn scores(&self, tape: &Tape<'c>, ids: &Tensor, mask: &Tensor) -> Result<Tensor, TpError> {
        let weight = self.score_head.as_ref().ok_or(TpError::NoHead("score"))?;
        let hidden = self.hidden_states(tape, ids, mask, None)?;
        let (batch, steps, width) = (hidden.size()[0], hidden.size()[1], hidden.size()[2]);
        let positions = Tensor::arange(steps, (Kind::Int64, mask.device()));
        let last = (mask.ne(0).to_kind(Kind::Int64) * positions).argmax(-1, false);
        let picked = hidden
            .gather(
                1,
                &last.view([batch, 1, 1]).expand([batch, 1, width], false),
                false,
            )
            .squeeze_dim(1);
        Ok(picked
            .linear(weight, None::<&Tensor>)
            .squeeze_dim(-1)
            .to_kind(Kind::Float))
    }

    /// The TP group the model is split over.
    pub fn tp(&self) -> &'c Communicator {
        self.tp
    }

    /// Clips the gradients to a global norm of `max_norm` over the whole model (see
    /// [`super::tp_clip_grad_norm`]); returns the norm before clipping.
    pub fn clip_grad_norm(&self, max_norm: f64) -> Result<f64, CollectiveError> {
        tp_clip_grad_norm(&self.params, max_norm, self.tp)
    }

    /// The full weights under their Hugging Face names, on every rank (for checkpoints).
    pub fn full_weights(&self) -> Result<BTreeMap<String, Tensor>, CollectiveError> {
        gather_full_weights(&self.params, self.tp)
    }
}

impl Decode for TpTransformer<'_> {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn has_lm_head(&self) -> bool {
        self.lm_head.is_some()
    }

    /// Caches of this rank's key/value heads only.
    fn new_cache(&self, positions: i64) -> KvCache {
        KvCache::preallocated(self.layers.len(), positions)
    }

    /// The full-vocabulary logits, gathered so that every rank samples the same tokens.
    fn next_logits(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, GenerateError> {
        let tape = Tape::new();
        let head = self.head().map_err(generate_error)?;
        let hidden = self
            .hidden_states(&tape, ids, mask, cache)
            .map_err(generate_error)?;
        let last = hidden.narrow(1, ids.size()[1] - 1, 1);
        Ok(head.logits(&tape, &last)?.squeeze_dim(1))
    }
}

fn generate_error(error: TpError) -> GenerateError {
    match error {
        TpError::Collective(error) => GenerateError::Collective(error),
        TpError::TokenOutOfRange { id, vocab } => GenerateError::TokenOutOfRange { id, vocab },
        TpError::NoHead("LM") => GenerateError::NoLmHead,
        other => GenerateError::InvalidSetting(other.to_string()),
    }
}

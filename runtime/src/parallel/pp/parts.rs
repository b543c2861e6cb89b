//! What a stage is built from: an embedding (first stage), decoder layers, a head (last stage).
//! Each is a trait so that a stage can hold plain layers or tensor-parallel ones alike; the
//! plain implementations are the single-rank model's blocks.

use tch::{Device, Kind, Tensor, nn};

use super::stage::Stage;
use crate::collectives::CollectiveError;
use crate::model::{
    DecoderLayer, Draw, LayerCache, ModelConfig, Positions, RmsNorm, RopeAngles, add_positions,
};
use crate::parallel::Tape;

/// Token ids `[B, T]` at `positions` (`[B, T]`, real tokens before each) to hidden states
/// `[B, T, hidden]`; the positions matter to a model with a learned position table only.
pub(crate) trait StageEmbedding<'c> {
    fn forward(
        &self,
        tape: &Tape<'c>,
        ids: &Tensor,
        positions: &Tensor,
    ) -> Result<Tensor, CollectiveError>;
}

/// One decoder layer; appends this call's keys and values to `cache`.
pub(crate) trait StageLayer<'c> {
    fn forward(
        &self,
        tape: &Tape<'c>,
        x: &Tensor,
        angles: &RopeAngles,
        bias: &Tensor,
        cache: Option<&mut LayerCache>,
    ) -> Result<Tensor, CollectiveError>;
}

/// The last layer's output `[B, T, hidden]` to full-vocabulary logits `[B, T, vocab]`: the final
/// norm and the LM head.
pub(crate) trait StageHead<'c> {
    fn logits(&self, tape: &Tape<'c>, hidden: &Tensor) -> Result<Tensor, CollectiveError>;
}

/// The blocks of one stage, their parameters registered in the stage's var store.
pub(crate) struct StageParts<'c> {
    pub embedding: Option<Box<dyn StageEmbedding<'c> + 'c>>,
    pub layers: Vec<Box<dyn StageLayer<'c> + 'c>>,
    pub head: Option<Box<dyn StageHead<'c> + 'c>>,
}

/// The token table and, for `Positions::Learned`, the position table.
struct Embedding {
    tokens: Tensor,
    positions: Option<Tensor>,
}

impl<'c> StageEmbedding<'c> for Embedding {
    fn forward(
        &self,
        _: &Tape<'c>,
        ids: &Tensor,
        positions: &Tensor,
    ) -> Result<Tensor, CollectiveError> {
        Ok(add_positions(
            Tensor::embedding(&self.tokens, ids, -1, false, false),
            self.positions.as_ref(),
            positions,
        ))
    }
}

impl<'c> StageLayer<'c> for DecoderLayer {
    fn forward(
        &self,
        _: &Tape<'c>,
        x: &Tensor,
        angles: &RopeAngles,
        bias: &Tensor,
        cache: Option<&mut LayerCache>,
    ) -> Result<Tensor, CollectiveError> {
        Ok(DecoderLayer::forward(self, x, angles, bias, cache, None))
    }
}

struct LmHead {
    norm: RmsNorm,
    weight: Tensor,
}

impl<'c> StageHead<'c> for LmHead {
    fn logits(&self, _: &Tape<'c>, hidden: &Tensor) -> Result<Tensor, CollectiveError> {
        Ok(self
            .norm
            .forward(hidden)
            .linear(&self.weight, None::<&Tensor>))
    }
}

/// The single-rank model's blocks for `stage`, registered under their Hugging Face names below
/// `root`. Their matrices have no elements (norms and biases hold their init) until the stage's
/// weights are set, so that building a stage never holds its weights twice.
pub(crate) fn plain_parts<'c>(
    root: &nn::Path,
    config: &ModelConfig,
    stage: &Stage,
) -> StageParts<'c> {
    let trunk = root / "model";
    let empty = || Tensor::zeros([0], (Kind::Float, Device::Cpu));
    let embed_tokens = || (&trunk / "embed_tokens").var_copy("weight", &empty());
    let embedding = stage.is_first().then(embed_tokens);
    let mut rng = Draw::Skeleton;
    let layers = stage
        .layers
        .clone()
        .map(|i| {
            let layer = DecoderLayer::new(&(&trunk / "layers" / i), config, &mut rng);
            Box::new(layer) as Box<dyn StageLayer<'c>>
        })
        .collect();
    let head = stage.is_last().then(|| {
        let weight = match (&embedding, config.tie_embeddings) {
            (Some(embedding), true) => embedding.shallow_clone(),
            // The last stage's own copy of the tied embedding.
            (None, true) => embed_tokens(),
            (_, false) => (root / "lm_head").var_copy("weight", &empty()),
        };
        let norm = RmsNorm::new(&(&trunk / "norm"), config.hidden, config.norm_eps);
        Box::new(LmHead { norm, weight }) as Box<dyn StageHead<'c>>
    });
    let position_table = (stage.is_first() && config.positions == Positions::Learned)
        .then(|| (&trunk / "embed_positions").var_copy("weight", &empty()));
    StageParts {
        embedding: embedding.map(|tokens| {
            Box::new(Embedding {
                tokens,
                positions: position_table,
            }) as Box<dyn StageEmbedding<'c>>
        }),
        layers,
        head,
    }
}

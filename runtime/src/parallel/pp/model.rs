//! One stage of a pipeline-parallel model: its parameters, and its part of a forward pass.

use std::collections::BTreeMap;

use tch::{Device, Kind, Tensor, nn};

use super::parts::{StageParts, plain_parts};
use super::{PipelineError, Stage};
use crate::collectives::Communicator;
use crate::model::init::parameters;
use crate::model::{Heads, KvCache, ModelConfig, Rope, attention_bias, token_positions};
use crate::parallel::Tape;

/// The weight the first and the last stage both hold when the LM head is tied to it.
pub(super) const EMBEDDING: &str = "model.embed_tokens.weight";

/// The part of a decoder-only model with an LM head that one rank of the `pp` group runs.
/// Every stage rank calls the same methods in the same order, like a collective.
pub struct PipelineModel<'c> {
    config: ModelConfig,
    pp: &'c Communicator,
    stage: Stage,
    vs: nn::VarStore,
    parts: StageParts<'c>,
    rope: Rope,
}

impl<'c> PipelineModel<'c> {
    /// This rank's stage of the model whose weights (Hugging Face names) are `weights`; the
    /// stage is `pp`'s rank. Only the stage's own weights are copied into its var store.
    pub fn new(
        weights: &BTreeMap<String, Tensor>,
        config: &ModelConfig,
        pp: &'c Communicator,
    ) -> Result<Self, PipelineError> {
        let device = weights.values().next().map_or(Device::Cpu, Tensor::device);
        Self::build(config, pp, device, |name| {
            weights.get(name).map(|w| (w.detach(), true))
        })
    }

    /// This rank's stage from its own weights alone, given away: `weights` holds each of the
    /// stage's parameters (any shape with its number of elements: the flat tensors
    /// `parallel::materialise::rank_shards` makes), and each becomes its variable without a copy.
    pub fn from_owned(
        mut weights: BTreeMap<String, Tensor>,
        config: &ModelConfig,
        pp: &'c Communicator,
    ) -> Result<Self, PipelineError> {
        let device = weights.values().next().map_or(Device::Cpu, Tensor::device);
        Self::build(config, pp, device, |name| {
            weights.remove(name).map(|w| (w.detach(), false))
        })
    }

    /// The stage's blocks, each variable set from what `take` gives for its name (with whether
    /// it is borrowed, so copied, and must have the parameter's shape).
    fn build(
        config: &ModelConfig,
        pp: &'c Communicator,
        device: Device,
        mut take: impl FnMut(&str) -> Option<(Tensor, bool)>,
    ) -> Result<Self, PipelineError> {
        config.validate()?;
        let stage = Stage::new(config.layers, pp.world_size(), pp.rank())?;
        let vs = nn::VarStore::new(device);
        let parts = plain_parts(&vs.root(), config, &stage);
        let shapes: BTreeMap<String, Vec<i64>> = parameters(config, Heads::POLICY)
            .into_iter()
            .map(|p| (p.name, p.shape))
            .collect();
        for (name, mut var) in vs.variables() {
            let (weight, borrowed) =
                take(&name).ok_or_else(|| PipelineError::MissingWeight(name.clone()))?;
            let expected = shapes.get(&name).cloned().unwrap_or_default();
            let fits = match borrowed {
                true => weight.size() == expected,
                false => weight.numel() as i64 == expected.iter().product::<i64>(),
            };
            if !fits {
                return Err(PipelineError::WeightShape {
                    expected,
                    found: weight.size(),
                    name,
                });
            }
            let value = weight
                .reshape(expected.as_slice())
                .to_device(device)
                .to_kind(var.kind());
            let value = if borrowed { value.copy() } else { value };
            tch::no_grad(|| var.set_data(&value));
        }
        Self::from_parts(config, pp, vs, parts)
    }

    /// A stage from blocks already built into `vs` (e.g. tensor-parallel ones).
    pub(crate) fn from_parts(
        config: &ModelConfig,
        pp: &'c Communicator,
        vs: nn::VarStore,
        parts: StageParts<'c>,
    ) -> Result<Self, PipelineError> {
        config.validate()?;
        let stage = Stage::new(config.layers, pp.world_size(), pp.rank())?;
        let problem = if parts.embedding.is_some() != stage.is_first() {
            Some("the first stage and only it embeds the tokens".to_string())
        } else if parts.head.is_some() != stage.is_last() {
            Some("the last stage and only it has the LM head".to_string())
        } else if parts.layers.len() != stage.layer_count() {
            Some(format!(
                "{} layers for the {} of layers {:?}",
                parts.layers.len(),
                stage.layer_count(),
                stage.layers
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(PipelineError::StageParts {
                stage: stage.index,
                stages: stage.count,
                problem,
            });
        }
        Ok(Self {
            config: config.clone(),
            pp,
            rope: Rope::for_config(config, vs.device()),
            stage,
            vs,
            parts,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn stage(&self) -> &Stage {
        &self.stage
    }

    /// The stage's parameters under their Hugging Face names (for the optimiser).
    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    /// Holds (and runs) the stage in `kind` from now on (`precision = bf16`): its blocks read
    /// the variables, which are converted in place; activations and their gradients travel
    /// between stages in it.
    pub fn set_kind(&mut self, kind: Kind) {
        self.vs.set_kind(kind);
    }

    /// Whether `name` is this stage's copy of a tied embedding that the first stage also holds
    /// (the last stage's LM head): a whole-model gradient norm counts it once, on the first.
    pub(crate) fn is_second_embedding_copy(&self, name: &str) -> bool {
        self.config.tie_embeddings
            && self.stage.count > 1
            && !self.stage.is_first()
            && name == EMBEDDING
    }

    pub(super) fn pp(&self) -> &'c Communicator {
        self.pp
    }

    /// Logits `[B, T, vocab]` of `ids` (`[B, T]`, `mask` as in
    /// [`Transformer::hidden_states`](crate::model::Transformer::hidden_states)), without
    /// gradient, on the last stage; `None` on the others.
    pub fn logits(&self, ids: &Tensor, mask: &Tensor) -> Result<Option<Tensor>, PipelineError> {
        tch::no_grad(|| {
            let tape = Tape::new();
            let x = self.stage_input(&tape, ids, mask, 0)?;
            let y = self.run_layers(&tape, &x, mask, None)?;
            self.stage_output(&tape, &y)
        })
    }

    /// Every stage's weights under their Hugging Face names, on every stage (for checkpoints and
    /// tests).
    pub fn full_weights(&self) -> Result<BTreeMap<String, Tensor>, PipelineError> {
        self.full_weights_of(&self.vs.variables().into_iter().collect())
    }

    /// Every stage's `own` tensors by parameter name (a stage's variables, or its optimizer's
    /// float32 master weights), on every stage.
    pub fn full_weights_of(
        &self,
        own: &BTreeMap<String, Tensor>,
    ) -> Result<BTreeMap<String, Tensor>, PipelineError> {
        gather_stages(own, self.stage.index, self.pp)
    }

    /// Checks `ids` `[B, T]` and `mask` `[B, cached + T]`; every stage checks the same inputs, so
    /// they fail together instead of leaving a neighbour waiting.
    pub(super) fn check_input(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cached: i64,
    ) -> Result<(), PipelineError> {
        let (shape, mask_shape) = (ids.size(), mask.size());
        let fits = matches!((shape.as_slice(), mask_shape.as_slice()),
            (&[rows, steps], &[mask_rows, width])
                if rows > 0 && steps > 0 && mask_rows == rows && width == cached + steps);
        if !fits {
            return Err(PipelineError::InputShape {
                ids: shape,
                mask: mask_shape,
                cached,
            });
        }
        let vocab = self.config.vocab;
        let extremes = [ids.min().int64_value(&[]), ids.max().int64_value(&[])];
        if let Some(&id) = extremes.iter().find(|id| !(0..vocab).contains(*id)) {
            return Err(PipelineError::TokenOutOfRange { id, vocab });
        }
        Ok(())
    }

    /// The stage's input: the embedded tokens on the first stage, what the previous stage sent
    /// elsewhere.
    pub(super) fn stage_input(
        &self,
        tape: &Tape<'c>,
        ids: &Tensor,
        mask: &Tensor,
        cached: i64,
    ) -> Result<Tensor, PipelineError> {
        self.check_input(ids, mask, cached)?;
        match &self.parts.embedding {
            Some(embedding) => {
                let steps = ids.size()[1];
                let positions = token_positions(&mask.ne(0), cached, steps);
                Ok(embedding.forward(tape, ids, &positions)?)
            }
            None => Ok(self.pp.recv(self.stage.index - 1)?),
        }
    }

    /// This stage's layers over `x` (`[B, T, hidden]`); `mask` covers the cached positions, then
    /// the `T` new ones.
    pub(super) fn run_layers(
        &self,
        tape: &Tape<'c>,
        x: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, PipelineError> {
        let steps = x.size()[1];
        let mask = mask.ne(0);
        let cached = cache.as_ref().map_or(0, |cache| cache.len());
        let angles = self.rope.angles(&token_positions(&mask, cached, steps));
        let bias = attention_bias(&mask, cached, steps, x.kind());
        let mut x = x.shallow_clone();
        match cache {
            Some(cache) => {
                let caches = cache.layers_mut();
                if caches.len() != self.parts.layers.len() {
                    return Err(PipelineError::CacheLayers {
                        expected: self.parts.layers.len(),
                        found: caches.len(),
                    });
                }
                for (layer, layer_cache) in self.parts.layers.iter().zip(caches) {
                    x = layer.forward(tape, &x, &angles, &bias, Some(layer_cache))?;
                }
            }
            None => {
                for layer in &self.parts.layers {
                    x = layer.forward(tape, &x, &angles, &bias, None)?;
                }
            }
        }
        Ok(x)
    }

    /// The logits of the last layer's output `y` on the last stage; elsewhere `y` goes to the
    /// next stage and the result is `None`.
    pub(super) fn stage_output(
        &self,
        tape: &Tape<'c>,
        y: &Tensor,
    ) -> Result<Option<Tensor>, PipelineError> {
        match &self.parts.head {
            Some(head) => Ok(Some(head.logits(tape, y)?)),
            None => {
                self.pp.send(y, self.stage.index + 1)?;
                Ok(None)
            }
        }
    }
}

/// Every stage's `own` weights (this one is `stage`) on every stage of `pp`: names travel as
/// bytes, then each weight is broadcast from the stage that holds it.
pub(crate) fn gather_stages(
    own: &BTreeMap<String, Tensor>,
    stage: usize,
    pp: &Communicator,
) -> Result<BTreeMap<String, Tensor>, PipelineError> {
    let names = own.keys().cloned().collect::<Vec<_>>().join("\n");
    let per_stage = pp
        .all_gather(&Tensor::from_slice(names.as_bytes()))?
        .into_iter()
        .map(|bytes| {
            let bytes = Vec::<u8>::try_from(bytes)?;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        })
        .collect::<Result<Vec<String>, PipelineError>>()?;
    let mut full = BTreeMap::new();
    for (root, names) in per_stage.iter().enumerate() {
        for name in names.split('\n').filter(|n| !n.is_empty()) {
            // A tied embedding comes from the first stage; the last one's copy is equal.
            if full.contains_key(name) {
                continue;
            }
            let mine = (root == stage).then(|| own[name].detach());
            let weight = pp.broadcast(mine.as_ref(), root)?;
            full.insert(name.to_string(), weight);
        }
    }
    Ok(full)
}

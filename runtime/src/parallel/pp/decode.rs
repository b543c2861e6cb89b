//! Generation across stages: each stage keeps the KV cache of its own layers, hidden states go
//! stage to stage, and the last stage's logits are broadcast so every stage samples alike.

use tch::Tensor;

use super::{PipelineError, PipelineModel};
use crate::generate::{Decode, GenerateError};
use crate::model::{KvCache, ModelConfig};
use crate::parallel::Tape;

impl From<PipelineError> for GenerateError {
    fn from(e: PipelineError) -> Self {
        match e {
            PipelineError::Collective(e) => GenerateError::Collective(e),
            PipelineError::TokenOutOfRange { id, vocab } => {
                GenerateError::TokenOutOfRange { id, vocab }
            }
            other => GenerateError::InvalidSetting(other.to_string()),
        }
    }
}

impl Decode for PipelineModel<'_> {
    fn config(&self) -> &ModelConfig {
        PipelineModel::config(self)
    }

    fn has_lm_head(&self) -> bool {
        true
    }

    fn new_cache(&self, positions: i64) -> KvCache {
        KvCache::preallocated(self.stage().layer_count(), positions)
    }

    fn next_logits(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, GenerateError> {
        let tape = Tape::new();
        let cached = cache.as_ref().map_or(0, |cache| cache.len());
        let x = self.stage_input(&tape, ids, mask, cached)?;
        let mut y = self.run_layers(&tape, &x, mask, cache)?;
        if self.stage().is_last() {
            // Only the last position's logits are needed.
            y = y.narrow(1, y.size()[1] - 1, 1);
        }
        let logits = self.stage_output(&tape, &y)?.map(|l| l.squeeze_dim(1));
        let last = self.stage().count - 1;
        Ok(self.pp().broadcast(logits.as_ref(), last)?)
    }
}

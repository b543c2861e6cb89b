//! Generation over FSDP: each step gathers one unit at a time, as training does, so a rank never
//! holds more than one unit's full parameters (ZeRO-Inference's trade: an all-gather per unit and
//! step instead of a full copy of the model).
//!
//! Every rank of an FSDP group joins every all-gather, so all of them must run the same steps:
//! they decode the same rows (the whole batch, or their DP replica's share with
//! `GenerateConfig::rows_of`). Splitting rows inside the group would let one rank stop at EOS
//! while another still waits for a collective.

use tch::Tensor;

use super::{Fsdp, FsdpError};
use crate::generate::{Decode, GenerateError};
use crate::model::{KvCache, ModelConfig};

impl From<FsdpError> for GenerateError {
    fn from(e: FsdpError) -> Self {
        match e {
            FsdpError::Collective(e) => GenerateError::Collective(e),
            other => GenerateError::InvalidSetting(other.to_string()),
        }
    }
}

impl Decode for Fsdp<'_> {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn has_lm_head(&self) -> bool {
        true
    }

    fn new_cache(&self, positions: i64) -> KvCache {
        KvCache::preallocated(self.layers(), positions)
    }

    fn next_logits(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, GenerateError> {
        let steps = ids.size()[1];
        let past = cache.as_ref().map_or(0, |cache| cache.len());
        if ids.dim() != 2 || mask.dim() != 2 || mask.size()[1] != past + steps {
            return Err(GenerateError::InvalidSetting(format!(
                "the mask {:?} must cover the {past} cached positions and the ids {:?}",
                mask.size(),
                ids.size()
            )));
        }
        self.check_idle()?;
        let context = self.context(mask, past, steps);
        let mut x = self.embed(ids, &context)?;
        match cache {
            Some(cache) => {
                for (layer, layer_cache) in cache.layers_mut().iter_mut().enumerate() {
                    x = self.run_layer(layer, &x, &context, Some(layer_cache))?;
                }
            }
            None => {
                for layer in 0..self.layers() {
                    x = self.run_layer(layer, &x, &context, None)?;
                }
            }
        }
        let last = x.narrow(1, steps - 1, 1);
        let _head = self.gather(self.head_unit()).map_err(FsdpError::from)?;
        let hidden = self.skeleton.final_norm().forward(&last);
        Ok(self.skeleton.lm_head(&hidden).squeeze_dim(1))
    }
}

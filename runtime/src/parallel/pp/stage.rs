//! Which layers a stage runs.

use std::ops::Range;

use super::PipelineError;
use crate::parallel::shards::block;

/// A stage's place in the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// 0 .. `count`: the rank in the `pp` group.
    pub index: usize,
    pub count: usize,
    /// Global indices of the decoder layers it runs.
    pub layers: Range<i64>,
}

impl Stage {
    /// Stage `index` of `count` over `layers` decoder layers, split as the plan splits them
    /// ([`block`]): layers `[index·L/count, (index+1)·L/count)`.
    pub fn new(layers: i64, count: usize, index: usize) -> Result<Self, PipelineError> {
        if count == 0 || count as i64 > layers || index >= count {
            return Err(PipelineError::TooManyStages {
                stages: count,
                layers,
            });
        }
        Ok(Self {
            index,
            count,
            layers: block(layers, count as i64, index as i64),
        })
    }

    pub fn is_first(&self) -> bool {
        self.index == 0
    }

    pub fn is_last(&self) -> bool {
        self.index + 1 == self.count
    }

    /// Number of decoder layers on this stage.
    pub fn layer_count(&self) -> usize {
        (self.layers.end - self.layers.start) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_cover_the_layers_in_order_as_evenly_as_the_plan() {
        let split: Vec<Range<i64>> = (0..3)
            .map(|s| Stage::new(7, 3, s).unwrap().layers)
            .collect();
        assert_eq!(split, [0..2, 2..4, 4..7]);
        let one = Stage::new(4, 4, 3).unwrap();
        assert_eq!(
            (one.layers.clone(), one.is_last(), one.is_first()),
            (3..4, true, false)
        );
        assert_eq!(
            Stage::new(4, 5, 0),
            Err(PipelineError::TooManyStages {
                stages: 5,
                layers: 4
            })
        );
    }
}

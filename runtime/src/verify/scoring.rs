//! Outcomes → the Verify op's outputs: the reward and one tensor per declared metric, with the
//! declaration's `on_error` applied to the failed samples.

use rlc_plan::model::{OnError, Verifier};
use tch::{Device, Tensor};

use super::pool::Outcome;

/// A sample the verifier gave no score, under `on_error: fail` (the run stops with it:
/// `exec::RunError::Verifier`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("verifier `{verifier}` failed on sample {sample} at step {step}: {cause}")]
pub struct SampleFailed {
    pub verifier: String,
    pub step: u64,
    pub sample: u64,
    pub cause: String,
}

/// A step's scores on one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    pub reward: Vec<f32>,
    /// One column per declared metric, in declaration order.
    pub metrics: Vec<Vec<f32>>,
    /// Samples that got no score (their reward and metrics are 0).
    pub failures: u64,
}

impl Scores {
    /// `[reward, metric…]`, each `f32[B]` on `device`.
    pub fn tensors(&self, device: Device) -> Vec<Tensor> {
        std::iter::once(&self.reward)
            .chain(&self.metrics)
            .map(|v| Tensor::from_slice(v).to_device(device))
            .collect()
    }
}

/// Applies `verifier.on_error`: `fail` → the first failed sample's error (sample numbers count
/// from `first_sample`, this rank's first row in the step's batch); `zero` → 0 for the failed
/// samples, counted.
pub fn apply(
    verifier: &Verifier,
    outcomes: Vec<Outcome>,
    first_sample: u64,
    step: u64,
) -> Result<Scores, SampleFailed> {
    let mut scores = Scores {
        reward: Vec::with_capacity(outcomes.len()),
        metrics: vec![Vec::with_capacity(outcomes.len()); verifier.metrics.len()],
        failures: 0,
    };
    let failed = outcomes.iter().filter(|o| o.is_err()).count();
    for (i, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(scored) => {
                scores.reward.push(scored.reward);
                for (column, value) in scores.metrics.iter_mut().zip(scored.metrics) {
                    column.push(value);
                }
            }
            Err(cause) => match verifier.on_error {
                OnError::Fail => {
                    let more = match failed - 1 {
                        0 => String::new(),
                        n => format!(" ({n} more samples of this step failed too)"),
                    };
                    return Err(SampleFailed {
                        verifier: verifier.name.clone(),
                        step,
                        sample: first_sample + i as u64,
                        cause: format!("{cause}{more}"),
                    });
                }
                OnError::Zero => {
                    scores.failures += 1;
                    scores.reward.push(0.0);
                    for column in &mut scores.metrics {
                        column.push(0.0);
                    }
                }
            },
        }
    }
    Ok(scores)
}

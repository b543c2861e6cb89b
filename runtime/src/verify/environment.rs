//! An environment's messages (`docs/environments.md`): the same JSON Lines / HTTP transport and
//! pool as a verifier's ([`super::Pool::call`]). Environments are stateless: each item carries
//! the whole episode so far, so any worker may serve any turn.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::pool::ItemError;

/// One turn of one episode, as the environment receives it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepItem {
    /// The sample's index in the step's batch (the same on every data rank's split).
    pub episode: u64,
    /// The turn just played, from 0.
    pub turn: u64,
    pub prompt: String,
    pub prompt_ids: Vec<i64>,
    /// The earlier turns of the episode and the observations that followed them.
    pub history: Vec<Exchange>,
    /// This turn's text (up to its end-of-answer token) and its token ids as sampled.
    pub response: String,
    pub response_ids: Vec<i64>,
    /// The dataset row's fields the declaration asks for (`fields: [...]`).
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

/// An earlier turn and the observation after it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    pub response: String,
    pub response_ids: Vec<i64>,
    pub observation: String,
    pub observation_ids: Vec<i64>,
}

/// The environment's answer to one item.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct StepResult {
    /// The observation as text (encoded with the dataset's tokenizer or the task alphabet)…
    #[serde(default)]
    pub observation: Option<String>,
    /// … or as token ids (one of the two; either may be left out when `done`).
    #[serde(default)]
    pub observation_ids: Option<Vec<i64>>,
    /// This turn's reward (0 when absent).
    #[serde(default)]
    pub reward: Option<f64>,
    #[serde(default)]
    pub done: bool,
    #[serde(default)]
    pub error: Option<String>,
}

impl ItemError for StepResult {
    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }
}

/// What the environment's answer means for the episode.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    Text(String),
    Ids(Vec<i64>),
    /// Absent: allowed only when `done`.
    None,
}

impl StepResult {
    /// The reward (finite, 0 when absent) and the observation, or why the answer is unusable.
    pub fn read(self) -> Result<(f32, Observation, bool), String> {
        let reward = self.reward.unwrap_or(0.0);
        let r = reward as f32;
        if !r.is_finite() {
            return Err(format!("the reward is not a finite f32 ({reward})"));
        }
        let observation = match (self.observation, self.observation_ids) {
            (Some(_), Some(_)) => {
                return Err("the result has both `observation` and `observation_ids`".into());
            }
            (Some(text), None) => Observation::Text(text),
            (None, Some(ids)) => Observation::Ids(ids),
            (None, None) if self.done => Observation::None,
            (None, None) => {
                return Err(
                    "the result has no `observation` (nor `observation_ids`) and is not done"
                        .into(),
                );
            }
        };
        Ok((r, observation, self.done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(line: &str) -> Result<(f32, Observation, bool), String> {
        serde_json::from_str::<StepResult>(line).unwrap().read()
    }

    #[test]
    fn results_read_as_the_protocol_says() {
        assert_eq!(
            read(r#"{"observation": "=408", "reward": 0.5}"#).unwrap(),
            (0.5, Observation::Text("=408".into()), false)
        );
        assert_eq!(
            read(r#"{"observation_ids": [3, 4], "done": false}"#).unwrap(),
            (0.0, Observation::Ids(vec![3, 4]), false)
        );
        assert_eq!(
            read(r#"{"reward": 1, "done": true}"#).unwrap(),
            (1.0, Observation::None, true)
        );
        let e = read(r#"{"reward": 1}"#).unwrap_err();
        assert!(e.contains("no `observation`"), "{e}");
        let e = read(r#"{"observation": "a", "observation_ids": [1]}"#).unwrap_err();
        assert!(e.contains("both"), "{e}");
        let e = read(r#"{"observation": "a", "reward": 1e300}"#).unwrap_err();
        assert!(e.contains("finite"), "{e}");
    }
}

//! `checkpoint role`: the first rank of the role's training instance writes the full weights (a
//! sharded layout gathers them and the moments over its group first), the
//! optimizer state and the position of the run; every data rank holds the same copy.
//! A resumed run loads them on every rank (into every layout of the role it holds), and the values the loop carries (saved by the
//! writing rank when it holds them) on every rank that holds them.

use std::path::{Path, PathBuf};

use rlc_plan::model::Op;
use serde_json::json;

use super::error::{Result, RunError};
use super::rank::Rank;
use crate::checkpoint::{self, Checkpoint};

/// Where checkpoints of `role` go: `run_dir/checkpoints/<role>/step-000050`.
pub fn role_root(run_dir: &Path, role: &str) -> PathBuf {
    run_dir.join("checkpoints").join(role)
}

impl Rank<'_> {
    pub(super) fn checkpoint(&self, op: &Op, role: &str, step: u64) -> Result<()> {
        let writer = op.ranks.iter().next() == Some(self.rank);
        let state = self.role(role)?;
        // A sharded model's full weights and moments are gathered by every rank of its groups.
        if !writer && !state.sharded() {
            return Ok(());
        }
        let weights = state.weights()?;
        let (optimizer, optimizer_steps) = state.optimizer_state()?;
        if !writer {
            return Ok(());
        }
        let cursors: serde_json::Map<String, serde_json::Value> = self
            .samplers()
            .iter()
            .map(|(name, s)| (name.clone(), json!(s.cursor())))
            .collect();
        let carried: serde_json::Map<String, serde_json::Value> =
            self.carried_values().into_iter().collect();
        let saved = Checkpoint {
            step: step + 1,
            weights,
            optimizer,
            state: json!({
                "role": role,
                "steps_done": step + 1,
                "optimizer_steps": optimizer_steps,
                "seed": self.seed(),
                "data_cursors": cursors,
                // The loop's carried values as the next step reads them.
                "carried": carried,
            }),
            // The folder is then a Hugging Face model folder too: a later stage (or another tool)
            // can start from it with `hf("…/step-000050")`.
            config: Some(crate::hf::config_json(state.config(), None)),
        };
        let dir = checkpoint::step_dir(&role_root(self.run_dir(), role), step + 1);
        checkpoint::save(&dir, &saved)?;
        Ok(())
    }

    /// Loads `role`'s checkpoint from `dir`; returns the steps it had completed.
    pub(super) fn restore(&mut self, role: &str, dir: &Path) -> Result<u64> {
        let saved = checkpoint::load(dir)?;
        let what = dir.display().to_string();
        let state = self
            .roles
            .get_mut(role)
            .ok_or_else(|| RunError::Plan(format!("rank does not hold `{role}`")))?;
        state.load_weights(&saved.weights, &what)?;
        // The role's other layouts on this rank serve the same weights.
        for other in self.other_layouts_mut(role) {
            other.load_weights(&saved.weights, &what)?;
        }
        let carried = &saved.state["carried"];
        if !self.carried_restored && self.carried_names().all(|name| carried.get(name).is_some()) {
            self.restore_carried(carried, &what)?;
            self.carried_restored = true;
        }
        let state = self
            .roles
            .get_mut(role)
            .ok_or_else(|| RunError::Plan(format!("rank does not hold `{role}`")))?;
        if state.training.is_some() {
            let steps = saved.state["optimizer_steps"].as_u64().ok_or_else(|| {
                RunError::Plan(format!("{what}: state.json has no optimizer_steps"))
            })?;
            state.load_optimizer(steps, saved.optimizer.into_iter().collect(), &what)?;
        }
        Ok(saved.step)
    }
}

//! `checkpoint role`: the first rank of the role's training instance writes the full weights (a
//! sharded layout gathers them and the moments over its group first), the
//! optimizer state and the position of the run; every data rank holds the same copy.
//! A resumed run loads them on every rank (into every layout of the role it holds), and the values the loop carries (saved by the
//! writing rank when it holds them) on every rank that holds them.
//!
//! The roles a step checkpoints commit together: after installing its folder, each writer
//! commits the step (`checkpoint::commit`), which writes the step's marker once every role's
//! folder is in place; a resumed run starts from the newest committed step.

use std::path::{Path, PathBuf};

use rlc_plan::Plan;
use rlc_plan::model::{Op, OpKind, Role};
use serde_json::json;
use tch::{Device, nn};

use super::error::{Result, RunError};
use super::rank::Rank;
use crate::checkpoint::{self, Checkpoint};
use crate::model::{Heads, Transformer};

/// Where checkpoints of `role` go: `run_dir/checkpoints/<role>/step-000050`.
pub fn role_root(run_dir: &Path, role: &str) -> PathBuf {
    checkpoints_root(run_dir).join(role)
}

/// The folder of every role's checkpoints and of the steps' commit markers.
pub fn checkpoints_root(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints")
}

/// The roles loop iteration `step` checkpoints (every `checkpoint` op whose `every` falls on
/// it), sorted: the roles its commit waits for.
pub fn roles_checkpointed_at(plan: &Plan, step: u64) -> Vec<String> {
    let mut roles: Vec<String> = plan
        .ops
        .iter()
        .filter(|op| {
            op.every
                .is_none_or(|every| (step + 1).is_multiple_of(every))
        })
        .filter_map(|op| match &op.kind {
            OpKind::Checkpoint { role, .. } => Some(role.clone()),
            _ => None,
        })
        .collect();
    roles.sort();
    roles.dedup();
    roles
}

/// The test hook for a crash between two roles' writes: with
/// `RLC_TEST_CRASH_AFTER_CHECKPOINT=critic:2` the process aborts (as `kill -9` would stop it)
/// right after `critic`'s folder of step 2 is in place, before the step is committed
/// (`tests/run.rs`). Read here only.
fn crash_if_asked(role: &str, step: u64) {
    if std::env::var("RLC_TEST_CRASH_AFTER_CHECKPOINT").is_ok_and(|v| v == format!("{role}:{step}"))
    {
        eprintln!("RLC_TEST_CRASH_AFTER_CHECKPOINT: aborting after `{role}` of step {step}");
        std::process::abort();
    }
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
            lagged: self.lagged_tensors(role, step + 1),
        };
        let dir = checkpoint::step_dir(&role_root(self.run_dir(), role), step + 1);
        checkpoint::save(&dir, &saved)?;
        crash_if_asked(role, step + 1);
        checkpoint::commit(
            &checkpoints_root(self.run_dir()),
            step + 1,
            &roles_checkpointed_at(self.job.plan, step),
        )?;
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

/// `init = load(path)`: the weights of the rlc checkpoint folder `dir` (a manifest required,
/// every file verified against it by `hf::load_model`), in a model of the folder's
/// `config.json`, whose shape must be the program's `arch`. Only the weights: the optimizer
/// starts afresh (`--resume` continues a run with its moments).
pub(super) fn initial_from_checkpoint(
    dir: &Path,
    role: &Role,
    heads: Heads,
    device: Device,
) -> Result<(nn::VarStore, Transformer)> {
    let refused = |message: String| RunError::Weights {
        role: role.name.clone(),
        message,
    };
    checkpoint::require_manifest(dir).map_err(|e| {
        refused(format!(
            "{e}; `load(path)` reads a checkpoint folder of rlc (`hf(path)` reads any Hugging Face \
             model folder)"
        ))
    })?;
    let (vs, model) =
        crate::hf::load_model(dir, heads, device).map_err(|e| refused(e.to_string()))?;
    if let Some(arch) = &role.arch {
        let c = model.config();
        let fields = [
            ("layers", arch.layers, c.layers),
            ("hidden", arch.hidden, c.hidden),
            ("heads", arch.heads, c.heads),
            ("kv_heads", arch.kv_heads, c.kv_heads),
            ("ffn", arch.ffn, c.ffn),
            ("vocab", arch.vocab, c.vocab),
            ("max_len", arch.max_len, c.max_len),
        ];
        for (name, written, stored) in fields {
            if i64::try_from(written).ok() != Some(stored) {
                return Err(refused(format!(
                    "the program's arch has {name} = {written}, the checkpoint {} has {stored}",
                    dir.display()
                )));
            }
        }
        super::settings::same_positions(arch, c).map_err(refused)?;
    }
    Ok((vs, model))
}

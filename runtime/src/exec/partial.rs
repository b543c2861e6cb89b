//! Partial rollouts (`generate(…, pause_at: p)`): a generator that runs ahead of training
//! samples the first `p` tokens of each response, then receives the weights training has made
//! meanwhile (the weight sync that would otherwise arrive after its step), and samples the rest
//! with them. The pause is at a fixed position and takes a fixed version (the sync of step
//! `k − lag`, as ever), so a run with a seed repeats itself; a generator that reaches the pause
//! first waits for training there.

use super::error::Result;
use super::rank::Rank;
use super::rollout::{self, Sampling};
use super::values::Rollout;
use crate::data::Sample;
use rlc_plan::model::{Op, OpKind, ShardMove};

/// The weight sync a paused generation receives, and where it pauses.
pub(super) struct Pause<'p> {
    pub at: i64,
    sync: &'p Op,
    role: &'p str,
    from: &'p str,
    to: &'p str,
    moves: &'p [ShardMove],
}

impl<'j> Rank<'j> {
    /// The pause of `op`, a `generate` that pauses `at` a position, at `step` on this rank: the
    /// lagging weight sync into its instance that this rank receives at this step. `None` where
    /// the op does not pause, or in the first `lag` steps, when no weights are on their way yet.
    pub(super) fn pause_of(&self, op: &Op, at: Option<i64>, step: u64) -> Option<Pause<'j>> {
        let plan: &'j rlc_plan::model::Plan = self.job.plan;
        let at = at?;
        let instance = op.instance.as_deref()?;
        plan.ops.iter().find_map(|sync| match &sync.kind {
            OpKind::WeightSync {
                role,
                from,
                to,
                moves,
                lag,
                ..
            } if to == instance
                && *lag > 0
                && super::resharding(plan, sync)
                && !self.in_instance(from)
                && self.syncs_now(from, *lag, step) =>
            {
                Some(Pause {
                    at,
                    sync,
                    role,
                    from,
                    to,
                    moves,
                })
            }
            _ => None,
        })
    }

    /// Samples `samples`' responses up to the pause, receives the next weights, samples the rest
    /// with them.
    pub(super) fn paused_rollout(
        &mut self,
        op: &Op,
        pause: &Pause<'_>,
        samples: &[Sample],
        first: i64,
        total: i64,
        how: &Sampling,
    ) -> Result<Rollout> {
        let role = pause.role;
        let started = {
            let model = self.role_in(role, op)?.decode();
            rollout::start(model, samples, first, total, how, pause.at, self.device)?
        };
        self.take_weights(role, pause.from, pause.to, pause.moves)?;
        self.received_early = Some(pause.sync.id);
        let model = self.role_in(role, op)?.decode();
        rollout::finish(model, started, samples, first, how, self.device)
    }
}

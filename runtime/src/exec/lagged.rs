//! A generator `s` steps behind training across a checkpoint. When step `k` starts, the
//! generator holds the weights of version `k − s` (the updates they had seen) and versions
//! `k − s + 1 ..= k` wait in the channel from training; the checkpoint holds only version `k`.
//! So the rank that trains keeps a copy of each version it makes in the `s` steps before a
//! checkpoint (`Rank::history`, at most `s + 1`), the checkpoint writes those older than its own (`lagged.safetensors`), and a resumed run puts both back:
//! the generator loads version `k − s`, training sends the waiting versions again, in order.
//! Under `dp` only: a sharded trainer's local shards are not the saved weights.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use rlc_plan::model::OpKind;
use tch::Tensor;

use super::error::{Result, RunError};
use super::rank::Rank;
use crate::checkpoint;

/// Versions of a role's weights, oldest first, each with the number of updates it had seen.
pub(super) type History = VecDeque<(u64, Vec<(String, Tensor)>)>;

/// The lagging weight syncs of a plan: (role, from, to, lag, moves).
type Lagging<'p> = Vec<(
    &'p str,
    &'p str,
    &'p str,
    u64,
    &'p [rlc_plan::model::ShardMove],
)>;

fn lagging(plan: &rlc_plan::Plan) -> Lagging<'_> {
    plan.ops
        .iter()
        .filter(|op| super::resharding(plan, op))
        .filter_map(|op| match &op.kind {
            OpKind::WeightSync {
                role,
                from,
                to,
                lag,
                moves,
                ..
            } if *lag > 0 => Some((role.as_str(), from.as_str(), to.as_str(), *lag, &moves[..])),
            _ => None,
        })
        .collect()
}

/// A deep copy of `weights` (a rank's variables are the live tensors).
fn copied(weights: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
    weights.iter().map(|(n, t)| (n.clone(), t.copy())).collect()
}

/// The local shards a `dp` trainer sends of `weights`: each variable, flat.
fn flat(weights: &[(String, Tensor)]) -> BTreeMap<String, Tensor> {
    weights
        .iter()
        .map(|(n, t)| (n.clone(), t.detach().reshape([-1])))
        .collect()
}

impl Rank<'_> {
    /// A fresh run: the trainer of a role whose generator lags remembers version 0.
    pub fn start_lagged(&mut self) -> Result<()> {
        for (role, from, _, _, _) in lagging(self.job.plan) {
            if self.in_instance(from) && !self.history.contains_key(role) {
                let weights = copied(&self.role_in_mut(role, from)?.weights()?);
                self.history
                    .insert(role.to_string(), VecDeque::from([(0, weights)]));
            }
        }
        Ok(())
    }

    /// After the update that made `version` of `role`'s weights (in instance `from`), whose
    /// generator runs `lag` steps behind: kept when a checkpoint of the role comes within `lag`
    /// steps (it saves the `lag` versions before its own), not copied otherwise.
    pub(super) fn remember_version(
        &mut self,
        role: &str,
        from: &str,
        lag: u64,
        version: u64,
    ) -> Result<()> {
        // Made at step `version − 1`; a checkpoint at step `s` fires when `every` divides `s + 1`.
        let checkpoint_soon = self.job.plan.ops.iter().any(|op| {
            matches!(&op.kind, OpKind::Checkpoint { role: r, .. } if r == role)
                && (version..version + lag)
                    .any(|s| op.every.is_none_or(|every| (s + 1).is_multiple_of(every)))
        });
        if !checkpoint_soon {
            return Ok(());
        }
        let weights = copied(&self.role_in_mut(role, from)?.weights()?);
        let history = self.history.entry(role.to_string()).or_default();
        history.push_back((version, weights));
        while history.len() as u64 > lag + 1 {
            history.pop_front();
        }
        Ok(())
    }

    /// The versions of `role`'s weights older than `current` that the trainer keeps, as a
    /// checkpoint's `lagged` tensors.
    pub(super) fn lagged_tensors(&self, role: &str, current: u64) -> Vec<(String, Tensor)> {
        self.history
            .get(role)
            .into_iter()
            .flatten()
            .filter(|(version, _)| *version < current)
            .flat_map(|(version, weights)| {
                weights
                    .iter()
                    .map(move |(n, t)| (format!("v{version}/{n}"), t.shallow_clone()))
            })
            .collect()
    }

    /// A resumed run at step `start`: each lagging generator gets the weights it had, and the
    /// versions that were on their way to it are sent again. `dirs`: each role's checkpoint.
    pub fn resume_lagged(
        &mut self,
        start: u64,
        dirs: &[(String, std::path::PathBuf)],
    ) -> Result<()> {
        for (role, from, to, lag, moves) in lagging(self.job.plan) {
            let (in_src, in_dst) = (self.in_instance(from), self.in_instance(to));
            if !in_src && !in_dst {
                continue;
            }
            let dir = dirs
                .iter()
                .find(|(r, _)| r == role)
                .map(|(_, d)| d.as_path())
                .ok_or_else(|| {
                    RunError::Plan(format!("no checkpoint of `{role}` to resume its generator"))
                })?;
            let versions = versions(dir, start)?;
            let version = |v: u64| {
                versions.get(&v).ok_or_else(|| {
                    RunError::Plan(format!(
                        "{}: no weights of version {v}, which `{role}`'s generator {lag} step(s) \
                         behind needs to resume",
                        dir.display()
                    ))
                })
            };
            if in_src {
                if !matches!(
                    self.role_in_mut(role, from)?.model,
                    super::roles::Model::Whole(_)
                ) {
                    return Err(RunError::Unsupported(format!(
                        "`--resume` of `{role}`'s generator {lag} step(s) behind a sharded \
                         training layout (only `dp` keeps the weights it sends)"
                    )));
                }
                // The versions in the channel when the run stopped (sent at steps
                // `start − lag ..< start`, never before step 0) that the generator takes before
                // this run ends (at step `j` it takes the one sent at `j − lag`).
                let last = start.min(self.end.saturating_sub(lag));
                for v in start.saturating_sub(lag) + 1..=last {
                    let sent = flat(version(v)?);
                    self.weight_sync(role, from, to, moves, Some(sent))?;
                }
                let kept = start.saturating_sub(lag)..=start;
                let history = kept
                    .map(|v| Ok((v, copied(version(v)?))))
                    .collect::<Result<VecDeque<_>>>()?;
                self.history.insert(role.to_string(), history);
            } else {
                let v = start.saturating_sub(lag);
                let weights = copied(version(v)?);
                self.role_in_mut(role, to)?
                    .load_weights(&weights, &dir.display().to_string())?;
                self.synced.insert(to.to_string(), v);
            }
        }
        Ok(())
    }
}

/// The versions of a role's weights a checkpoint of step `start` holds: the weights (version
/// `start`) and its `lagged` ones.
fn versions(dir: &Path, start: u64) -> Result<BTreeMap<u64, Vec<(String, Tensor)>>> {
    let saved = checkpoint::load(dir)?;
    let mut out: BTreeMap<u64, Vec<(String, Tensor)>> = BTreeMap::new();
    for (name, t) in saved.lagged {
        let parsed = name
            .strip_prefix('v')
            .and_then(|rest| rest.split_once('/'))
            .and_then(|(v, n)| Some((v.parse::<u64>().ok()?, n.to_string())));
        let Some((v, n)) = parsed else {
            return Err(RunError::Plan(format!(
                "{}: a lagged tensor named `{name}`",
                dir.display()
            )));
        };
        out.entry(v).or_default().push((n, t));
    }
    out.insert(start, saved.weights);
    Ok(out)
}

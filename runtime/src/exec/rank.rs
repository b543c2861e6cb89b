//! One rank's interpreter: runs its program's steps, in order, once per loop iteration.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use rlc_plan::model::{Carried, Input, Instance, Op, OpKind, RankProgram, ShardMove, Split, Step};
use rlc_plan::simulate::BarKind;
use tch::{Device, Kind, Tensor};

use super::error::{Result, RunError};
use super::job::Job;
use super::roles::{Model, RoleState};
use super::rollout::{self, Output, Sampling};
use super::values::{Rollout, Val};
use crate::collectives::{Communicator, ReduceOp};
use crate::data::Sampler;
use crate::parallel::reshard::{ReshardError, reshard};
use crate::parallel::{RankGroups, Tape};
use crate::report::trace::Span;

/// The values `op` computes with: its inputs and an update's loss captures.
fn data_inputs(op: &Op) -> Vec<u32> {
    let mut ids: Vec<u32> = op.inputs.iter().map(|i| i.value).collect();
    if let OpKind::Update { loss, .. } = &op.kind {
        ids.extend(loss.captures.iter().map(|i| i.value));
    }
    ids
}

/// Every value `op` reads: [`data_inputs`] and a log's fields.
fn reads(op: &Op) -> Vec<u32> {
    let mut ids = data_inputs(op);
    if let OpKind::Log { fields } = &op.kind {
        ids.extend(fields.iter().map(|f| f.value));
    }
    ids
}

/// What a rank reports to the run after a step (rank 0's counts for the whole job).
#[derive(Debug, Default, Clone)]
pub struct StepOutput {
    /// The `log` fields, in program order, then the seconds this rank spent in the step's ops
    /// of each kind (`time/generate`, …: `rlc_plan::simulate::TIME_KEY_PREFIX`).
    pub metrics: Vec<(String, f64)>,
    /// How many of `metrics`, from the first, are `log` fields (none on a rank without the
    /// `log` op).
    pub logged: usize,
    /// Response tokens generated in the step, over all data ranks.
    pub tokens: u64,
}

/// A rank's communicators in each instance it belongs to (instance id → its groups along every
/// axis of the instance's layout), and over all ranks where a weight sync re-shards. Built before
/// the [`Rank`]: the models borrow them.
#[derive(Default)]
pub struct Comms {
    pub groups: BTreeMap<String, RankGroups>,
    /// Rank `r` is global rank `r` (present when the plan re-shards weights).
    pub world: Option<Communicator>,
}

pub struct Rank<'j> {
    pub job: &'j Job<'j>,
    pub rank: u32,
    /// Where this rank's models and tensors live.
    pub device: Device,
    program: &'j RankProgram,
    /// The communicators of each instance this rank belongs to.
    pub(super) comms: &'j Comms,
    /// Each role's model in the instance that trains it (or, where this rank does not train it,
    /// in its first instance on this rank); instances with the same layout and ranks share it.
    pub roles: BTreeMap<String, RoleState<'j>>,
    /// The models of the role's other layouts on this rank, by instance id (a weight sync
    /// re-shards the trained weights into them).
    layouts: BTreeMap<String, RoleState<'j>>,
    pub(super) values: HashMap<u32, Val>,
    /// Values a `transfer` re-laid for another instance's data ranks: (value id, instance id) →
    /// this rank's rows in that instance.
    pub(super) relaid: HashMap<(u32, String), Val>,
    /// The current op's inputs cut to the rows its instance's data rank reads, where they were
    /// produced in a layout with fewer data ranks (value id → this rank's rows).
    views: HashMap<u32, Val>,
    /// The values the loop carries that this rank holds, with what the next step reads.
    carried: Vec<(&'j Carried, Tensor)>,
    /// A resumed run found the carried values in a checkpoint.
    pub(super) carried_restored: bool,
    samplers: BTreeMap<String, Sampler>,
    seed: u64,
    run_dir: &'j Path,
    /// Checkpoint ops of the current step: (op id, role).
    pending: Vec<(u32, String)>,
    /// The plan's kernels compiled by the JIT, by kernel index and derivative (`None`: the fused
    /// back end does not cover it, [`crate::kernels::eager`] runs it).
    pub(super) fused:
        std::cell::RefCell<HashMap<String, Option<std::rc::Rc<crate::kernels::fused::Fused>>>>,
    /// The same on a CUDA rank: compiled by NVRTC for its device.
    pub(super) fused_cuda: std::cell::RefCell<
        HashMap<String, Option<std::rc::Rc<crate::kernels::fused_cuda::FusedCuda>>>,
    >,
    /// With `--trace`: the run's clock origin and the ops this rank has run so far.
    pub(super) trace: Option<(Instant, Vec<Span>)>,
    /// The root file's folder (verifier commands' relative paths start there).
    pub(super) source_dir: PathBuf,
    /// The worker pool of each verifier this rank has called, started on its first call.
    pub(super) verifiers: BTreeMap<String, std::sync::Arc<crate::verify::Pool>>,
    /// Verify ops of this step whose pool is still scoring (see `verify.rs`).
    pub(super) in_flight: Vec<super::verify::InFlight>,
    /// Each verify op's failed samples on this rank in this step, counted over the data ranks
    /// at the end of the step.
    pub(super) verify_failures: Vec<(u32, u64)>,
    /// Score in the verify op itself instead of on a background thread (`RunOptions`).
    pub(super) verify_in_place: bool,
    /// The worker pool of each environment this rank has talked to, started on first use.
    pub(super) environments: BTreeMap<String, crate::verify::Pool>,
    /// This step's failed episodes of each environment (`environment/<name>/failures`), counted
    /// over the data ranks when the generate op ran.
    pub(super) env_failures: Vec<(String, f64)>,
    /// The step the run stops before (a weight sync with a `lag` sends none in its last `lag`
    /// steps: nothing would receive them).
    pub(super) end: u64,
    /// Weight syncs received into each instance (by id), and updates run of each role, on this
    /// rank: the version of the weights a rollout was sampled with.
    pub(super) synced: HashMap<String, u64>,
    updated: HashMap<String, u64>,
    /// On a rank that trains a role whose generator runs behind: the versions of its weights a
    /// coming checkpoint saves, with their version (`lagged.rs`).
    pub(super) history: BTreeMap<String, super::lagged::History>,
    /// The weight sync (op id) a partial rollout of this step received at its pause, which the
    /// op itself then skips (`partial.rs`).
    pub(super) received_early: Option<u32>,
}

impl<'j> Rank<'j> {
    pub fn new(
        job: &'j Job<'j>,
        rank: u32,
        device: Device,
        comms: &'j Comms,
        seed: u64,
        source_dir: &Path,
        run_dir: &'j Path,
    ) -> Result<Self> {
        let plan = job.plan;
        let program = plan
            .programs
            .iter()
            .find(|p| p.ranks.contains(rank))
            .ok_or_else(|| RunError::Plan(format!("rank {rank} has no program")))?;
        let mut roles = BTreeMap::new();
        let mut layouts = BTreeMap::new();
        let mine: Vec<&Instance> = plan
            .instances
            .iter()
            .filter(|i| i.ranks.contains(rank))
            .collect();
        // The instance that trains a role comes first.
        let trains = |i: &Instance| {
            plan.ops.iter().any(|op| {
                matches!(op.kind, OpKind::Update { .. }) && op.instance.as_deref() == Some(&i.id)
            })
        };
        let mut ordered: Vec<&Instance> = mine.iter().copied().filter(|i| trains(i)).collect();
        ordered.extend(mine.iter().copied().filter(|i| !trains(i)));
        let mut primary: BTreeMap<&str, &Instance> = BTreeMap::new();
        for instance in ordered {
            let role = instance.role.as_str();
            let shared = primary.get(role).is_some_and(|p| {
                p.ranks == instance.ranks && p.layout.same_shards(&instance.layout)
            });
            if shared {
                continue;
            }
            let optimizer_steps = job.steps * optimizer_steps_per_step(job, role);
            let groups = comms.groups.get(&instance.id).ok_or_else(|| {
                RunError::Plan(format!("rank {rank} has no groups for `{}`", instance.id))
            })?;
            let first = !primary.contains_key(role);
            let state = RoleState::new(
                plan,
                role,
                first,
                optimizer_steps,
                source_dir,
                device,
                groups,
            )?;
            if first {
                primary.insert(role, instance);
                roles.insert(role.to_string(), state);
            } else {
                layouts.insert(instance.id.clone(), state);
            }
        }
        let carried = plan
            .carried
            .iter()
            .filter(|c| c.ranks.contains(rank))
            .map(|c| Ok((c, carried_scalar(c, &c.init, device)?)))
            .collect::<Result<_>>()?;
        let samplers = job
            .sources
            .iter()
            .map(|(name, source)| (name.clone(), Sampler::new(source.clone(), seed)))
            .collect();
        Ok(Rank {
            job,
            rank,
            device,
            program,
            comms,
            roles,
            layouts,
            values: HashMap::new(),
            views: HashMap::new(),
            relaid: HashMap::new(),
            carried,
            carried_restored: false,
            samplers,
            seed,
            run_dir,
            pending: Vec::new(),
            fused: Default::default(),
            fused_cuda: Default::default(),
            trace: None,
            source_dir: source_dir.to_path_buf(),
            verifiers: BTreeMap::new(),
            in_flight: Vec::new(),
            verify_failures: Vec::new(),
            environments: BTreeMap::new(),
            env_failures: Vec::new(),
            verify_in_place: false,
            end: job.plan.steps.unwrap_or(u64::MAX),
            synced: HashMap::new(),
            updated: HashMap::new(),
            history: BTreeMap::new(),
            received_early: None,
        })
    }

    /// Runs loop iteration `step`.
    pub fn step(&mut self, step: u64) -> Result<StepOutput> {
        self.values.clear();
        self.relaid.clear();
        // Every read of a carried value in this step sees what the step started with.
        for (c, t) in &self.carried {
            self.values.insert(c.value, Val::Tensor(t.shallow_clone()));
        }
        let mut out = StepOutput::default();
        // Wall seconds of this rank's ops by kind (waits for other ranks inside collectives
        // included), reported as `time/<kind>` after the `log` fields.
        let mut op_seconds: BTreeMap<BarKind, f64> = BTreeMap::new();
        for s in &self.program.steps {
            // Offload and onload move state between device and host memory: on the CPU both
            // are the same memory.
            let Step::Run { op, .. } = s else { continue };
            let op = &self.job.plan.ops[*op as usize];
            if op
                .every
                .is_some_and(|every| !(step + 1).is_multiple_of(every))
            {
                continue;
            }
            if !self.in_flight.is_empty() {
                // A verifier's results this op reads: wait for them (counted as verify time).
                let waited = Instant::now();
                self.await_verify(Some(&reads(op)), step)?;
                *op_seconds.entry(BarKind::Other).or_default() += waited.elapsed().as_secs_f64();
            }
            let started = self.settled_now();
            self.run_op(op, step, &mut out)?;
            let ended = self.settled_now();
            *op_seconds.entry(BarKind::of(&op.kind)).or_default() +=
                ended.duration_since(started).as_secs_f64();
            // An op in flight gets its span when its results are awaited.
            if self.in_flight(op) {
                continue;
            }
            self.trace_span(op, step, started, ended);
        }
        if !self.in_flight.is_empty() {
            let waited = Instant::now();
            self.await_verify(None, step)?;
            *op_seconds.entry(BarKind::Other).or_default() += waited.elapsed().as_secs_f64();
        }
        // Each verifier's failed samples (`verifier/<name>/failures`), after the `log` fields.
        let failures = self.count_verify_failures()?;
        self.carry_over(step)?;
        out.metrics.extend(failures);
        out.metrics.extend(std::mem::take(&mut self.env_failures));
        out.metrics.extend(
            op_seconds
                .into_iter()
                .map(|(kind, seconds)| (kind.time_key(), seconds)),
        );
        Ok(out)
    }

    /// The clock once the work queued on this rank's device is done: CUDA runs asynchronously,
    /// so without the wait an op's time would be that of its launches (the wait costs the overlap
    /// of one op's launches with the previous op's kernels).
    fn settled_now(&self) -> Instant {
        if let Device::Cuda(ordinal) = self.device {
            tch::Cuda::synchronize(ordinal as i64);
        }
        Instant::now()
    }

    /// Moves each assigned carried value into its slot for the next step (an assignment inside
    /// `every` applies on its steps only; no assignment keeps the value).
    fn carry_over(&mut self, step: u64) -> Result<()> {
        for (c, slot) in &mut self.carried {
            if c.every
                .is_some_and(|every| !(step + 1).is_multiple_of(every))
            {
                continue;
            }
            if let Some(text) = &c.next_const {
                *slot = carried_scalar(c, text, self.device)?;
            } else if let Some(next) = c.next {
                match self.values.get(&next) {
                    Some(Val::Tensor(t)) if t.numel() == 1 => {
                        *slot = t.detach().reshape([]).to_kind(carried_kind(c));
                    }
                    // Its producer did not run this step (it sits in an `every` of its own).
                    None => {}
                    Some(_) => {
                        return Err(RunError::Plan(format!(
                            "the new value of `{}` is not a scalar",
                            c.name
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn carried_names(&self) -> impl Iterator<Item = &str> {
        self.carried.iter().map(|(c, _)| c.name.as_str())
    }

    /// The carried values this rank holds, by name, as numbers (saved with checkpoints).
    pub fn carried_values(&self) -> Vec<(String, serde_json::Value)> {
        self.carried
            .iter()
            .map(|(c, t)| {
                let v = if carried_kind(c) == Kind::Int64 {
                    serde_json::json!(t.int64_value(&[]))
                } else {
                    serde_json::json!(t.double_value(&[]))
                };
                (c.name.clone(), v)
            })
            .collect()
    }

    /// Restores the carried values a checkpoint saved (`carried` in its `state.json`).
    pub fn restore_carried(&mut self, saved: &serde_json::Value, what: &str) -> Result<()> {
        for (c, slot) in &mut self.carried {
            let text = match &saved[c.name.as_str()] {
                serde_json::Value::Number(n) => n.to_string(),
                _ => {
                    return Err(RunError::Plan(format!(
                        "{what}: the checkpoint does not hold the carried value `{}`",
                        c.name
                    )));
                }
            };
            *slot = carried_scalar(c, &text, self.device)?;
        }
        Ok(())
    }

    /// Records `op`'s span, from `started` to `ended`, when the run keeps a trace.
    pub(super) fn trace_span(&mut self, op: &Op, step: u64, started: Instant, ended: Instant) {
        if let Some((origin, spans)) = &mut self.trace {
            let micros = |t: Instant| t.duration_since(*origin).as_micros() as u64;
            spans.push(Span {
                rank: self.rank,
                step,
                op: op.id,
                label: op.label.clone(),
                start_us: micros(started),
                duration_us: micros(ended.max(started)) - micros(started),
            });
        }
    }

    fn run_op(&mut self, op: &Op, step: u64, out: &mut StepOutput) -> Result<()> {
        self.localize(op)?;
        match &op.kind {
            OpKind::Sample { form: Some(_), .. } => {
                let value = self.supervised(op, step)?;
                self.set(op, value);
            }
            OpKind::Sample { dataset, count, .. } => {
                let total = count.ok_or_else(|| {
                    RunError::Unsupported(format!("sampling an unknown count from `{dataset}`"))
                })? as i64;
                let (index, parts) = self.data_rank(op)?;
                let share = total / parts as i64;
                let first = index as i64 * share;
                let fsdp = self.fsdp_rank(op)?;
                let sampler = self
                    .samplers
                    .get_mut(dataset)
                    .ok_or_else(|| RunError::Plan(format!("no dataset `{dataset}`")))?;
                // Under FSDP the group's ranks decode together: each also draws the group's.
                let group = match fsdp {
                    Some((f, size)) => {
                        let group_first = first - f as i64 * share;
                        sampler.seek(step * total as u64 + group_first as u64);
                        Some((sampler.next((share * size as i64) as usize), group_first))
                    }
                    None => None,
                };
                // The stream position depends on the step alone: a resumed run draws the same.
                sampler.seek(step * total as u64 + first as u64);
                let samples = sampler.next(share as usize);
                let specials = self.job.sources[dataset].specials();
                self.set(
                    op,
                    Val::Prompts {
                        samples,
                        first,
                        dataset: dataset.clone(),
                        specials,
                        group,
                    },
                );
            }
            OpKind::Generate { role, env, .. } => {
                let settings = super::settings::generate(&op.kind, &op.label)?;
                let (samples, first, dataset, specials, group) = match self.input(op, 0)? {
                    Val::Prompts {
                        samples,
                        first,
                        dataset,
                        specials,
                        group,
                    } => (samples, *first, dataset.as_str(), *specials, group),
                    _ => return Err(RunError::Plan(format!("`{}` needs prompts", op.label))),
                };
                let (_, parts) = self.data_rank(op)?;
                let how = Sampling {
                    n: settings.n,
                    max_new: settings.max_new,
                    sampling: settings.sampling,
                    seed: stream_seed(self.seed, step, op.id),
                    specials,
                };
                let total = samples.len() as i64 * parts as i64;
                let version = self.weights_version(role, op);
                let pause = self.pause_of(op, settings.pause_at, step);
                let mut rollout = match (&pause, env) {
                    (Some(pause), None) if group.is_none() => {
                        let samples = samples.clone();
                        self.paused_rollout(op, pause, &samples, first, total, &how)?
                    }
                    (Some(_), _) => {
                        return Err(RunError::Unsupported(format!(
                            "`{}`: a partial rollout (`pause_at`) of a multi-turn or FSDP \
                             generation",
                            op.label
                        )));
                    }
                    (None, Some(env)) => {
                        // Cloned out of the borrowed input: the session borrows the rank.
                        let (samples, dataset) = (samples.clone(), dataset.to_string());
                        self.env_rollout(op, step, env, &samples, first, total, &how, &dataset)?
                    }
                    (None, None) => {
                        let state = self.role_in(role, op)?;
                        let model = state.decode();
                        match (&state.model, group) {
                            (Model::Fsdp(_), Some((group, group_first))) => {
                                // The group's rows, then this rank's: rows `first..` of the
                                // batch.
                                let all = rollout::rollout(
                                    model,
                                    group,
                                    *group_first,
                                    total,
                                    &how,
                                    self.device,
                                )?;
                                let start = (first - group_first) * how.n;
                                let count = samples.len() as i64 * how.n;
                                all.select(&Tensor::arange_start(
                                    start,
                                    start + count,
                                    (Kind::Int64, self.device),
                                ))
                            }
                            (Model::Fsdp(_), None) => {
                                return Err(RunError::Unsupported(format!(
                                    "`{}`: generating under FSDP from prompts sampled in another \
                                     layout",
                                    op.label
                                )));
                            }
                            _ => rollout::rollout(model, samples, first, total, &how, self.device)?,
                        }
                    }
                };
                // A partial rollout's tokens from the pause on come from the next version.
                let versions = rollout::versions(
                    rollout.rows(),
                    rollout.response_len,
                    version,
                    pause.map(|p| (p.at, version + 1)),
                    self.device,
                );
                rollout.fields.push((rollout::VERSION.into(), versions));
                let local = rollout
                    .field("mask")
                    .map_or(0.0, |m| m.sum(Kind::Double).double_value(&[]));
                let tokens = self.all_reduce(op, &Tensor::from(local), ReduceOp::Sum)?;
                out.tokens += tokens.double_value(&[]) as u64;
                self.set(op, Val::Rollout(rollout));
            }
            OpKind::Logprobs { role, .. }
            | OpKind::Values { role, .. }
            | OpKind::Score { role, .. } => {
                let rollout = self.rollout_input(op)?;
                let model = &self.role_in(role, op)?.model;
                let what = match &op.kind {
                    OpKind::Logprobs { .. } => Output::Logprobs,
                    OpKind::Values { .. } => Output::Values,
                    _ => Output::Scores,
                };
                let sampled = match &op.kind {
                    OpKind::Logprobs {
                        from_sampling: Some(_),
                        ..
                    } => rollout::sampled_logprobs(rollout),
                    _ => None,
                };
                let result = match sampled {
                    Some(logprobs) => logprobs,
                    None => tch::no_grad(|| rollout::output(model, what, rollout, &Tape::new()))?,
                };
                self.set(op, Val::Tensor(result));
            }
            OpKind::Kernel { .. } => {
                let result = self.kernel(op, step)?;
                self.set(op, Val::Tensor(result));
            }
            OpKind::Verify { .. } => self.verify(op, step)?,
            OpKind::Update { role, .. } => {
                self.update(op, step)?;
                *self.updated.entry(role.clone()).or_default() += 1;
            }
            OpKind::Log { fields } => {
                for field in fields {
                    let value = match self.values.get(&field.value) {
                        Some(Val::Tensor(t)) if t.numel() == 1 => t.double_value(&[]),
                        _ => {
                            return Err(RunError::Plan(format!(
                                "log field `{}` is not a number",
                                field.name
                            )));
                        }
                    };
                    out.metrics.push((field.name.clone(), value));
                }
                out.logged = out.metrics.len();
            }
            // Written after the step's metrics line (see `write_checkpoints`).
            OpKind::Checkpoint { role, .. } => self.pending.push((op.id, role.clone())),
            // Between two instances that share the model there is nothing to move.
            OpKind::WeightSync {
                role,
                from,
                to,
                moves,
                lag,
                ..
            } => {
                let resharding = super::resharding(self.job.plan, op);
                // A partial rollout received these weights at its pause.
                let received = self.received_early == Some(op.id);
                if received {
                    self.received_early = None;
                }
                if resharding && !received && self.syncs_now(from, *lag, step) {
                    self.take_weights(role, from, to, moves)?;
                }
                // Sent or not (the run's last steps send none), a resumed run may need it.
                if resharding && *lag > 0 && self.in_instance(from) {
                    self.remember_version(role, from, *lag, step + 1)?;
                }
            }
            OpKind::Transfer { .. } => self.transfer(op)?,
        }
        Ok(())
    }

    /// Runs a weight sync of `role` from instance `from` to `to` and, on the destination's
    /// ranks, counts the version received (what `rollout.version` reports).
    pub(super) fn take_weights(
        &mut self,
        role: &str,
        from: &str,
        to: &str,
        moves: &[ShardMove],
    ) -> Result<()> {
        self.weight_sync(role, from, to, moves, None)?;
        if !self.in_instance(from) {
            *self.synced.entry(to.to_string()).or_default() += 1;
        }
        Ok(())
    }

    /// Whether this rank takes part in a weight sync from `from` whose destination generates
    /// `lag` steps ahead, at `step`: the source sends every step but the last `lag`, the
    /// destination receives every step but the first `lag`, so that at step `k` it takes the
    /// weights step `k − lag` sent, in order (messages from one rank to another arrive in the
    /// order sent), and the staleness is exactly `lag` whatever runs faster.
    pub(super) fn syncs_now(&self, from: &str, lag: u64, step: u64) -> bool {
        if self.in_instance(from) {
            step.saturating_add(lag) < self.end
        } else {
            step >= lag
        }
    }

    pub(super) fn in_instance(&self, id: &str) -> bool {
        self.job
            .plan
            .instance(id)
            .is_some_and(|i| i.ranks.contains(self.rank))
    }

    /// How many updates the weights `op` generates with have seen: the weight syncs its
    /// instance received, or, where it reads the trained weights themselves, the role's updates.
    fn weights_version(&self, role: &str, op: &Op) -> u64 {
        let instance = op.instance.as_deref().unwrap_or_default();
        let synced_into = self.job.plan.ops.iter().any(|o| {
            matches!(&o.kind, OpKind::WeightSync { to, .. } if to == instance)
                && super::resharding(self.job.plan, o)
        });
        if synced_into {
            self.synced.get(instance).copied().unwrap_or(0)
        } else {
            self.updated.get(role).copied().unwrap_or(0)
        }
    }

    /// Whether this step asked for checkpoints (written by [`Rank::write_checkpoints`]).
    pub fn has_pending_checkpoints(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Writes the checkpoints step `step` asked for.
    pub fn write_checkpoints(&mut self, step: u64) -> Result<()> {
        for (op, role) in std::mem::take(&mut self.pending) {
            let op = &self.job.plan.ops[op as usize];
            self.checkpoint(op, &role, step)?;
        }
        Ok(())
    }

    pub fn role(&self, name: &str) -> Result<&RoleState<'j>> {
        self.roles
            .get(name)
            .ok_or_else(|| RunError::Plan(format!("rank {} does not hold `{name}`", self.rank)))
    }

    /// Role `name`'s model in the layout of `op`'s instance.
    pub(super) fn role_in(&self, name: &str, op: &Op) -> Result<&RoleState<'j>> {
        match op.instance.as_deref().and_then(|id| self.layouts.get(id)) {
            Some(state) => Ok(state),
            None => self.role(name),
        }
    }

    /// Role `role`'s model in instance `id` on this rank, mutably.
    pub(super) fn role_in_mut(&mut self, role: &str, id: &str) -> Result<&mut RoleState<'j>> {
        let rank = self.rank;
        match self.layouts.get_mut(id) {
            Some(state) => Ok(state),
            None => self
                .roles
                .get_mut(role)
                .ok_or_else(|| RunError::Plan(format!("rank {rank} does not hold `{role}`"))),
        }
    }

    /// Every model of `role` this rank holds besides the one [`Rank::role`] gives.
    pub(super) fn other_layouts_mut(
        &mut self,
        role: &str,
    ) -> impl Iterator<Item = &mut RoleState<'j>> {
        let plan = self.job.plan;
        self.layouts
            .iter_mut()
            .filter(move |(id, _)| plan.instance(id).is_some_and(|i| i.role == role))
            .map(|(_, state)| state)
    }

    /// Re-shards `role`'s weights from instance `from`'s layout into instance `to`'s as the plan's
    /// `moves` say (`parallel::reshard`); every rank of either instance takes part. The
    /// destination's parameters are overwritten in place.
    /// `sent`: the source's local shards to send instead of its model's (an earlier version).
    pub(super) fn weight_sync(
        &mut self,
        role: &str,
        from: &str,
        to: &str,
        moves: &[ShardMove],
        sent: Option<BTreeMap<String, Tensor>>,
    ) -> Result<()> {
        let plan = self.job.plan;
        let instance = |id: &str| {
            plan.instance(id)
                .ok_or_else(|| RunError::Plan(format!("no instance `{id}`")))
        };
        let (src, dst) = (instance(from)?, instance(to)?);
        let (in_src, in_dst) = (src.ranks.contains(self.rank), dst.ranks.contains(self.rank));
        if !in_src && !in_dst {
            return Ok(());
        }
        let world = self.comms.world.as_ref().ok_or_else(|| {
            RunError::Plan(format!(
                "rank {} has no communicator for weight syncs",
                self.rank
            ))
        })?;
        let what = format!("the weight sync of `{role}` from `{from}` to `{to}`");
        let either = if in_src { from } else { to };
        let (shapes, config) = {
            let state = self.role_in_mut(role, either)?;
            (state.shapes().clone(), state.config().clone())
        };
        let local = if let (true, Some(sent)) = (in_src, sent) {
            sent
        } else if in_src {
            self.role_in_mut(role, from)?.local_shards()
        } else {
            BTreeMap::new()
        };
        let (shards, _) =
            reshard(src, dst, moves, &shapes, &config, world, &local).map_err(|e| match e {
                ReshardError::Collective(e) => RunError::Collective(e),
                other => RunError::Parallel(format!("{what}: {other}")),
            })?;
        drop(local);
        if in_dst {
            self.role_in_mut(role, to)?
                .set_local_shards(&shards, &what)?;
        }
        Ok(())
    }

    /// Cuts `op`'s inputs produced in a layout with fewer data ranks than `op`'s instance to the
    /// rows this rank's data rank reads (the plan moves nothing there: this rank already holds
    /// them).
    fn localize(&mut self, op: &Op) -> Result<()> {
        self.views.clear();
        let plan = self.job.plan;
        let Some(dst) = op.instance.as_deref().and_then(|id| plan.instance(id)) else {
            return Ok(());
        };
        for id in data_inputs(op) {
            if let Some(relaid) = self.relaid.get(&(id, dst.id.clone())) {
                self.views.insert(id, relaid.shallow_clone());
                continue;
            }
            let Some(value) = plan.values.get(id as usize) else {
                continue;
            };
            if value.at == dst.id
                || value.producer.is_none()
                || !matches!(value.split, Split::Rows { .. })
                || self.views.contains_key(&id)
            {
                continue;
            }
            let Some(src) = plan.instance(&value.at) else {
                continue;
            };
            let data_index = |i: &Instance| {
                i.data_rank_of(self.rank)
                    .map(|index| (index, i.layout.data_ranks()))
            };
            let (Some((i_s, d_s)), Some((i_d, d_d))) = (data_index(src), data_index(dst)) else {
                continue;
            };
            if d_s == d_d && i_s == i_d {
                continue;
            }
            let Some(val) = self.values.get(&id) else {
                continue;
            };
            let rows = match val {
                Val::Tensor(t) if t.dim() > 0 => t.size()[0],
                Val::Rollout(r) => r.rows(),
                _ => continue,
            };
            let total = rows * i64::from(d_s);
            let need = total / i64::from(d_d);
            let start = i64::from(i_d) * need - i64::from(i_s) * rows;
            if total % i64::from(d_d) != 0 || start < 0 || start + need > rows {
                return Err(RunError::Unsupported(format!(
                    "`{}` reads `{}` on rank {} in rows that rank does not hold (from `{}` with {d_s} \
                     data ranks to `{}` with {d_d})",
                    op.label, value.name, self.rank, src.id, dst.id
                )));
            }
            let cut = match val {
                Val::Tensor(t) => Val::Tensor(t.narrow(0, start, need)),
                Val::Rollout(r) => Val::Rollout(r.select(&Tensor::arange_start(
                    start,
                    start + need,
                    (Kind::Int64, self.device),
                ))),
                _ => continue,
            };
            self.views.insert(id, cut);
        }
        Ok(())
    }

    /// This rank's data-rank index in `op`'s instance, and how many data ranks it has.
    pub fn data_rank(&self, op: &Op) -> Result<(u32, u32)> {
        let id = op
            .instance
            .as_deref()
            .ok_or_else(|| RunError::Plan(format!("`{}` has no instance", op.label)))?;
        let instance = self
            .job
            .plan
            .instance(id)
            .ok_or_else(|| RunError::Plan(format!("no instance `{id}`")))?;
        let index = instance
            .data_rank_of(self.rank)
            .ok_or_else(|| RunError::Plan(format!("rank {} is not in `{id}`", self.rank)))?;
        Ok((index, instance.layout.data_ranks()))
    }

    /// This rank's FSDP coordinate in `op`'s instance and the FSDP degree, under an FSDP layout.
    fn fsdp_rank(&self, op: &Op) -> Result<Option<(u32, u32)>> {
        let Some(id) = op.instance.as_deref() else {
            return Ok(None);
        };
        let Some(instance) = self.job.plan.instance(id) else {
            return Ok(None);
        };
        if instance.layout.fsdp <= 1 {
            return Ok(None);
        }
        let (_, _, f, _) = instance
            .coord_of(self.rank)
            .ok_or_else(|| RunError::Plan(format!("rank {} is not in `{id}`", self.rank)))?;
        Ok(Some((f, instance.layout.fsdp)))
    }

    /// The communicator over the data ranks of `op`'s instance (its `dp` and `fsdp` axes), in
    /// data-rank order: the ranks that hold other rows of a batch.
    pub fn comm(&self, op: &Op) -> Result<&'j Communicator> {
        let id = op.instance.as_deref().unwrap_or_default();
        self.comms
            .groups
            .get(id)
            .map(|groups| &groups.data)
            .ok_or_else(|| RunError::Plan(format!("rank {} has no group for `{id}`", self.rank)))
    }

    pub fn all_reduce(&self, op: &Op, t: &Tensor, how: ReduceOp) -> Result<Tensor> {
        let comm = self.comm(op)?;
        if comm.world_size() == 1 {
            return Ok(t.shallow_clone());
        }
        Ok(comm.all_reduce(t, how)?)
    }

    /// Every data rank's rows of `t`, in data-rank order: the whole batch.
    pub fn all_rows(&self, op: &Op, t: &Tensor) -> Result<Tensor> {
        let comm = self.comm(op)?;
        if comm.world_size() == 1 || t.dim() == 0 {
            return Ok(t.shallow_clone());
        }
        Ok(Tensor::cat(&comm.all_gather(t)?, 0))
    }

    fn set(&mut self, op: &Op, value: Val) {
        if let Some(&id) = op.outputs.first() {
            self.values.insert(id, value);
        }
    }

    fn input(&self, op: &Op, i: usize) -> Result<&Val> {
        let input = op
            .inputs
            .get(i)
            .ok_or_else(|| RunError::Plan(format!("`{}` has no input {i}", op.label)))?;
        self.value(op, input.value)
    }

    pub fn value(&self, op: &Op, id: u32) -> Result<&Val> {
        if let Some(view) = self.views.get(&id) {
            return Ok(view);
        }
        self.values.get(&id).ok_or_else(|| {
            RunError::Plan(format!(
                "`{}` reads value {id}, which no earlier op of rank {} produced",
                op.label, self.rank
            ))
        })
    }

    pub fn rollout_input(&self, op: &Op) -> Result<&Rollout> {
        match self.input(op, 0)? {
            Val::Rollout(r) => Ok(r),
            _ => Err(RunError::Plan(format!("`{}` needs a rollout", op.label))),
        }
    }

    /// The tensor an input names: a value, or one field of a rollout.
    pub fn tensor(&self, op: &Op, input: &Input) -> Result<Tensor> {
        match (self.value(op, input.value)?, &input.field) {
            (Val::Tensor(t), None) => Ok(t.shallow_clone()),
            (Val::Rollout(r), Some(field)) => r
                .field(field)
                .map(Tensor::shallow_clone)
                .ok_or_else(|| RunError::Plan(format!("a rollout has no field `{field}`"))),
            _ => Err(RunError::Plan(format!(
                "`{}`: input `{}` is not a tensor",
                op.label, input.name
            ))),
        }
    }

    pub fn samplers(&self) -> &BTreeMap<String, Sampler> {
        &self.samplers
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn run_dir(&self) -> &Path {
        self.run_dir
    }
}

fn carried_kind(c: &Carried) -> Kind {
    if c.ty.dtype == "i64" {
        Kind::Int64
    } else {
        Kind::Float
    }
}

/// A carried value's scalar from a constant's text (`0.1`, `3`, `1e-3`).
fn carried_scalar(c: &Carried, text: &str, device: Device) -> Result<Tensor> {
    let bad = || {
        RunError::Plan(format!(
            "`{text}` is not a value of `{}` ({})",
            c.name, c.ty
        ))
    };
    let t = if carried_kind(c) == Kind::Int64 {
        let v: f64 = text.parse().map_err(|_| bad())?;
        if v.fract() != 0.0 || v.abs() > 9e15 {
            return Err(bad());
        }
        Tensor::from(v as i64)
    } else {
        Tensor::from(text.parse::<f64>().map_err(|_| bad())? as f32)
    };
    Ok(t.to_device(device))
}

/// Optimizer steps one loop iteration takes for `role` (0 when it does not train).
fn optimizer_steps_per_step(job: &Job, role: &str) -> u64 {
    job.plan
        .ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Update {
                role: r,
                optimizer_steps,
                ..
            } if r == role => Some(optimizer_steps.unwrap_or(1)),
            _ => None,
        })
        .sum()
}

/// The seed of op `op`'s random stream in step `step`: a pure function of the run's seed,
/// so a resumed run draws what an uninterrupted one does.
fn stream_seed(seed: u64, step: u64, op: u32) -> u64 {
    let mut r = crate::rng::Rng::new(seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    r.next_u64() ^ u64::from(op).wrapping_mul(0xD1B5_4A32_D192_ED03)
}

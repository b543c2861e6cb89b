//! The duration of every op and every offload/onload step of a plan.

use super::work::{self, PhaseWork, RoleShape, Sequences};
use super::{CostParams, Hardware, Placed, collective};
use crate::model::{
    Axis, Dim, EnvTurns, Instance, Op, OpKind, Part, Phase, Plan, Step, TensorType, ValueType,
};

/// Seconds per op of a plan (indexed by op id), and what the figures could not see.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanCosts {
    pub op_seconds: Vec<f64>,
    /// A batch, prompt length or value size the program does not fix was counted as 0: the
    /// durations are lower bounds.
    pub lower_bound: bool,
    /// Bytes/s of the host link, for offload and onload steps.
    pub host_bandwidth: f64,
}

/// The step's sequences: the first `generate`'s prompt length, its response (see
/// [`response_tokens`]) and its samples per prompt; whether the plan leaves one unknown.
fn sequence(plan: &Plan) -> (Sequences, bool) {
    for op in &plan.ops {
        if let OpKind::Generate {
            prompt_len,
            max_new,
            n,
            env,
            ..
        } = &op.kind
        {
            let unknown = prompt_len.is_none() || max_new.is_none();
            let [prompt_len, max_new] = [prompt_len, max_new].map(|v| v.unwrap_or(0) as f64);
            return (generated(prompt_len, max_new, *n, env), unknown);
        }
    }
    let none = Sequences {
        prompt: 0.0,
        response: 0.0,
        group: 1.0,
    };
    (none, true)
}

/// The sequences of a `generate` op of prompts of `prompt_len` tokens, `max_new` per turn and
/// `n` samples per prompt (adjacent rows).
fn generated(prompt_len: f64, max_new: f64, n: Option<u64>, env: &Option<EnvTurns>) -> Sequences {
    Sequences {
        prompt: prompt_len,
        response: response_tokens(max_new, env),
        group: n.unwrap_or(1).max(1) as f64,
    }
}

/// The response positions of a `generate` op: `max_new`, or with an environment every turn's
/// `max_new` and an observation of `max_obs` between two turns. The cost model decodes them
/// all (observations are prefilled in practice: an upper bound).
fn response_tokens(max_new: f64, env: &Option<EnvTurns>) -> f64 {
    match env {
        None => max_new,
        Some(e) => {
            let turns = e.max_turns as f64;
            turns * max_new + (turns - 1.0).max(0.0) * e.max_obs as f64
        }
    }
}

/// Where a global rank is: (cluster index, node).
fn node_of(plan: &Plan, rank: u32) -> (usize, u64) {
    for (i, c) in plan.clusters.iter().enumerate() {
        if c.ranks.contains(rank) {
            let first = c.ranks.nth(0).unwrap_or(0);
            return (i, u64::from(rank - first) / c.devices_per_node.max(1));
        }
    }
    (usize::MAX, 0)
}

/// Bytes of the weights (and of the training state) one device of `instance` holds.
pub fn instance_state(instance: &Instance) -> (u64, u64) {
    let weights = match instance.memory.get(&Phase::Train) {
        Some(t) => t.weights,
        None => instance
            .memory
            .values()
            .map(|m| m.weights)
            .max()
            .unwrap_or(0),
    };
    let training = instance
        .memory
        .get(&Phase::Train)
        .map_or(0, |t| t.gradients + t.optimizer_state + t.master_weights);
    (weights, training)
}

impl PlanCosts {
    /// Costs every op of `plan`. Errors when a cluster does not carry its device's speed.
    pub fn new(plan: &Plan, params: &CostParams) -> Result<PlanCosts, String> {
        let mut hardware = Vec::new();
        for c in &plan.clusters {
            hardware.push(Hardware::of(c).ok_or_else(|| {
                format!(
                    "the plan's cluster `{}` carries no device FLOP/s or memory bandwidth \
                     (a plan file from an older `rlc build`): build it again",
                    c.name
                )
            })?);
        }
        let (seq, mut lower_bound) = sequence(plan);
        let placed = |inst: &Instance| -> Option<Placed> {
            let ci = plan.clusters.iter().position(|c| c.name == inst.cluster)?;
            Some(Placed::instance(hardware[ci], &plan.clusters[ci], inst))
        };
        let link_between = |a: u32, b: u32| {
            let (ca, na) = node_of(plan, a);
            let (cb, nb) = node_of(plan, b);
            let hw = hardware.get(ca.min(cb)).copied();
            hw.map(|hw| hw.link(ca != cb || na != nb, params))
        };
        let mut op_seconds = Vec::with_capacity(plan.ops.len());
        for op in &plan.ops {
            let instance = op.instance.as_deref().and_then(|id| plan.instance(id));
            let mut unknown = false;
            let mut count = |v: Option<u64>| {
                unknown |= v.is_none();
                v.unwrap_or(0) as f64
            };
            let role_work = match &op.kind {
                OpKind::Generate {
                    batch,
                    n,
                    prompt_len,
                    max_new,
                    env,
                    ..
                } => Some(PhaseWork::Generate {
                    batch: count(*batch),
                    seq: generated(count(*prompt_len), count(*max_new), *n, env),
                }),
                // The sampler's log-probs: no forward pass, only the rollout's field.
                OpKind::Logprobs {
                    from_sampling: Some(_),
                    ..
                } => None,
                OpKind::Logprobs { batch, .. }
                | OpKind::Values { batch, .. }
                | OpKind::Score { batch, .. } => Some(PhaseWork::Forward {
                    batch: count(*batch),
                    seq,
                }),
                OpKind::Update {
                    batch,
                    epochs,
                    minibatch,
                    ..
                } => {
                    let batch = count(*batch);
                    Some(PhaseWork::Update {
                        batch,
                        seq,
                        minibatch: minibatch.map_or(batch, |m| m as f64),
                        epochs: *epochs as f64,
                    })
                }
                _ => None,
            };
            let seconds = match (&role_work, op.kind.role(), instance) {
                (Some(w), Some(role), Some(inst)) => {
                    let shape = plan.role(role).and_then(RoleShape::of);
                    match (shape, placed(inst)) {
                        (Some(shape), Some(p)) => work::seconds(params, &shape, &p, w),
                        _ => {
                            unknown = true;
                            0.0
                        }
                    }
                }
                _ => other_op(
                    plan,
                    op,
                    instance,
                    params,
                    &placed,
                    &link_between,
                    &mut unknown,
                ),
            };
            lower_bound |= unknown;
            op_seconds.push(seconds + params.op_overhead);
        }
        Ok(PlanCosts {
            op_seconds,
            lower_bound,
            host_bandwidth: params.host_bandwidth,
        })
    }

    /// Seconds of one step of a rank's program: an op's, or moving state to or from the host.
    pub fn step_seconds(&self, plan: &Plan, step: &Step) -> f64 {
        match step {
            Step::Run { op, .. } => self.op_seconds.get(*op as usize).copied().unwrap_or(0.0),
            Step::Offload { instance, part, .. } | Step::Onload { instance, part, .. } => {
                let (weights, training) = plan.instance(instance).map_or((0, 0), instance_state);
                let bytes = match part {
                    Part::Weights => weights,
                    Part::TrainingState => training,
                    Part::All => weights + training,
                };
                bytes as f64 / self.host_bandwidth
            }
        }
    }
}

/// Host time of one request to a verifier (a JSON line each way, a process's wake-up): the
/// cost model's flat estimate of a `verify` op, which cannot know the user's program.
pub const VERIFY_REQUEST_SECONDS: f64 = 2e-3;
/// Host time a verifier spends on one sample of a request.
pub const VERIFY_SAMPLE_SECONDS: f64 = 1e-3;

/// Kernels, transfers, weight syncs, checkpoints, sampling, logging and verifiers.
fn other_op(
    plan: &Plan,
    op: &Op,
    instance: Option<&Instance>,
    params: &CostParams,
    placed: &dyn Fn(&Instance) -> Option<Placed>,
    link_between: &dyn Fn(u32, u32) -> Option<super::Link>,
    unknown: &mut bool,
) -> f64 {
    // Bytes of a value (or one field of a record); a prompt-length symbol `P` takes the
    // generation's prompt length.
    let prompt_len = sequence(plan).0.prompt as u64;
    let tensor_bytes = |t: &TensorType| -> Option<u64> {
        let shape = t
            .shape
            .iter()
            .map(|d| match d {
                Dim::Sym(s) if s == "P" && prompt_len > 0 => Some(Dim::Size(prompt_len)),
                Dim::Sym(_) => None,
                Dim::Size(n) => Some(Dim::Size(*n)),
            })
            .collect::<Option<Vec<Dim>>>()?;
        TensorType {
            dtype: t.dtype.clone(),
            shape,
        }
        .bytes()
    };
    let mut value_bytes = |id: u32, field: Option<&str>| -> f64 {
        let bytes = match plan.values.get(id as usize).map(|v| &v.ty) {
            Some(ValueType::Record { fields, .. }) => match field {
                Some(f) => fields.get(f).and_then(tensor_bytes),
                None => fields.values().map(tensor_bytes).sum(),
            },
            Some(ValueType::Tensor(t)) => tensor_bytes(t),
            // Prompts and other values the runtime handles by name are small.
            Some(ValueType::Opaque { .. }) => Some(0),
            None => None,
        };
        match bytes {
            Some(b) => b as f64,
            None => {
                *unknown = true;
                0.0
            }
        }
    };
    match &op.kind {
        OpKind::Kernel {
            batch_reduction, ..
        } => {
            let Some(p) = instance.and_then(placed) else {
                return 0.0;
            };
            let touched: f64 = op
                .inputs
                .iter()
                .map(|i| (i.value, i.field.as_deref()))
                .chain(op.outputs.iter().map(|&o| (o, None)))
                .map(|(v, f)| value_bytes(v, f))
                .sum();
            let ranks = f64::from(p.layout.data_ranks().max(1));
            let mut t = touched / ranks / (p.hw.memory_bandwidth * params.bandwidth_efficiency);
            if *batch_reduction {
                t += collective::all_reduce(8.0, p.layout.data_ranks(), p.link(Axis::Dp, params));
            }
            t
        }
        OpKind::Transfer { value, sends, .. } => {
            let total = value_bytes(*value, None);
            let mut per_source: std::collections::BTreeMap<u32, f64> = Default::default();
            for s in sends {
                let part = total * (s.rows.end - s.rows.start) as f64 / s.rows.of.max(1) as f64;
                let t = per_source.entry(s.from).or_default();
                for to in s.to.iter().filter(|&r| r != s.from) {
                    if let Some(link) = link_between(s.from, to) {
                        *t += collective::send(part, link);
                    }
                }
            }
            per_source.values().copied().fold(0.0, f64::max)
        }
        OpKind::WeightSync {
            role,
            from,
            to,
            moves,
            ..
        } => {
            // Two instances of one layout on the same ranks share one model: nothing moves.
            if plan.share_model(from, to) {
                return 0.0;
            }
            let Some(shape) = plan.role(role).and_then(RoleShape::of) else {
                *unknown = true;
                return 0.0;
            };
            let frac = |s: &crate::model::Slice| (s.end - s.start) as f64 / s.of.max(1) as f64;
            let mut per_source: std::collections::BTreeMap<u32, f64> = Default::default();
            for m in moves {
                let piece = shape.weight_bytes() * frac(&m.layers) * frac(&m.tp) * frac(&m.rows);
                let t = per_source.entry(m.from).or_default();
                for to in m.to.iter() {
                    let (ci, _) = node_of(plan, m.from);
                    if to == m.from {
                        // Stays on the device: a copy in memory at most.
                        if let Some(c) = plan.clusters.get(ci) {
                            *t += piece / (c.memory_bandwidth * params.bandwidth_efficiency);
                        }
                    } else if let Some(link) = link_between(m.from, to) {
                        *t += collective::send(piece, link);
                    }
                }
            }
            per_source.values().copied().fold(0.0, f64::max)
        }
        OpKind::Checkpoint { instance: id, .. } => {
            let (weights, training) = plan.instance(id).map_or((0, 0), instance_state);
            (weights + training) as f64 / params.checkpoint_bandwidth
        }
        // Each data rank sends its rows in requests of `batch` samples, `workers` at a time:
        // rounds × (a request's overhead + its samples), a flat host-time estimate.
        OpKind::Verify { verifier, .. } => {
            let Some(v) = plan.verifiers.iter().find(|v| &v.name == verifier) else {
                return 0.0;
            };
            let rows = op
                .outputs
                .first()
                .and_then(|&o| plan.values.get(o as usize))
                .and_then(|val| match &val.ty {
                    ValueType::Tensor(t) => match t.shape.first() {
                        Some(Dim::Size(n)) => Some(*n),
                        _ => None,
                    },
                    _ => None,
                })
                .unwrap_or(1);
            let ranks = instance
                .and_then(placed)
                .map_or(1, |p| u64::from(p.layout.data_ranks().max(1)));
            let per_rank = rows.div_ceil(ranks);
            let batch = u64::from(v.batch.max(1));
            let requests = per_rank.div_ceil(batch);
            let rounds = requests.div_ceil(u64::from(v.workers.max(1)));
            rounds as f64
                * (VERIFY_REQUEST_SECONDS + batch.min(per_rank) as f64 * VERIFY_SAMPLE_SECONDS)
        }
        _ => 0.0,
    }
}

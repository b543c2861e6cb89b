//! What the search places: **units** (one instance each — a role, or one phase of it), the
//! **calls** each runs per step, and which units the program leaves to the planner.
//!
//! - `place X on C[a..b] auto`: a unit with a fixed device range; the layout is searched.
//! - `place auto [on C]`: every role phase the pipeline runs and no `place` covers becomes a
//!   free unit: its devices (a pool of the cluster, maybe shared with others) and layout are
//!   searched. As [`Program::placement_for`] does, a trainable role's log-probs and values run
//!   on its training unit.
//! - every other placement is a manual unit: its layout is the program's.

use crate::cost::{PhaseWork, RoleShape, Sequences};
use crate::lower::plan_layout;
use crate::model::Layout;
use rlc_check::checks::memory;
use rlc_check::program::{self as prog, Op, Phase, Program, RoleKind};

/// How a unit's devices and layout are decided.
#[derive(Clone, Debug, PartialEq)]
pub enum UnitKind {
    /// Written by hand: the placement's own layout.
    Manual { placement: usize, layout: Layout },
    /// `place … auto`: devices fixed, layout searched.
    AutoLayout { placement: usize },
    /// `place auto`: devices and layout searched.
    Free,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    /// `policy.train`, `reference`: the instance id it lowers to.
    pub name: String,
    pub model: usize,
    /// The placement's phase (`None`: the whole role).
    pub phase: Option<Phase>,
    pub kind: UnitKind,
    pub cluster: usize,
    /// Devices of the cluster, for manual and auto-layout units.
    pub devices: std::ops::Range<u64>,
    pub shape: RoleShape,
}

/// One role call of the pipeline's step.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub unit: usize,
    /// Index into the pipeline's calls (for the memory estimate).
    pub call: usize,
    pub phase: Phase,
    /// Generation 0, forward passes 1, updates 2: the search schedules a call after every
    /// earlier call of an earlier stage (the step's data flow in RLHF).
    pub stage: u8,
    pub work: PhaseWork,
}

/// Everything the search needs of the program.
#[derive(Clone, Debug)]
pub struct Job {
    pub units: Vec<Unit>,
    pub calls: Vec<Call>,
    /// The cluster free units share.
    pub free_cluster: Option<usize>,
}

impl Job {
    pub fn has_auto(&self) -> bool {
        self.units
            .iter()
            .any(|u| !matches!(u.kind, UnitKind::Manual { .. }))
    }
}

fn shape(model: &prog::Model) -> Option<RoleShape> {
    let arch = model.arch.as_ref()?;
    Some(RoleShape {
        params: memory::role_parameters(model.kind, arch) as f64,
        layers: arch.layers.max(1) as f64,
        hidden: arch.hidden as f64,
        heads: arch.heads.max(1) as f64,
        kv_heads: arch.kv_heads.max(1) as f64,
        bytes: model.precision.bytes() as f64,
        trainable: !model.frozen && model.optimizer.is_some(),
        recompute: model.recompute,
        reads_tokens: model.kind != RoleKind::RewardModel,
    })
}

/// The cluster `place auto on C` names (the first when it names none).
fn free_cluster(program: &Program) -> Option<usize> {
    program.auto_place?;
    program
        .auto_cluster
        .or((!program.clusters.is_empty()).then_some(0))
}

fn count(v: Option<prog::Sourced<i64>>) -> f64 {
    v.map_or(0.0, |s| s.value.max(0) as f64)
}

/// Reads the units and calls of `program`. `Err` names a role the planner cannot cost (no
/// architecture) or a phase no placement and no `place auto` covers.
pub fn job(program: &Program) -> Result<Job, String> {
    let Some(pipeline) = &program.pipeline else {
        return Err("the program has no `pipeline`".into());
    };
    let free = free_cluster(program);
    // Samples per prompt of the pipeline's generation: the rows that share a prompt.
    let group = pipeline
        .calls
        .iter()
        .find_map(|c| c.sampling.as_ref())
        .map_or(1.0, |s| s.n.value.max(1) as f64);
    let mut units: Vec<Unit> = Vec::new();
    let mut calls = Vec::new();
    for (index, call) in pipeline.calls.iter().enumerate() {
        let model = &program.models[call.model];
        let Some(shape) = shape(model) else {
            return Err(format!("`{}` has no architecture to cost", model.name));
        };
        let phase = call.op.phase();
        let (name, unit_phase, kind, cluster, devices) =
            match program.placement_index_for(call.model, phase) {
                Some(at) => {
                    let p = &program.placements[at];
                    let name = match p.phase {
                        Some(ph) => format!("{}.{}", model.name, ph.as_str()),
                        None => model.name.clone(),
                    };
                    let kind = if p.auto {
                        UnitKind::AutoLayout { placement: at }
                    } else {
                        UnitKind::Manual {
                            placement: at,
                            layout: plan_layout(&p.layout),
                        }
                    };
                    (name, p.phase, kind, p.cluster, p.devices.clone())
                }
                None => {
                    let Some(cluster) = free else {
                        return Err(format!(
                            "`{}.{}` has no placement",
                            model.name,
                            phase.as_str()
                        ));
                    };
                    // A trainable role's forward passes run on its training unit.
                    let trains = pipeline
                        .calls
                        .iter()
                        .any(|c| c.model == call.model && c.op == Op::Update);
                    let unit_phase = match phase {
                        Phase::Logprobs | Phase::Values if trains => Some(Phase::Train),
                        Phase::Train | Phase::Generate => Some(phase),
                        _ => None,
                    };
                    let name = match unit_phase {
                        Some(ph) => format!("{}.{}", model.name, ph.as_str()),
                        None => model.name.clone(),
                    };
                    (name, unit_phase, UnitKind::Free, cluster, 0..0)
                }
            };
        let unit = match units.iter().position(|u| u.name == name) {
            Some(u) => u,
            None => {
                units.push(Unit {
                    name,
                    model: call.model,
                    phase: unit_phase,
                    kind,
                    cluster,
                    devices,
                    shape,
                });
                units.len() - 1
            }
        };
        let seq = Sequences {
            prompt: count(call.prompt_len),
            response: count(call.response_len),
            group,
        };
        let batch = count(call.batch);
        let (stage, work) = match call.op {
            Op::Generate => (
                0,
                PhaseWork::Generate {
                    batch,
                    seq: Sequences {
                        // Every response position, a multi-turn rollout's turns and
                        // observations included (the generating call's `response_len`).
                        response: match &call.sampling {
                            Some(s) if s.env.is_none() => s.max_new.value.max(0) as f64,
                            _ => count(call.response_len),
                        },
                        ..seq
                    },
                },
            ),
            Op::Update => (
                2,
                PhaseWork::Update {
                    batch,
                    seq,
                    minibatch: call.minibatch.map_or(batch, |m| m.value.max(1) as f64),
                    epochs: call.epochs.map_or(1.0, |e| e.value.max(1) as f64),
                },
            ),
            Op::Logprobs | Op::Values | Op::Score => (1, PhaseWork::Forward { batch, seq }),
        };
        calls.push(Call {
            unit,
            call: index,
            phase,
            stage,
            work,
        });
    }
    Ok(Job {
        units,
        calls,
        free_cluster: free,
    })
}

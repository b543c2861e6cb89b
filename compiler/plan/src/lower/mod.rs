//! Lowering: a checked program → a [`Plan`].
//!
//! The checker's [`Program`] gives hardware, roles, placements and the role calls; the pipeline's
//! data flow (which value feeds which call, the kernels, `log`, `checkpoint`, `every`) is read from
//! the root module's `pipeline` item, with the checker's type table for dtypes and shapes.
//!
//! Placement rules (documented in `docs/plan.md`):
//! - a role operation runs on the instance [`Program::placement_for`] gives it;
//! - kernels and `log` run on the *driver*: the training instance of the pipeline's first
//!   `update` (else the instance of its first role call);
//! - `sample` runs on the instance of its first consumer;
//! - a value read with another layout than it was produced with goes through a transfer op.
//!
//! The passes, each a module with one job:
//! - [`instances`]: clusters, the instances the calls run on, the driver;
//! - [`dataflow`]: the pipeline's statements in order → values, ops and edges (calls, kernels,
//!   `log`, `checkpoint`, `every`, carried values);
//! - [`transfers`]: where the dataflow reads a value on another instance or layout, the transfer
//!   op that brings it (created as the walk meets the read, so ids follow the text);
//! - [`syncs`]: after the walk, the weight syncs from each training instance to the role's other
//!   instances, checkpoints after their updates, the ops renumbered dependencies first, levels;
//! - [`schedule`]: the finished graph → each rank's program (the order of its ops, its memory).

mod dataflow;
mod instances;
mod kernels;
mod reuse;
pub use reuse::forward_logprobs;
mod schedule;
mod syncs;
mod transfers;

use crate::model::*;
use crate::reshard::{block, lcm};
use rlc_check::Checked;
use rlc_check::body::Bodies;
use rlc_check::checks::memory;
use rlc_check::dataflow::{Carry, Dataflow, Node, NodeKind, Stmt};
use rlc_check::program::{self as prog, Phase, Program};
use rlc_check::types::Type;
use rlc_diagnostics::FileId;
use std::collections::{BTreeMap, BTreeSet};

/// Why a checked program could not be lowered.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LowerError {
    pub message: String,
    /// For a computation the kernel IR cannot express (E0314): the file and span of the call
    /// or closure, so that it is reported as a diagnostic.
    pub kernel_at: Option<(FileId, u32, u32)>,
}

impl LowerError {
    /// The coded diagnostic of an error that has a place in the program.
    pub fn diagnostic(&self) -> Option<rlc_diagnostics::Diagnostic> {
        let (file, start, end) = self.kernel_at?;
        Some(
            rlc_diagnostics::Diagnostic::new(
                rlc_diagnostics::Code::NotAKernel,
                self.message.clone(),
                file,
                rlc_diagnostics::Span { start, end },
            )
            .primary_label("computed here")
            .help(
                "write it with what the kernels express (see `rlc explain E0314`), or compute \
                 it in another step of the pipeline",
            ),
        )
    }
}

impl std::fmt::Display for LowerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn lower_err(message: impl Into<String>) -> LowerError {
    LowerError {
        message: message.into(),
        kernel_at: None,
    }
}

/// Lowering errors as the CLI reports them: the coded diagnostics of those with a place in the
/// program (E0314), else their messages.
pub fn failure(errors: Vec<LowerError>) -> crate::planner::apply::PlanFailure {
    use crate::planner::apply::PlanFailure;
    let diagnostics: Vec<_> = errors.iter().filter_map(LowerError::diagnostic).collect();
    if diagnostics.is_empty() {
        PlanFailure::Messages(errors.iter().map(ToString::to_string).collect())
    } else {
        PlanFailure::Diagnostics(diagnostics)
    }
}

/// Lowers a program the checker accepted (call it only when `checked.has_errors()` is false).
pub fn lower(checked: &Checked) -> Result<Plan, Vec<LowerError>> {
    lower_program(checked, &checked.program)
}

/// Lowers `checked` with another [`Program`] in place of its own: the planner's, where `place …
/// auto` placements have been given layouts (same pipeline, modules and types).
pub fn lower_program(checked: &Checked, program: &Program) -> Result<Plan, Vec<LowerError>> {
    Lowerer::new(checked, program)?.run()
}

/// What an expression of the pipeline stands for.
#[derive(Clone, Debug)]
enum Lowered {
    Value {
        id: u32,
        field: Option<String>,
    },
    Const(String),
    /// A role (its calls are the checker's `NodeKind::Role`).
    Model,
    Name(String),
    Unknown,
}

struct Lowerer<'a> {
    program: &'a Program,
    bodies: &'a Bodies,
    /// The checker's reading of the pipeline: what the dataflow pass walks.
    dataflow: Option<&'a Dataflow>,
    clusters: Vec<Cluster>,
    instances: Vec<Instance>,
    /// Placement index → instance index.
    by_placement: BTreeMap<usize, usize>,
    driver: usize,
    values: Vec<Value>,
    ops: Vec<Op>,
    edges: Vec<Edge>,
    env: BTreeMap<String, u32>,
    /// `(value, instance)` → the transfer that brings it there.
    transfers: BTreeMap<(u32, usize), Option<u32>>,
    /// Ops whose instance is decided by their first consumer (`sample`).
    floating: BTreeSet<u32>,
    every: Option<u64>,
    updates: BTreeMap<usize, u32>,
    /// Values the loop carries from one step to the next.
    carried: Vec<Carried>,
    /// The outputs of each `verify` op whose verifier declares metrics, by its reward value:
    /// `r.reward`, `r.format` read them (the pipeline binds `r` to the reward).
    verify_outputs: BTreeMap<u32, Vec<(String, u32)>>,
    /// The plan's kernel table (see [`kernels`]).
    kernels: Vec<rlc_kernel::ir::Kernel>,
    errors: Vec<LowerError>,
}

/// The plan's layout for a placement's `with` layout (a degree left out is 1).
pub(crate) fn plan_layout(l: &prog::Layout) -> Layout {
    Layout {
        dp: l.dp().max(1) as u32,
        fsdp: l.fsdp().max(1) as u32,
        tp: l.tp().max(1) as u32,
        pp: l.pp().max(1) as u32,
        sp: l.sp().max(1) as u32,
        micro: l.micro(),
    }
}

/// The plan's name for a phase of the program.
fn plan_phase(p: Phase) -> crate::model::Phase {
    match p {
        Phase::Train => crate::model::Phase::Train,
        Phase::Generate => crate::model::Phase::Generate,
        Phase::Logprobs => crate::model::Phase::Logprobs,
        Phase::Values => crate::model::Phase::Values,
        Phase::Score => crate::model::Phase::Score,
    }
}

fn count(v: Option<prog::Sourced<i64>>) -> Option<u64> {
    v.map(|s| s.value.max(0) as u64)
}

fn value_bytes(ty: &ValueType) -> Option<u64> {
    ty.bytes()
}

/// The plan's type of a value the checker typed `ty`: a tensor (a scalar for numbers and
/// booleans) when its element type has a size or its shape a symbol, a record of such tensors,
/// anything else opaque (described as the hover does).
fn value_type(ty: &Type) -> ValueType {
    let opaque = || ValueType::Opaque {
        opaque: ty.to_string(),
    };
    match ty {
        Type::Record(r) => {
            let mut fields = BTreeMap::new();
            for (name, field) in &r.fields {
                match tensor_type(field) {
                    Some(t) => {
                        fields.insert(name.clone(), t);
                    }
                    None => return opaque(),
                }
            }
            ValueType::Record {
                record: r.name.clone(),
                fields,
            }
        }
        other => tensor_type(other).map_or_else(opaque, ValueType::Tensor),
    }
}

fn tensor_type(ty: &Type) -> Option<TensorType> {
    let scalar = |dtype: &str| TensorType {
        dtype: dtype.to_string(),
        shape: Vec::new(),
    };
    let t = match ty {
        Type::Int(_) => scalar("i64"),
        Type::Float(_) => scalar("f32"),
        Type::Bool(_) => scalar("bool"),
        Type::Tensor(t) => TensorType {
            dtype: t.dtype.as_str().to_string(),
            shape: t
                .dims
                .iter()
                .map(|d| match d {
                    rlc_check::value::Dim::Size(n) => Dim::Size(*n),
                    rlc_check::value::Dim::Sym(s) => Dim::Sym(s.clone()),
                })
                .collect(),
        },
        Type::Str(_) | Type::Record(_) | Type::Item(_) => return None,
    };
    // Known bytes, or a symbolic size (the batch or prompt length) to be fixed at run time.
    (t.bytes().is_some() || t.shape.iter().any(|d| matches!(d, Dim::Sym(_)))).then_some(t)
}

fn rows_of(ty: &ValueType) -> Option<u64> {
    let first = match ty {
        ValueType::Tensor(t) => t.shape.first(),
        ValueType::Record { fields, .. } => fields.values().next().and_then(|f| f.shape.first()),
        ValueType::Opaque { .. } => None,
    };
    match first {
        Some(Dim::Size(n)) => Some(*n),
        _ => None,
    }
}

fn is_scalar(ty: &ValueType) -> bool {
    matches!(ty, ValueType::Tensor(t) if t.shape.is_empty())
}

fn field_type(ty: &ValueType, field: Option<&str>) -> ValueType {
    match (ty, field) {
        (ValueType::Record { fields, .. }, Some(f)) => fields.get(f).map_or_else(
            || ValueType::Opaque {
                opaque: format!("field {f}"),
            },
            |x| ValueType::Tensor(x.clone()),
        ),
        _ => ty.clone(),
    }
}

fn phase_memory(b: &memory::Breakdown) -> PhaseMemory {
    let r = |x: f64| x.max(0.0).round() as u64;
    let pm = PhaseMemory {
        weights: r(b.weights),
        gradients: r(b.gradients),
        optimizer_state: r(b.optimizer_state),
        master_weights: r(b.master_weights),
        activations: r(b.activations),
        kv_cache: r(b.kv_cache),
        total: 0,
        lower_bound: b.is_lower_bound(),
    };
    PhaseMemory {
        total: pm.state() + pm.transient(),
        ..pm
    }
}

impl<'a> Lowerer<'a> {
    fn new(checked: &'a Checked, program: &'a Program) -> Result<Self, Vec<LowerError>> {
        let instances::Placed {
            clusters,
            instances,
            by_placement,
            driver,
        } = instances::place(program)?;
        Ok(Lowerer {
            program,
            bodies: &checked.bodies,
            dataflow: checked.dataflow.as_ref(),
            clusters,
            instances,
            by_placement,
            driver,
            values: Vec::new(),
            ops: Vec::new(),
            edges: Vec::new(),
            env: BTreeMap::new(),
            transfers: BTreeMap::new(),
            floating: BTreeSet::new(),
            every: None,
            updates: BTreeMap::new(),
            carried: Vec::new(),
            verify_outputs: BTreeMap::new(),
            kernels: Vec::new(),
            errors: Vec::new(),
        })
    }

    fn run(mut self) -> Result<Plan, Vec<LowerError>> {
        let Some(dataflow) = self.dataflow else {
            return Err(vec![lower_err("the root module has no `pipeline` item")]);
        };
        self.block(&dataflow.body);
        self.carried_ranks();
        // The passes after the dataflow work on its graph alone.
        let train: BTreeMap<usize, usize> = self
            .updates
            .keys()
            .filter_map(|&model| Some((model, self.instance_for(model, Phase::Train)?)))
            .collect();
        let mut flow = syncs::Flow {
            values: std::mem::take(&mut self.values),
            ops: std::mem::take(&mut self.ops),
            edges: std::mem::take(&mut self.edges),
            updates: std::mem::take(&mut self.updates),
        };
        flow.weight_syncs(self.program, &self.instances, &train);
        if let Err(error) = flow.checkpoint_deps(self.program) {
            self.errors.push(error);
        }
        if !self.errors.is_empty() {
            self.errors.sort();
            self.errors.dedup();
            return Err(self.errors);
        }
        flow.levels();
        let world_size = self.clusters.last().map_or(0, |c| c.ranks.end());
        let program = self.program;
        let facts = program.pipeline.as_ref().expect("checked in new");
        let roles = program
            .models
            .iter()
            .map(|m| Role {
                name: m.name.clone(),
                kind: match m.kind {
                    prog::RoleKind::CausalLM => RoleKind::CausalLM,
                    prog::RoleKind::ValueModel => RoleKind::ValueModel,
                    prog::RoleKind::RewardModel => RoleKind::RewardModel,
                },
                arch: m.arch.as_ref().map(|a| Arch {
                    preset: a.preset.clone(),
                    layers: a.layers,
                    hidden: a.hidden,
                    heads: a.heads,
                    kv_heads: a.kv_heads,
                    ffn: a.ffn,
                    vocab: a.vocab,
                    max_len: a.max_len,
                    tie_embeddings: a.tie_embeddings,
                    rope_theta: a.rope_theta(),
                    norm_eps: a.norm_eps(),
                    positions: match a.positions {
                        prog::Positions::Rope => Positions::Rope,
                        prog::Positions::Learned => Positions::Learned,
                    },
                }),
                parameters: m.arch.as_ref().map(|a| memory::role_parameters(m.kind, a)),
                precision: match m.precision {
                    prog::Precision::F32 => Precision::F32,
                    prog::Precision::Bf16 => Precision::Bf16,
                    prog::Precision::F16 => Precision::F16,
                },
                frozen: m.frozen,
                recompute: m.recompute,
                init: match &m.init {
                    Some(prog::Init::Random { seed }) => Init::Random { seed: *seed },
                    Some(prog::Init::HuggingFace { path }) => {
                        Init::HuggingFace { path: path.clone() }
                    }
                    Some(prog::Init::Checkpoint { path }) => {
                        Init::Checkpoint { path: path.clone() }
                    }
                    Some(prog::Init::CopyOf { model }) => Init::CopyOf {
                        role: program
                            .models
                            .get(*model)
                            .map_or_else(String::new, |m| m.name.clone()),
                    },
                    None => Init::Unknown,
                },
                optimizer: m.optimizer.as_ref().filter(|_| !m.frozen).map(optimizer),
            })
            .collect();
        let datasets = datasets(program, &flow.ops);
        let verifiers = verifiers(program, &flow.ops);
        let environments = environments(program, &flow.ops);
        let mut plan = Plan {
            version: PLAN_VERSION,
            pipeline: facts.name.clone(),
            steps: facts.steps.map(|s| s.max(0) as u64),
            world_size,
            clusters: self.clusters.clone(),
            roles,
            datasets,
            instances: self.instances.clone(),
            values: flow.values,
            ops: flow.ops,
            edges: flow.edges,
            programs: Vec::new(),
            carried: self.carried.clone(),
            verifiers,
            environments,
            kernels: self.kernels.clone(),
            sources: None,
        };
        reuse::sampling_logprobs(&mut plan);
        schedule_ranks(&mut plan);
        Ok(plan)
    }
}

/// The ranks' programs, ordered by the cost model's durations (one second each when a cluster
/// carries no device speed).
fn schedule_ranks(plan: &mut Plan) {
    let all_cpu = plan.clusters.iter().all(|c| c.is_cpu);
    let seconds = crate::cost::PlanCosts::new(plan, &crate::cost::CostParams::defaults(all_cpu))
        .map_or_else(|_| vec![1.0; plan.ops.len()], |c| c.op_seconds);
    plan.programs = schedule::programs(plan, &seconds);
}

/// The datasets `ops` sample, by name, as the checker evaluated them.
fn datasets(program: &Program, ops: &[Op]) -> Vec<Dataset> {
    let sampled: BTreeSet<&str> = ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Sample { dataset, .. } => Some(dataset.as_str()),
            _ => None,
        })
        .collect();
    sampled
        .into_iter()
        .filter_map(|name| {
            let spec = program.datasets.get(name)?;
            let source = match (spec.kind.as_str(), &spec.path, &spec.field) {
                ("jsonl", Some(path), Some(field)) => DatasetSource::Jsonl {
                    path: path.clone(),
                    field: field.clone(),
                    tokenizer: spec.tokenizer.clone(),
                    keep: spec.keep.clone(),
                },
                (kind, _, _) => DatasetSource::Task {
                    task: TaskKind::from_name(kind)?,
                    digits: u64::try_from(spec.digits?).ok()?,
                },
            };
            Some(Dataset {
                name: name.to_string(),
                source,
            })
        })
        .collect()
}

/// The verifiers `ops` call, by name, as the checker evaluated them.
fn verifiers(program: &Program, ops: &[Op]) -> Vec<Verifier> {
    let called: BTreeSet<&str> = ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Verify { verifier, .. } => Some(verifier.as_str()),
            _ => None,
        })
        .collect();
    called
        .into_iter()
        .filter_map(|name| {
            let v = program.verifiers.get(name)?;
            let (endpoint, limits, on_error) = pool(v);
            Some(Verifier {
                name: name.to_string(),
                endpoint,
                workers: v.workers,
                batch: v.batch,
                timeout_ms: v.timeout_ms,
                limits,
                on_error,
                metrics: v.metrics.clone(),
            })
        })
        .collect()
}

/// The environments `generate` ops talk to, by name, as the checker evaluated them.
fn environments(program: &Program, ops: &[Op]) -> Vec<Environment> {
    let named: BTreeSet<&str> = ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Generate { env: Some(e), .. } => Some(e.environment.as_str()),
            _ => None,
        })
        .collect();
    named
        .into_iter()
        .filter_map(|name| {
            let env = program.environments.get(name)?;
            let (endpoint, limits, on_error) = pool(env);
            Some(Environment {
                name: name.to_string(),
                endpoint,
                workers: env.workers,
                batch: env.batch,
                timeout_ms: env.timeout_ms,
                limits,
                on_error,
                fields: env.fields.iter().map(|(f, _)| f.clone()).collect(),
            })
        })
        .collect()
}

/// The endpoint, worker limits and failure policy of a verifier or environment declaration.
fn pool(v: &rlc_check::value::VerifierSpec) -> (VerifierEndpoint, WorkerLimits, OnError) {
    let endpoint = match &v.endpoint {
        rlc_check::value::VerifierEndpoint::Program(command) => VerifierEndpoint::Program {
            command: command.clone(),
        },
        rlc_check::value::VerifierEndpoint::Http(url) => {
            VerifierEndpoint::Http { url: url.clone() }
        }
    };
    let limits = WorkerLimits {
        cpu_seconds: Some(v.cpu_seconds),
        memory_bytes: Some(v.memory_bytes),
        file_bytes: Some(v.file_bytes),
        processes: Some(v.processes),
        no_network: !v.network,
    };
    let on_error = if v.on_error_zero {
        OnError::Zero
    } else {
        OnError::Fail
    };
    (endpoint, limits, on_error)
}

fn optimizer(o: &prog::Optimizer) -> Optimizer {
    Optimizer {
        // `adamw(…)` is the only optimizer the checker builds.
        name: OptimizerName::Adamw,
        lr: o.lr,
        warmup: o.warmup,
        weight_decay: o.weight_decay,
        clip: o.clip,
        beta1: o.beta1,
        beta2: o.beta2,
        eps: o.eps,
        schedule: match o.schedule {
            prog::LrSchedule::Cosine => LrSchedule::Cosine,
            prog::LrSchedule::Linear => LrSchedule::Linear,
            prog::LrSchedule::Constant => LrSchedule::Constant,
        },
        min_lr_ratio: o.min_lr_ratio,
    }
}

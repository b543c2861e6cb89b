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

use crate::model::*;
use crate::reshard::{block, lcm};
use rlc_check::Checked;
use rlc_check::checks::memory;
use rlc_check::modules::{Binding, Modules};
use rlc_check::program::{self as prog, Phase, Program};
use rlc_diagnostics::FileId;
use rlc_syntax::ast::{self, ExprKind, ItemKind, StmtKind};
use std::collections::{BTreeMap, BTreeSet};

/// Why a checked program could not be lowered.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LowerError {
    pub message: String,
}

impl std::fmt::Display for LowerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn lower_err(message: impl Into<String>) -> LowerError {
    LowerError {
        message: message.into(),
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
    Value { id: u32, field: Option<String> },
    Const(String),
    Model(usize),
    Name(String),
    Unknown,
}

struct Lowerer<'a> {
    program: &'a Program,
    modules: &'a Modules,
    types: &'a rlc_check::TypeTable,
    root_file: FileId,
    clusters: Vec<Cluster>,
    instances: Vec<Instance>,
    /// Placement index → instance index.
    by_placement: BTreeMap<usize, usize>,
    driver: usize,
    values: Vec<Value>,
    ops: Vec<Op>,
    edges: Vec<Edge>,
    env: BTreeMap<String, u32>,
    /// `(model, op)` → how many of its calls were lowered.
    seen_calls: BTreeMap<(usize, prog::Op), usize>,
    /// `(value, instance)` → the transfer that brings it there.
    transfers: BTreeMap<(u32, usize), Option<u32>>,
    /// Ops whose instance is decided by their first consumer (`sample`).
    floating: BTreeSet<u32>,
    every: Option<u64>,
    /// Kernel facts of functions, memoised: (batch reduction, grouped).
    fn_facts: BTreeMap<(usize, String), (bool, bool)>,
    updates: BTreeMap<usize, u32>,
    /// Values the loop carries from one step to the next.
    carried: Vec<Carried>,
    errors: Vec<LowerError>,
}

fn phase_name(p: Phase) -> &'static str {
    p.as_str()
}

fn count(v: Option<prog::Sourced<i64>>) -> Option<u64> {
    v.map(|s| s.value.max(0) as u64)
}

fn value_bytes(ty: &ValueType) -> Option<u64> {
    ty.bytes()
}

/// Splits `text` at top-level `sep` (outside brackets and braces).
fn split_top(text: &str, sep: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'[' | b'{' | b'(' => depth += 1,
            b']' | b'}' | b')' => depth -= 1,
            _ => {}
        }
        if depth == 0 && text[i..].starts_with(sep) {
            out.push(text[start..i].to_string());
            i += sep.len();
            start = i;
            continue;
        }
        i += 1;
    }
    out.push(text[start..].to_string());
    out
}

fn parse_tensor(text: &str) -> Option<TensorType> {
    let text = text.split(" = ").next()?.trim();
    let t = TensorType::parse(text).ok()?;
    t.bytes()
        .or_else(|| (t.shape.iter().any(|d| matches!(d, Dim::Sym(_)))).then_some(0))?;
    Some(t)
}

/// Reads the checker's display of a type (`f32[16, 8]`, `Rollout { mask: bool[16, 8], … }`).
fn parse_type(text: &str) -> ValueType {
    if let Some(t) = parse_tensor(text) {
        return ValueType::Tensor(t);
    }
    if let Some((name, rest)) = text.split_once(" { ")
        && let Some(body) = rest.strip_suffix(" }")
        && !name.contains(' ')
    {
        let mut fields = BTreeMap::new();
        for part in split_top(body, ", ") {
            let Some((fname, fty)) = part.split_once(": ") else {
                return ValueType::Opaque {
                    opaque: text.to_string(),
                };
            };
            match parse_tensor(fty) {
                Some(ty) => {
                    fields.insert(fname.to_string(), ty);
                }
                None => {
                    return ValueType::Opaque {
                        opaque: text.to_string(),
                    };
                }
            }
        }
        return ValueType::Record {
            record: name.to_string(),
            fields,
        };
    }
    ValueType::Opaque {
        opaque: text.to_string(),
    }
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
        let Some(pipeline) = &program.pipeline else {
            return Err(vec![lower_err(
                "the program has no `pipeline`: nothing to lower",
            )]);
        };
        // Clusters, ranks numbered cluster after cluster.
        let mut clusters = Vec::new();
        let mut cluster_first = Vec::new();
        let mut next = 0u32;
        for c in &program.clusters {
            let n = c.device_count() as u32;
            cluster_first.push(next);
            clusters.push(Cluster {
                name: c.name.clone(),
                ranks: RankSet::range(next, next + n),
                nodes: c.nodes.value,
                devices_per_node: c.devices_per_node.value,
                device: c.device.name.clone(),
                is_cpu: c.is_cpu,
                memory: c.device.memory.max(0.0) as u64,
                intra_bandwidth: c.intra_bandwidth,
                inter_bandwidth: c.inter_bandwidth,
                flops: c.device.flops.max(0.0),
                memory_bandwidth: c.device.bandwidth.max(0.0),
            });
            next += n;
        }

        // Instances: every placement a call runs on.
        let mut errors = Vec::new();
        let mut used: BTreeMap<usize, BTreeSet<Phase>> = BTreeMap::new();
        for call in &pipeline.calls {
            let phase = call.op.phase();
            let model = &program.models[call.model];
            match program.placement_for(call.model, phase) {
                Some(p) => {
                    let index = program
                        .placements
                        .iter()
                        .position(|q| std::ptr::eq(q, p))
                        .expect("a placement of the program");
                    used.entry(index).or_default().insert(phase);
                }
                None => errors.push(lower_err(format!(
                    "`{}.{}` has no placement",
                    model.name,
                    phase.as_str()
                ))),
            }
        }
        let mut memory_of: BTreeMap<(usize, Phase), PhaseMemory> = BTreeMap::new();
        for device in memory::estimate(program) {
            for pm in device.phases {
                memory_of
                    .entry((pm.placement, pm.phase))
                    .or_insert_with(|| phase_memory(&pm.breakdown));
            }
        }
        let mut instances = Vec::new();
        let mut by_placement = BTreeMap::new();
        for (&index, phases) in &used {
            let p = &program.placements[index];
            let model = &program.models[p.model];
            let first = cluster_first.get(p.cluster).copied().unwrap_or(0);
            let ranks =
                RankSet::range(first + p.devices.start as u32, first + p.devices.end as u32);
            let l = &p.layout;
            let layout = if p.auto {
                Layout {
                    dp: ranks.len().max(1),
                    fsdp: 1,
                    tp: 1,
                    pp: 1,
                    sp: 1,
                    micro: None,
                }
            } else {
                Layout {
                    dp: l.dp().max(1) as u32,
                    fsdp: l.fsdp().max(1) as u32,
                    tp: l.tp().max(1) as u32,
                    pp: l.pp().max(1) as u32,
                    sp: l.sp().max(1) as u32,
                    micro: l.micro(),
                }
            };
            if layout.devices() != ranks.len() {
                errors.push(lower_err(format!(
                    "the placement of `{}` has {} devices but its layout uses {}",
                    model.name,
                    ranks.len(),
                    layout.devices()
                )));
            }
            let id = match p.phase {
                Some(ph) => format!("{}.{}", model.name, ph.as_str()),
                None => model.name.clone(),
            };
            let memory = phases
                .iter()
                .filter_map(|ph| {
                    memory_of
                        .get(&(index, *ph))
                        .map(|m| (phase_name(*ph).to_string(), m.clone()))
                })
                .collect();
            by_placement.insert(index, instances.len());
            instances.push(Instance {
                id,
                role: model.name.clone(),
                cluster: program
                    .clusters
                    .get(p.cluster)
                    .map_or_else(String::new, |c| c.name.clone()),
                phases: phases
                    .iter()
                    .map(|ph| phase_name(*ph).to_string())
                    .collect(),
                ranks,
                layout,
                auto: p.auto,
                memory,
            });
        }
        if !errors.is_empty() {
            errors.sort();
            errors.dedup();
            return Err(errors);
        }
        // The driver: where kernels run.
        let driver_call = pipeline
            .calls
            .iter()
            .find(|c| c.op == prog::Op::Update)
            .or(pipeline.calls.first());
        let Some(driver_call) = driver_call else {
            return Err(vec![lower_err(
                "the pipeline calls no role: nothing to place",
            )]);
        };
        let driver_placement = program
            .placement_for(driver_call.model, driver_call.op.phase())
            .expect("checked above");
        let driver_index = program
            .placements
            .iter()
            .position(|q| std::ptr::eq(q, driver_placement))
            .expect("a placement");
        let driver = by_placement[&driver_index];
        Ok(Lowerer {
            program,
            modules: &checked.modules,
            types: &checked.types,
            root_file: checked.modules.get(0).file,
            clusters,
            instances,
            by_placement,
            driver,
            values: Vec::new(),
            ops: Vec::new(),
            edges: Vec::new(),
            env: BTreeMap::new(),
            seen_calls: BTreeMap::new(),
            transfers: BTreeMap::new(),
            floating: BTreeSet::new(),
            every: None,
            fn_facts: BTreeMap::new(),
            updates: BTreeMap::new(),
            carried: Vec::new(),
            errors,
        })
    }

    fn run(mut self) -> Result<Plan, Vec<LowerError>> {
        let root = self.modules.get(0);
        let pipeline = root.ast.items.iter().find_map(|i| match &i.kind {
            ItemKind::Pipeline(p) => Some(p),
            _ => None,
        });
        let Some(pipeline) = pipeline else {
            return Err(vec![lower_err("the root module has no `pipeline` item")]);
        };
        self.block(&pipeline.body);
        self.carried_ranks();
        self.weight_syncs();
        self.checkpoint_deps();
        if !self.errors.is_empty() {
            self.errors.sort();
            self.errors.dedup();
            return Err(self.errors);
        }
        self.levels();
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
        let datasets = datasets(program, &self.ops);
        let mut plan = Plan {
            version: PLAN_VERSION,
            pipeline: facts.name.clone(),
            steps: facts.steps.map(|s| s.max(0) as u64),
            world_size,
            clusters: self.clusters.clone(),
            roles,
            datasets,
            instances: self.instances.clone(),
            values: self.values.clone(),
            ops: self.ops.clone(),
            edges: self.edges.clone(),
            programs: Vec::new(),
            carried: self.carried.clone(),
            sources: None,
        };
        // The ranks' order weighs ops by the cost model's durations (one second each when a
        // cluster carries no device speed).
        let all_cpu = plan.clusters.iter().all(|c| c.is_cpu);
        let seconds =
            crate::cost::PlanCosts::new(&plan, &crate::cost::CostParams::defaults(all_cpu))
                .map_or_else(|_| vec![1.0; plan.ops.len()], |c| c.op_seconds);
        plan.programs = self.programs(&seconds);
        Ok(plan)
    }

    // ----------------------------------------------------------------------------------------
    // The pipeline's statements

    fn block(&mut self, b: &ast::Block) {
        for s in &b.stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &ast::Stmt) {
        match &s.kind {
            StmtKind::Loop { carries, body, .. } => {
                for c in carries {
                    self.carry(c);
                }
                self.block(body);
            }
            StmtKind::Assign { name, value } => self.assign(name, value),
            StmtKind::Let { name, value, .. } => {
                // (`let m = rollout.mask` binds the whole record: a field alias is not a value.)
                if let Lowered::Value { id, field } = self.expr(value) {
                    if field.is_none() && self.values[id as usize].name.contains('#') {
                        self.values[id as usize].name = name.name.clone();
                    }
                    self.env.insert(name.name.clone(), id);
                }
            }
            StmtKind::Expr(e) => {
                self.expr(e);
            }
            StmtKind::Log { record } => {
                let mut fields = Vec::new();
                let mut inputs = Vec::new();
                for f in &record.fields {
                    if let Lowered::Value { id, field } = self.expr(&f.value) {
                        if self.values[id as usize].name.contains('#') {
                            self.values[id as usize].name = format!("log.{}", f.name.name);
                        }
                        fields.push(LogField {
                            name: f.name.name.clone(),
                            value: id,
                        });
                        inputs.push(Input {
                            name: f.name.name.clone(),
                            value: id,
                            field,
                        });
                    }
                }
                let driver = self.driver;
                let first = self.instances[driver].ranks.nth(0).unwrap_or(0);
                let label = "log".to_string();
                self.push_op(
                    label,
                    OpKind::Log { fields },
                    Some(driver),
                    RankSet::range(first, first + 1),
                    inputs,
                );
            }
            StmtKind::Every { interval, body } => {
                let n = self.const_int(interval);
                let saved = self.every;
                self.every = n.or(saved);
                self.block(body);
                self.every = saved;
            }
            StmtKind::Checkpoint { roles } => {
                for r in roles {
                    let Some(model) = self.program.model_index(&r.name) else {
                        continue;
                    };
                    let Some(inst) = self
                        .instance_for(model, Phase::Train)
                        .or_else(|| self.any_instance(model))
                    else {
                        self.errors.push(lower_err(format!(
                            "`checkpoint {}`: the role runs nowhere",
                            r.name
                        )));
                        continue;
                    };
                    let ranks = self.instances[inst].ranks.clone();
                    let kind = OpKind::Checkpoint {
                        role: r.name.clone(),
                        instance: self.instances[inst].id.clone(),
                    };
                    // The state is saved where it is (device or host memory): nothing to onload.
                    self.push_op(
                        format!("checkpoint {}", r.name),
                        kind,
                        Some(inst),
                        ranks,
                        Vec::new(),
                    );
                }
            }
            StmtKind::Emit { .. } => {}
        }
    }

    /// `beta = 0.1` in a loop's `with (…)`: a value of the step without a producer, held where
    /// kernels run (the checker made it a scalar `f32` or `i64` with a constant initial value).
    fn carry(&mut self, c: &ast::Carry) {
        let text = self.type_at(c.init.span).cloned().unwrap_or_default();
        let (dtype, init) = match text.split_once(" = ") {
            Some((d, v)) if d == "f32" || d == "i64" => (d.to_string(), v.to_string()),
            _ => {
                self.errors.push(lower_err(format!(
                    "the initial value of `{}` is not a known `f32` or `i64` constant",
                    c.name.name
                )));
                return;
            }
        };
        let ty = TensorType {
            dtype,
            shape: Vec::new(),
        };
        let id = self.values.len() as u32;
        let at = self.driver;
        self.values.push(Value {
            id,
            name: c.name.name.clone(),
            producer: None,
            at: self.instances[at].id.clone(),
            ty: ValueType::Tensor(ty.clone()),
            split: Split::Replicated,
        });
        self.env.insert(c.name.name.clone(), id);
        self.carried.push(Carried {
            name: c.name.name.clone(),
            ty,
            init,
            value: id,
            next: None,
            next_const: None,
            every: None,
            ranks: self.instances[at].ranks.clone(),
        });
    }

    /// `beta = …` in the loop body: what the next step starts with.
    fn assign(&mut self, name: &ast::Ident, value: &ast::Expr) {
        let lowered = self.expr(value);
        let every = self.every;
        let Some(c) = self.carried.iter_mut().find(|c| c.name == name.name) else {
            return;
        };
        c.every = every;
        match lowered {
            Lowered::Value { id, field: None } => c.next = Some(id),
            Lowered::Const(text) => c.next_const = Some(text),
            _ => self.errors.push(lower_err(format!(
                "the new value of `{}` is not a value of the step",
                name.name
            ))),
        }
    }

    /// A carried value is read where it is held, and the op that computes its next value runs
    /// on every rank that holds it (carried values are not moved between ranks).
    fn carried_ranks(&mut self) {
        for c in &self.carried {
            let covers = |ranks: &RankSet| c.ranks.iter().all(|r| ranks.contains(r));
            for op in &self.ops {
                if op.inputs.iter().any(|i| i.value == c.value)
                    && op.ranks.iter().any(|r| !c.ranks.contains(r))
                {
                    self.errors.push(lower_err(format!(
                        "`{}` runs on ranks {} but reads `{}`, which the loop carries on ranks {} \
                         (where kernels run); carried values are not moved between ranks",
                        op.label, op.ranks, c.name, c.ranks
                    )));
                }
            }
            if let Some(next) = c.next
                && let Some(p) = self.values[next as usize].producer
                && !covers(&self.ops[p as usize].ranks)
            {
                let op = &self.ops[p as usize];
                self.errors.push(lower_err(format!(
                    "the new value of `{}` is computed by `{}` on ranks {}, but the loop carries \
                     it on ranks {}",
                    c.name, op.label, op.ranks, c.ranks
                )));
            }
        }
    }

    /// The name of the dataset a `ds.method(…)` call `e` reads: its item's name, which the
    /// plan's `datasets` are listed under (the pipeline may use an imported alias, `written`).
    fn dataset_name(&self, e: &ast::Expr, written: String) -> String {
        self.program
            .dataset_at(self.root_file, e.span)
            .map_or(written, |d| d.name.clone())
    }

    fn type_at(&self, span: ast::Span) -> Option<&'a String> {
        self.types.get(&(self.root_file, span.start, span.end))
    }

    fn const_int(&self, e: &ast::Expr) -> Option<u64> {
        let t = self.type_at(e.span)?;
        t.strip_prefix("i64 = ")?
            .parse::<i64>()
            .ok()
            .map(|v| v.max(0) as u64)
    }

    /// A constant the checker knows (`f32 = 0.5`, `i64 = 8`), as text.
    fn const_text(&self, e: &ast::Expr) -> Option<String> {
        match &e.kind {
            ExprKind::Number(n) => return Some(n.text.clone()),
            ExprKind::Bool(b) => return Some(b.to_string()),
            ExprKind::Str(s) => return Some(format!("{:?}", s.value)),
            _ => {}
        }
        let t = self.type_at(e.span)?;
        let (_, v) = t.split_once(" = ")?;
        Some(v.to_string())
    }

    fn expr(&mut self, e: &ast::Expr) -> Lowered {
        if let Some(c) = self.const_text(e) {
            return Lowered::Const(c);
        }
        match &e.kind {
            ExprKind::Paren(inner) => self.expr(inner),
            ExprKind::Name(id) => {
                if let Some(&v) = self.env.get(&id.name) {
                    Lowered::Value { id: v, field: None }
                } else if let Some(m) = self.program.model_index(&id.name) {
                    Lowered::Model(m)
                } else {
                    Lowered::Name(id.name.clone())
                }
            }
            ExprKind::Member { base, name } => match self.expr(base) {
                Lowered::Value { id, field: None } => Lowered::Value {
                    id,
                    field: Some(name.name.clone()),
                },
                _ => Lowered::Unknown,
            },
            ExprKind::Call {
                callee,
                args,
                closure,
            } => self.call(e, callee, args, closure.as_ref()),
            ExprKind::Binary { op, lhs, rhs, .. } => {
                let name = binary_name(op.as_str());
                let l = self.expr(lhs);
                let r = self.expr(rhs);
                self.kernel(
                    e,
                    name.to_string(),
                    None,
                    vec![("lhs".into(), l), ("rhs".into(), r)],
                    (false, false),
                )
            }
            ExprKind::Unary { op, operand, .. } => {
                let name = if op.as_str() == "!" { "not" } else { "neg" };
                let x = self.expr(operand);
                self.kernel(
                    e,
                    name.to_string(),
                    None,
                    vec![("x".into(), x)],
                    (false, false),
                )
            }
            ExprKind::Index { base, indices } => {
                let mut args = vec![("x".to_string(), self.expr(base))];
                for (i, ix) in indices.iter().enumerate() {
                    args.push((format!("index{i}"), self.expr(ix)));
                }
                self.kernel(e, "index".into(), None, args, (false, false))
            }
            _ => Lowered::Unknown,
        }
    }

    fn call(
        &mut self,
        e: &ast::Expr,
        callee: &ast::Expr,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> Lowered {
        match &callee.kind {
            ExprKind::Member { base, name } => {
                let base_l = self.expr(base);
                match base_l {
                    Lowered::Model(m) => self.role_call(e, m, &name.name, args, closure),
                    Lowered::Name(written) if name.name == "sample" => {
                        let dataset = self.dataset_name(e, written);
                        let count = args.first().and_then(|a| self.const_int(&a.value));
                        let ty = self.type_at(e.span).map_or_else(
                            || ValueType::Opaque {
                                opaque: "prompts".into(),
                            },
                            |t| parse_type(t),
                        );
                        let kind = OpKind::Sample {
                            dataset: dataset.clone(),
                            count,
                            form: None,
                            split: None,
                        };
                        let id = self.push_op(
                            format!("sample {dataset}"),
                            kind,
                            None,
                            RankSet::default(),
                            Vec::new(),
                        );
                        self.floating.insert(id);
                        let v = self.new_value(format!("{dataset}.sample#"), id, ty, count);
                        self.ops[id as usize].outputs.push(v);
                        Lowered::Value { id: v, field: None }
                    }
                    Lowered::Name(dataset)
                        if name.name == "demonstrations" || name.name == "preferences" =>
                    {
                        self.supervised(e, &dataset, &name.name, args)
                    }
                    Lowered::Name(dataset) if name.name == "score" => {
                        let lowered: Vec<(String, Lowered)> = args
                            .iter()
                            .enumerate()
                            .map(|(i, a)| (arg_name(a, i, &["rollout"]), self.expr(&a.value)))
                            .collect();
                        self.kernel(e, format!("{dataset}.score"), None, lowered, (false, false))
                    }
                    _ => Lowered::Unknown,
                }
            }
            ExprKind::Name(f) => {
                let (module, params, facts) = match self.modules.get(0).lookup(0, &f.name) {
                    Some(Binding::Item { module, index }) => {
                        match &self.modules.get(module).item(index).kind {
                            ItemKind::Fn(def) => {
                                let params: Vec<String> =
                                    def.params.iter().map(|p| p.name.name.clone()).collect();
                                let facts = self.facts(module, &f.name);
                                let m = self.modules.get(module);
                                (
                                    if module == 0 {
                                        None
                                    } else {
                                        Some(m.name.clone())
                                    },
                                    params,
                                    facts,
                                )
                            }
                            _ => (None, Vec::new(), (false, false)),
                        }
                    }
                    _ => (None, Vec::new(), builtin_facts(&f.name, args)),
                };
                let refs: Vec<&str> = params.iter().map(String::as_str).collect();
                let lowered: Vec<(String, Lowered)> = args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (arg_name(a, i, &refs), self.expr(&a.value)))
                    .collect();
                self.kernel(e, f.name.clone(), module, lowered, facts)
            }
            _ => Lowered::Unknown,
        }
    }

    /// `ds.demonstrations(n)` / `ds.preferences(n, split: "test")`: a floating sample op whose
    /// value is a rollout of `n` rows (demonstrations) or `2·n` rows (pairs).
    fn supervised(
        &mut self,
        e: &ast::Expr,
        dataset: &str,
        form: &str,
        args: &[ast::Arg],
    ) -> Lowered {
        let count = args
            .iter()
            .find(|a| a.name.as_ref().is_none_or(|n| n.name == "n"))
            .and_then(|a| self.const_int(&a.value));
        let split = args
            .iter()
            .find(|a| a.name.as_ref().is_some_and(|n| n.name == "split"))
            .and_then(|a| match &a.value.kind {
                ExprKind::Str(s) if s.value == "test" => Some(DataSplit::Test),
                ExprKind::Str(s) if s.value == "train" => Some(DataSplit::Train),
                _ => None,
            });
        let ty = self.type_at(e.span).map_or_else(
            || ValueType::Opaque {
                opaque: "rollout".into(),
            },
            |t| parse_type(t),
        );
        let rows = count.map(|c| if form == "preferences" { 2 * c } else { c });
        let dataset = self.dataset_name(e, dataset.to_string());
        let kind = OpKind::Sample {
            dataset: dataset.clone(),
            count,
            form: Some(if form == "preferences" {
                SampleForm::Preferences
            } else {
                SampleForm::Demonstrations
            }),
            split,
        };
        let id = self.push_op(
            format!("{form} {dataset}"),
            kind,
            None,
            RankSet::default(),
            Vec::new(),
        );
        self.floating.insert(id);
        let v = self.new_value(format!("{dataset}.{form}#"), id, ty, rows);
        self.ops[id as usize].outputs.push(v);
        Lowered::Value { id: v, field: None }
    }

    /// Whether function `name` of `module` reduces over the batch (directly or through what it
    /// calls) and whether it works on groups of rows.
    fn facts(&mut self, module: usize, name: &str) -> (bool, bool) {
        if let Some(&f) = self.fn_facts.get(&(module, name.to_string())) {
            return f;
        }
        self.fn_facts
            .insert((module, name.to_string()), (false, false));
        let m = self.modules.get(module);
        let Some(Binding::Item { module: dm, index }) = m.lookup(module, name) else {
            return (false, false);
        };
        let ItemKind::Fn(def) = &self.modules.get(dm).item(index).kind else {
            return (false, false);
        };
        let mut calls = Vec::new();
        collect_calls_block(&def.body, &mut calls);
        let mut out = (false, false);
        for (callee, args) in calls {
            let f = match self.modules.get(dm).lookup(dm, &callee) {
                Some(Binding::Item {
                    module: cm,
                    index: ci,
                }) if matches!(self.modules.get(cm).item(ci).kind, ItemKind::Fn(_)) => {
                    self.facts(cm, &callee)
                }
                _ => builtin_facts(&callee, &args),
            };
            out = (out.0 || f.0, out.1 || f.1);
        }
        self.fn_facts.insert((dm, name.to_string()), out);
        self.fn_facts.insert((module, name.to_string()), out);
        out
    }

    fn kernel(
        &mut self,
        e: &ast::Expr,
        function: String,
        module: Option<String>,
        args: Vec<(String, Lowered)>,
        facts: (bool, bool),
    ) -> Lowered {
        let mut attrs = BTreeMap::new();
        let mut inputs = Vec::new();
        for (name, l) in args {
            match l {
                Lowered::Const(c) => {
                    attrs.insert(name, c);
                }
                Lowered::Value { id, field } => inputs.push(Input {
                    name,
                    value: id,
                    field,
                }),
                Lowered::Name(n) => {
                    attrs.insert(name, n);
                }
                Lowered::Model(_) | Lowered::Unknown => {}
            }
        }
        let ty = self.type_at(e.span).map_or_else(
            || ValueType::Opaque {
                opaque: "unknown".into(),
            },
            |t| parse_type(t),
        );
        let (batch_reduction, grouped) = facts;
        let batch_reduction = batch_reduction || (is_scalar(&ty) && !inputs.is_empty());
        let kind = OpKind::Kernel {
            function: function.clone(),
            module,
            attrs,
            batch_reduction,
            grouped,
        };
        let driver = self.driver;
        let ranks = self.instances[driver].ranks.clone();
        let id = self.push_op(
            format!("kernel {function}"),
            kind,
            Some(driver),
            ranks,
            inputs,
        );
        let rows = rows_of(&ty);
        let v = self.new_value(format!("{function}#"), id, ty, rows);
        self.ops[id as usize].outputs.push(v);
        Lowered::Value { id: v, field: None }
    }

    fn instance_for(&self, model: usize, phase: Phase) -> Option<usize> {
        let p = self.program.placement_for(model, phase)?;
        let index = self
            .program
            .placements
            .iter()
            .position(|q| std::ptr::eq(q, p))?;
        self.by_placement.get(&index).copied()
    }

    fn any_instance(&self, model: usize) -> Option<usize> {
        let name = &self.program.models[model].name;
        self.instances.iter().position(|i| &i.role == name)
    }

    fn role_call(
        &mut self,
        e: &ast::Expr,
        model: usize,
        method: &str,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> Lowered {
        let op = match method {
            "generate" => prog::Op::Generate,
            "logprobs" => prog::Op::Logprobs,
            "values" => prog::Op::Values,
            "score" => prog::Op::Score,
            "update" => prog::Op::Update,
            _ => return Lowered::Unknown,
        };
        let k = self.seen_calls.entry((model, op)).or_insert(0);
        let nth = *k;
        *k += 1;
        let facts = self.program.pipeline.as_ref().expect("a pipeline");
        let Some(call) = facts
            .calls
            .iter()
            .filter(|c| c.model == model && c.op == op)
            .nth(nth)
        else {
            return Lowered::Unknown;
        };
        let call = call.clone();
        let Some(inst) = self.instance_for(model, op.phase()) else {
            return Lowered::Unknown;
        };
        let role = self.program.models[model].name.clone();
        let input_name = if op == prog::Op::Generate {
            "prompts"
        } else {
            "rollout"
        };
        let mut inputs = Vec::new();
        if let Some(first) = args.iter().find(|a| a.name.is_none())
            && let Lowered::Value { id, field } = self.expr(&first.value)
        {
            inputs.push(Input {
                name: input_name.into(),
                value: id,
                field,
            });
        }
        let layout = self.instances[inst].layout;
        let batch = count(call.batch);
        let kind = match op {
            prog::Op::Generate => {
                let s = call.sampling.as_ref();
                OpKind::Generate {
                    role: role.clone(),
                    batch,
                    n: s.map(|s| s.n.value.max(0) as u64),
                    prompt_len: count(call.prompt_len),
                    max_new: s.map(|s| s.max_new.value.max(0) as u64),
                    temperature: s.map(|s| s.temperature.value),
                    top_p: s.map(|s| s.top_p.value),
                    top_k: s.and_then(|s| s.top_k).map(|k| k.value.max(0) as u64),
                }
            }
            prog::Op::Logprobs => OpKind::Logprobs {
                role: role.clone(),
                batch,
                micro: layout.micro,
            },
            prog::Op::Values => OpKind::Values {
                role: role.clone(),
                batch,
                micro: layout.micro,
            },
            prog::Op::Score => OpKind::Score {
                role: role.clone(),
                batch,
                micro: layout.micro,
            },
            prog::Op::Update => {
                let mut captures = Vec::new();
                let mut calls = Vec::new();
                let param = closure
                    .and_then(|c| c.params.first())
                    .map_or_else(String::new, |p| p.name.clone());
                if let Some(c) = closure {
                    let mut names = Vec::new();
                    collect_reads_block(&c.body, &mut names);
                    let mut seen = BTreeSet::new();
                    for (name, field) in names {
                        if name == param {
                            continue;
                        }
                        if let Some(&v) = self.env.get(&name)
                            && seen.insert((name.clone(), field.clone()))
                        {
                            captures.push(Input {
                                name: name.clone(),
                                value: v,
                                field,
                            });
                        }
                    }
                    let mut fcalls = Vec::new();
                    collect_calls_block(&c.body, &mut fcalls);
                    for (f, _) in fcalls {
                        if !calls.contains(&f) {
                            calls.push(f);
                        }
                    }
                }
                inputs.extend(captures.iter().cloned());
                self.update_kind(
                    model,
                    &role,
                    inst,
                    &call,
                    Loss {
                        param,
                        calls,
                        captures,
                    },
                )
            }
        };
        let label = format!("{role}.{}", op.as_str());
        let ranks = self.instances[inst].ranks.clone();
        let id = self.push_op(label, kind, Some(inst), ranks, inputs);
        self.ops[id as usize].uses = vec![self.instances[inst].id.clone()];
        if op == prog::Op::Update {
            // Whatever read the weights this step reads them before they change.
            let me = self.instances[inst].id.clone();
            let readers: Vec<u32> = self.ops[..id as usize]
                .iter()
                .filter(|o| o.uses.contains(&me))
                .map(|o| o.id)
                .collect();
            let deps = &mut self.ops[id as usize].deps;
            deps.extend(readers);
            deps.sort();
            deps.dedup();
            self.updates.insert(model, id);
            return Lowered::Unknown;
        }
        let ty = self.type_at(e.span).map_or_else(
            || ValueType::Opaque {
                opaque: "unknown".into(),
            },
            |t| parse_type(t),
        );
        let rows = rows_of(&ty).or(batch);
        let v = self.new_value(format!("{role}.{}#", op.as_str()), id, ty, rows);
        self.ops[id as usize].outputs.push(v);
        Lowered::Value { id: v, field: None }
    }

    fn update_kind(
        &self,
        model: usize,
        role: &str,
        inst: usize,
        call: &prog::RoleCall,
        loss: Loss,
    ) -> OpKind {
        let m = &self.program.models[model];
        let l = self.instances[inst].layout;
        let batch = count(call.batch);
        let epochs = count(call.epochs).unwrap_or(1);
        let minibatch = count(call.minibatch).or(batch);
        let minibatches = match (batch, minibatch) {
            (Some(b), Some(mb)) if mb > 0 => Some(b.div_ceil(mb)),
            _ => None,
        };
        let per_rank = minibatch.map(|mb| mb.div_ceil(u64::from(l.data_ranks())));
        let micro = l.micro.or(per_rank);
        let accumulation = match (per_rank, micro) {
            (Some(p), Some(mi)) if mi > 0 => Some(p.div_ceil(mi).max(1)),
            _ => None,
        };
        let params = m
            .arch
            .as_ref()
            .map_or(0, |a| memory::role_parameters(m.kind, a));
        let b = m.precision.bytes();
        let shard = params * b / u64::from(l.tp * l.pp);
        let mut collectives = Vec::new();
        if l.fsdp > 1 {
            for when in ["before_forward", "before_backward"] {
                collectives.push(GradCollective {
                    when: when.into(),
                    collective: Collective::AllGather,
                    tensor: "parameters".into(),
                    axis: Axis::Fsdp,
                    bytes: shard / u64::from(l.fsdp),
                });
            }
            collectives.push(GradCollective {
                when: "after_backward".into(),
                collective: Collective::ReduceScatter,
                tensor: "gradients".into(),
                axis: Axis::Fsdp,
                bytes: shard,
            });
        }
        if l.dp > 1 {
            collectives.push(GradCollective {
                when: "after_accumulation".into(),
                collective: Collective::AllReduce,
                tensor: "gradients".into(),
                axis: Axis::Dp,
                bytes: shard / u64::from(l.fsdp),
            });
        }
        OpKind::Update {
            role: role.to_string(),
            batch,
            epochs,
            minibatch,
            minibatches,
            micro,
            accumulation,
            optimizer_steps: minibatches.map(|n| n * epochs),
            optimizer: m.optimizer.as_ref().filter(|_| !m.frozen).map(optimizer),
            loss,
            collectives,
        }
    }

    fn new_value(&mut self, name: String, producer: u32, ty: ValueType, rows: Option<u64>) -> u32 {
        let id = self.values.len() as u32;
        let name = if name.ends_with('#') {
            format!("{name}{id}")
        } else {
            name
        };
        let at = self.ops[producer as usize]
            .instance
            .as_deref()
            .map_or(self.driver, |id| self.instance_index(id));
        let split = if is_scalar(&ty) {
            Split::Replicated
        } else {
            Split::Rows {
                parts: self.instances[at].layout.data_ranks(),
                rows,
            }
        };
        self.values.push(Value {
            id,
            name,
            producer: Some(producer),
            at: self.instances[at].id.clone(),
            ty,
            split,
        });
        id
    }

    /// Adds an op; its inputs get edges, transfers where the layouts differ, and dependencies.
    fn push_op(
        &mut self,
        label: String,
        kind: OpKind,
        instance: Option<usize>,
        ranks: RankSet,
        inputs: Vec<Input>,
    ) -> u32 {
        let mut deps = BTreeSet::new();
        let mut edges = Vec::new();
        for input in &inputs {
            let v = input.value;
            // A carried value is there when the step starts: no edge, no transfer (its readers
            // run where it is held, `carried_ranks` checks).
            let Some(producer) = self.values[v as usize].producer else {
                continue;
            };
            if let Some(inst) = instance {
                self.settle(producer, inst);
            }
            let (via, split) = match instance {
                Some(inst) => {
                    let needs_whole = matches!(kind, OpKind::Log { .. });
                    self.bring(v, inst, needs_whole, &ranks)
                }
                None => (None, self.values[v as usize].split.clone()),
            };
            deps.insert(via.unwrap_or(producer));
            let ty = field_type(&self.values[v as usize].ty, input.field.as_deref());
            edges.push((v, input.field.clone(), producer, ty, split, via));
        }
        let id = self.ops.len() as u32;
        for (value, field, from, ty, split, via) in edges {
            self.edges.push(Edge {
                value,
                field,
                from,
                to: id,
                ty,
                split,
                via,
            });
        }
        self.ops.push(Op {
            id,
            label,
            kind,
            instance: instance.map(|i| self.instances[i].id.clone()),
            ranks,
            uses: Vec::new(),
            inputs,
            outputs: Vec::new(),
            deps: deps.into_iter().collect(),
            level: 0,
            every: self.every,
        });
        id
    }

    /// Places a floating producer (`sample`) on its first consumer's instance.
    fn settle(&mut self, producer: u32, inst: usize) {
        if !self.floating.remove(&producer) {
            return;
        }
        let op = &mut self.ops[producer as usize];
        op.instance = Some(self.instances[inst].id.clone());
        op.ranks = self.instances[inst].ranks.clone();
        for &v in &op.outputs.clone() {
            let value = &mut self.values[v as usize];
            value.at = self.instances[inst].id.clone();
            if let Split::Rows { rows, .. } = value.split {
                value.split = Split::Rows {
                    parts: self.instances[inst].layout.data_ranks(),
                    rows,
                };
            }
        }
    }

    fn instance_index(&self, id: &str) -> usize {
        self.instances
            .iter()
            .position(|i| i.id == id)
            .expect("an instance of the plan")
    }

    /// Makes value `v` available to `inst` (on `ranks`); returns the transfer (if one is needed)
    /// and the split the consumer sees.
    fn bring(&mut self, v: u32, inst: usize, whole: bool, ranks: &RankSet) -> (Option<u32>, Split) {
        let value = self.values[v as usize].clone();
        let src = self.instance_index(&value.at);
        let dst_split = if whole || value.split == Split::Replicated {
            Split::Replicated
        } else {
            let rows = match value.split {
                Split::Rows { rows, .. } => rows,
                Split::Replicated => None,
            };
            Split::Rows {
                parts: self.instances[inst].layout.data_ranks(),
                rows,
            }
        };
        if let Some(&t) = self.transfers.get(&(v, inst)) {
            return (t, dst_split);
        }
        let transfer = self.make_transfer(&value, src, inst, whole, ranks);
        let id = transfer.map(|(collective, sends)| {
            let from = self.instances[src].id.clone();
            let to = self.instances[inst].id.clone();
            let total = value_bytes(&value.ty);
            let bytes = total.map(|t| {
                sends
                    .iter()
                    .map(|s| {
                        t * (s.rows.end - s.rows.start) / s.rows.of.max(1) * u64::from(s.to.len())
                    })
                    .sum()
            });
            let mut all = RankSet::from_ranks(sends.iter().map(|s| s.from));
            for s in &sends {
                all = all.union(&s.to);
            }
            let kind = OpKind::Transfer {
                collective,
                value: v,
                from: from.clone(),
                to: to.clone(),
                bytes,
                sends,
            };
            let label = format!("transfer {} {from}→{to}", value.name);
            let producer = value.producer.unwrap_or_default();
            let tid = self.ops.len() as u32;
            self.edges.push(Edge {
                value: v,
                field: None,
                from: producer,
                to: tid,
                ty: value.ty.clone(),
                split: value.split.clone(),
                via: None,
            });
            self.ops.push(Op {
                id: tid,
                label,
                kind,
                instance: None,
                ranks: all,
                uses: Vec::new(),
                inputs: vec![Input {
                    name: value.name.clone(),
                    value: v,
                    field: None,
                }],
                outputs: Vec::new(),
                deps: vec![producer],
                level: 0,
                every: self.every,
            });
            tid
        });
        if !whole {
            self.transfers.insert((v, inst), id);
        }
        (id, dst_split)
    }

    fn make_transfer(
        &self,
        value: &Value,
        src: usize,
        dst: usize,
        whole: bool,
        ranks: &RankSet,
    ) -> Option<(Collective, Vec<Send>)> {
        let s = &self.instances[src];
        let d = &self.instances[dst];
        match &value.split {
            Split::Replicated => {
                let missing: Vec<u32> = ranks.iter().filter(|r| !s.ranks.contains(*r)).collect();
                if missing.is_empty() {
                    return None;
                }
                let from = s.ranks.nth(0)?;
                Some((
                    Collective::Broadcast,
                    vec![Send {
                        from,
                        to: RankSet::from_ranks(missing),
                        rows: Slice {
                            start: 0,
                            end: 1,
                            of: 1,
                        },
                    }],
                ))
            }
            Split::Rows { parts, rows } => {
                let ds = *parts;
                if whole {
                    let mut sends = Vec::new();
                    let of = rows.unwrap_or(u64::from(ds));
                    for i in 0..ds {
                        let (a, b) = block(of, ds, i);
                        let from = s.data_leader(i)?;
                        let to = RankSet::from_ranks(
                            ranks.iter().filter(|r| !s.data_group(i).contains(*r)),
                        );
                        if !to.is_empty() && a < b {
                            sends.push(Send {
                                from,
                                to,
                                rows: Slice {
                                    start: a,
                                    end: b,
                                    of,
                                },
                            });
                        }
                    }
                    return (!sends.is_empty()).then_some((Collective::Gather, sends));
                }
                let dd = d.layout.data_ranks();
                let same = ds == dd && (0..ds).all(|i| s.data_group(i) == d.data_group(i));
                if same {
                    return None;
                }
                let of = rows.unwrap_or_else(|| lcm(u64::from(ds), u64::from(dd)));
                let mut sends = Vec::new();
                for j in 0..dd {
                    let (ja, jb) = block(of, dd, j);
                    let group = d.data_group(j);
                    for i in 0..ds {
                        let (ia, ib) = block(of, ds, i);
                        let (a, b) = (ja.max(ia), jb.min(ib));
                        if a >= b {
                            continue;
                        }
                        let holders = s.data_group(i);
                        let to =
                            RankSet::from_ranks(group.iter().filter(|r| !holders.contains(*r)));
                        if to.is_empty() {
                            continue;
                        }
                        sends.push(Send {
                            from: s.data_leader(i)?,
                            to,
                            rows: Slice {
                                start: a,
                                end: b,
                                of,
                            },
                        });
                    }
                }
                if sends.is_empty() {
                    return None;
                }
                let collective = if ds == 1 && dd > 1 {
                    Collective::Scatter
                } else if ds > 1 && dd == 1 {
                    Collective::Gather
                } else if !s.ranks.intersects(&d.ranks) {
                    Collective::P2p
                } else {
                    Collective::AllToAll
                };
                Some((collective, sends))
            }
        }
    }

    // ----------------------------------------------------------------------------------------
    // Weight sync, checkpoints, levels

    fn weight_syncs(&mut self) {
        let updates: Vec<(usize, u32)> = self.updates.iter().map(|(&m, &o)| (m, o)).collect();
        for (model, update) in updates {
            let Some(train) = self.instance_for(model, Phase::Train) else {
                continue;
            };
            let m = &self.program.models[model];
            if m.frozen || m.optimizer.is_none() {
                continue;
            }
            let targets: Vec<usize> = (0..self.instances.len())
                .filter(|&i| i != train && self.instances[i].role == m.name)
                .collect();
            let layers = m.arch.as_ref().map_or(1, |a| a.layers.max(1));
            let bytes = m
                .arch
                .as_ref()
                .map_or(0, |a| memory::role_parameters(m.kind, a))
                * m.precision.bytes();
            for target in targets {
                let moves =
                    crate::reshard::moves(&self.instances[train], &self.instances[target], layers);
                let (from, to) = (
                    self.instances[train].id.clone(),
                    self.instances[target].id.clone(),
                );
                let colocated = self.instances[train]
                    .ranks
                    .intersects(&self.instances[target].ranks);
                let ranks = self.instances[train]
                    .ranks
                    .union(&self.instances[target].ranks);
                let kind = OpKind::WeightSync {
                    role: m.name.clone(),
                    from: from.clone(),
                    to: to.clone(),
                    colocated,
                    bytes,
                    moves,
                };
                let id = self.ops.len() as u32;
                // Runs after the update and after every reader of the destination this step.
                let mut deps: BTreeSet<u32> = BTreeSet::from([update]);
                deps.extend(
                    self.ops
                        .iter()
                        .filter(|o| o.uses.contains(&to))
                        .map(|o| o.id),
                );
                self.ops.push(Op {
                    id,
                    label: format!("weight_sync {from}→{to}"),
                    kind,
                    instance: None,
                    ranks,
                    uses: vec![from, to],
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    deps: deps.into_iter().collect(),
                    level: 0,
                    every: None,
                });
            }
        }
    }

    /// A checkpoint saves the weights the step's update wrote. (Its op was created where the
    /// statement is; when the update comes later in the text the dependency is added here and the
    /// ops are re-ordered so that dependencies come first.)
    fn checkpoint_deps(&mut self) {
        let mut changed = false;
        for i in 0..self.ops.len() {
            if let OpKind::Checkpoint { role, .. } = &self.ops[i].kind {
                let Some(model) = self.program.model_index(role) else {
                    continue;
                };
                if let Some(&u) = self.updates.get(&model)
                    && !self.ops[i].deps.contains(&u)
                {
                    self.ops[i].deps.push(u);
                    self.ops[i].deps.sort();
                    changed |= u as usize > i;
                }
            }
        }
        if changed {
            self.reorder();
        }
    }

    /// Renumbers ops so that every dependency comes first (a stable topological order).
    fn reorder(&mut self) {
        let n = self.ops.len();
        let mut order = Vec::with_capacity(n);
        let mut placed = vec![false; n];
        while order.len() < n {
            let before = order.len();
            for i in 0..n {
                if !placed[i] && self.ops[i].deps.iter().all(|&d| placed[d as usize]) {
                    placed[i] = true;
                    order.push(i);
                    break;
                }
            }
            if order.len() == before {
                self.errors.push(lower_err(
                    "the pipeline's operations depend on each other in a cycle",
                ));
                return;
            }
        }
        let mut new_id = vec![0u32; n];
        for (new, &old) in order.iter().enumerate() {
            new_id[old] = new as u32;
        }
        let mut ops: Vec<Op> = order.iter().map(|&o| self.ops[o].clone()).collect();
        for op in &mut ops {
            op.id = new_id[op.id as usize];
            for d in &mut op.deps {
                *d = new_id[*d as usize];
            }
            op.deps.sort();
        }
        self.ops = ops;
        for v in &mut self.values {
            v.producer = v.producer.map(|p| new_id[p as usize]);
        }
        for e in &mut self.edges {
            e.from = new_id[e.from as usize];
            e.to = new_id[e.to as usize];
            e.via = e.via.map(|x| new_id[x as usize]);
        }
        for u in self.updates.values_mut() {
            *u = new_id[*u as usize];
        }
    }

    fn levels(&mut self) {
        for i in 0..self.ops.len() {
            let level = self.ops[i]
                .deps
                .iter()
                .map(|&d| self.ops[d as usize].level + 1)
                .max()
                .unwrap_or(0);
            self.ops[i].level = level;
        }
        self.edges
            .sort_by_key(|e| (e.to, e.value, e.field.clone(), e.from));
    }

    // ----------------------------------------------------------------------------------------
    // Per-rank programs and memory

    /// The order the ranks run the step's ops in, one sequence for all (each rank runs its own
    /// ops in this order, so ops that span ranks come in the same order on each of them): list
    /// scheduling on the cost model's `seconds`. Ranks that run the same ops form one timeline;
    /// again and again, the op that can start first (its dependencies done, its ranks free) is
    /// placed, ties going to (1) an op that keeps the instances a shared device holds, (2) one
    /// that spans several timelines (a transfer or weight sync that feeds other ranks: it costs
    /// its sender little and lets the receiver start), (3) the smallest bound on the step it
    /// leaves, (4) the lower op id. The bound of placing `i` before the other ready ops of its
    /// timelines is `max(tail(i), time(i) + max tail(j))`, where `tail` is the longest remaining
    /// path to the end of the step (the op's own time included): the exchange argument for two
    /// ops, which puts a short op whose path continues on other ranks (a kernel whose result is
    /// sent) before a long one that ends here, even when the long one's path is longer. So a rank
    /// sends what another waits for before its own long, unrelated work. Deterministic: no clock,
    /// no hash.
    fn schedule(&self, seconds: &[f64], world: u32) -> Vec<usize> {
        let n = self.ops.len();
        let mut timelines: BTreeMap<Vec<usize>, u32> = BTreeMap::new();
        for (rank, _) in self.uniform_ranks(world) {
            let mine: Vec<usize> = (0..n)
                .filter(|&i| self.ops[i].ranks.contains(rank))
                .collect();
            timelines.entry(mine).or_insert(rank);
        }
        let mut lines_of: Vec<Vec<usize>> = vec![Vec::new(); n];
        // The instances of each timeline's devices, when there are several (else none: nothing
        // to keep).
        let mut shared: Vec<BTreeSet<&str>> = Vec::new();
        for (t, (mine, &rank)) in timelines.iter().enumerate() {
            for &i in mine {
                lines_of[i].push(t);
            }
            let here: BTreeSet<&str> = self
                .instances
                .iter()
                .filter(|i| i.ranks.contains(rank))
                .map(|i| i.id.as_str())
                .collect();
            shared.push(if here.len() > 1 {
                here
            } else {
                BTreeSet::new()
            });
        }
        let duration = |i: usize| {
            if lines_of[i].is_empty() {
                0.0
            } else {
                seconds.get(i).copied().unwrap_or(1.0)
            }
        };
        // Dependencies come first (`levels` relies on it too), so one backward pass suffices.
        let mut tail = vec![0.0f64; n];
        for i in (0..n).rev() {
            let after = (i + 1..n)
                .filter(|&j| self.ops[j].deps.contains(&(i as u32)))
                .map(|j| tail[j])
                .fold(0.0, f64::max);
            tail[i] = duration(i) + after;
        }
        let mut free = vec![0.0f64; timelines.len()];
        let mut holds: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); timelines.len()];
        let mut finish: Vec<Option<f64>> = vec![None; n];
        let mut order = Vec::with_capacity(n);
        while order.len() < n {
            // The ready ops and when each could start.
            let mut ready: Vec<(usize, f64)> = Vec::new();
            for i in 0..n {
                if finish[i].is_some() {
                    continue;
                }
                let mut start = 0.0f64;
                let mut deps_done = true;
                for &d in &self.ops[i].deps {
                    match finish.get(d as usize).copied().flatten() {
                        Some(t) => start = start.max(t),
                        None => deps_done = false,
                    }
                }
                if deps_done {
                    for &t in &lines_of[i] {
                        start = start.max(free[t]);
                    }
                    ready.push((i, start));
                }
            }
            // Only ops that could start first compete; per timeline, the two longest tails
            // among them (the longest other than `i` is one of the two).
            let first = ready.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
            let mut longest: Vec<[Option<usize>; 2]> = vec![[None, None]; timelines.len()];
            for &(i, start) in &ready {
                if start > first {
                    continue;
                }
                for &t in &lines_of[i] {
                    let top = &mut longest[t];
                    if top[0].is_none_or(|a| tail[i] > tail[a]) {
                        top[1] = top[0];
                        top[0] = Some(i);
                    } else if top[1].is_none_or(|b| tail[i] > tail[b]) {
                        top[1] = Some(i);
                    }
                }
            }
            let bound = |i: usize| -> f64 {
                let others = lines_of[i]
                    .iter()
                    .filter_map(|&t| longest[t].into_iter().flatten().find(|&j| j != i))
                    .map(|j| tail[j])
                    .fold(0.0, f64::max);
                tail[i].max(duration(i) + others)
            };
            let mut best: Option<(f64, u8, bool, f64, usize)> = None;
            for &(i, start) in &ready {
                let mut switch = 0u8;
                for &t in &lines_of[i] {
                    let need: Vec<&str> = self.ops[i]
                        .uses
                        .iter()
                        .map(String::as_str)
                        .filter(|u| shared[t].contains(u))
                        .collect();
                    if !need.is_empty() && !need.iter().all(|u| holds[t].contains(u)) {
                        switch = 1;
                    }
                }
                let key = (start, switch, lines_of[i].len() <= 1, bound(i), i);
                let better = best.is_none_or(|b| {
                    key.0
                        .total_cmp(&b.0)
                        .then(key.1.cmp(&b.1))
                        .then(key.2.cmp(&b.2))
                        .then(key.3.total_cmp(&b.3))
                        .then(key.4.cmp(&b.4))
                        .is_lt()
                });
                if better {
                    best = Some(key);
                }
            }
            // Dependencies always point to earlier ops, so some op is always ready.
            let Some((start, _, _, _, i)) = best else {
                break;
            };
            let end = start + duration(i);
            finish[i] = Some(end);
            for &t in &lines_of[i] {
                free[t] = end;
                let need: BTreeSet<&str> = self.ops[i]
                    .uses
                    .iter()
                    .map(String::as_str)
                    .filter(|u| shared[t].contains(u))
                    .collect();
                if !need.is_empty() {
                    holds[t] = need;
                }
            }
            order.push(i);
        }
        order
    }

    /// The ranks `0..world` cut where any op's, instance's or cluster's ranks start or end:
    /// `(first, end)` runs whose ranks all run the same ops on the same instances of the same
    /// cluster, so per-rank work is per run (a cluster of millions of idle devices is one run).
    fn uniform_ranks(&self, world: u32) -> Vec<(u32, u32)> {
        let sets = self
            .ops
            .iter()
            .map(|o| &o.ranks)
            .chain(self.instances.iter().map(|i| &i.ranks))
            .chain(self.clusters.iter().map(|c| &c.ranks));
        let mut cuts: BTreeSet<u32> = [0, world].into();
        for set in sets {
            for &(a, b) in set.ranges() {
                cuts.extend([a.min(world), b.min(world)]);
            }
        }
        let cuts: Vec<u32> = cuts.into_iter().collect();
        cuts.windows(2).map(|w| (w[0], w[1])).collect()
    }

    fn programs(&self, seconds: &[f64]) -> Vec<RankProgram> {
        let world = self.clusters.last().map_or(0, |c| c.ranks.end());
        let order: Vec<&Op> = self
            .schedule(seconds, world)
            .into_iter()
            .map(|i| &self.ops[i])
            .collect();
        // Weights and training state per device of each instance.
        let sizes: BTreeMap<&str, (u64, u64)> = self
            .instances
            .iter()
            .map(|i| {
                let weights = match i.memory.get("train") {
                    Some(t) => t.weights,
                    None => i.memory.values().map(|m| m.weights).max().unwrap_or(0),
                };
                let training = i
                    .memory
                    .get("train")
                    .map_or(0, |t| t.gradients + t.optimizer_state + t.master_weights);
                (i.id.as_str(), (weights, training))
            })
            .collect();
        let held = |id: &str, part: Part| -> u64 {
            let (w, t) = sizes.get(id).copied().unwrap_or((0, 0));
            if part == Part::All { w + t } else { w }
        };
        let level = |id: &str, want: Part| -> Part {
            if want == Part::All && sizes.get(id).is_some_and(|s| s.1 > 0) {
                Part::All
            } else {
                Part::Weights
            }
        };
        type Key = (Vec<(String, Part)>, Vec<Step>, u64, u64, bool);
        let mut grouped: BTreeMap<Key, Vec<(u32, u32)>> = BTreeMap::new();
        for (rank, end) in self.uniform_ranks(world) {
            let ops: Vec<&Op> = order
                .iter()
                .copied()
                .filter(|o| o.ranks.contains(rank))
                .collect();
            let here: Vec<&Instance> = self
                .instances
                .iter()
                .filter(|i| i.ranks.contains(rank))
                .collect();
            let here_ids: BTreeSet<&str> = here.iter().map(|i| i.id.as_str()).collect();
            let share = here.len() > 1;
            let capacity = self
                .clusters
                .iter()
                .find(|c| c.ranks.contains(rank))
                .map_or(0, |c| c.memory);
            let lower_bound = here
                .iter()
                .any(|i| i.memory.values().any(|m| m.lower_bound));
            let simulate =
                |start: &BTreeMap<String, Part>| -> (BTreeMap<String, Part>, Vec<Step>, u64) {
                    let mut resident = start.clone();
                    let mut steps = Vec::new();
                    let mut peak = 0u64;
                    let sum = |res: &BTreeMap<String, Part>| {
                        res.iter().map(|(r, p)| held(r, *p)).sum::<u64>()
                    };
                    let need_of = |op: &Op| -> BTreeMap<String, Part> {
                        let want = if matches!(op.kind, OpKind::Update { .. }) {
                            Part::All
                        } else {
                            Part::Weights
                        };
                        op.uses
                            .iter()
                            .filter(|u| here_ids.contains(u.as_str()))
                            .map(|u| (u.clone(), level(u, want)))
                            .collect()
                    };
                    // In the schedule's order (which already prefers what the device holds).
                    for op in ops.iter().copied() {
                        let need = need_of(op);
                        if share && !need.is_empty() {
                            for (r, _) in resident.clone() {
                                if !need.contains_key(&r) {
                                    resident.remove(&r);
                                    steps.push(Step::Offload {
                                        instance: r,
                                        part: Part::All,
                                        bytes: sum(&resident),
                                    });
                                }
                            }
                            // Offloads first (they free memory), then onloads.
                            let mut moves: Vec<(bool, &String, Part)> = need
                                .iter()
                                .map(|(n, &w)| (resident.get(n).is_none_or(|&c| c < w), n, w))
                                .collect();
                            moves.sort_by_key(|(onload, n, _)| (*onload, (*n).clone()));
                            for (_, n, want) in moves {
                                let step = match (resident.get(n).copied(), want) {
                                    (None, w) => Some((true, w)),
                                    (Some(Part::Weights), Part::All) => {
                                        Some((true, Part::TrainingState))
                                    }
                                    (Some(Part::All), Part::Weights) => {
                                        Some((false, Part::TrainingState))
                                    }
                                    _ => None,
                                };
                                if let Some((onload, part)) = step {
                                    resident.insert(n.clone(), want);
                                    let bytes = sum(&resident);
                                    peak = peak.max(bytes);
                                    steps.push(if onload {
                                        Step::Onload {
                                            instance: n.clone(),
                                            part,
                                            bytes,
                                        }
                                    } else {
                                        Step::Offload {
                                            instance: n.clone(),
                                            part,
                                            bytes,
                                        }
                                    });
                                }
                            }
                        }
                        let bytes = sum(&resident) + self.transient(op, &resident, &held);
                        peak = peak.max(bytes);
                        steps.push(Step::Run { op: op.id, bytes });
                    }
                    (resident, steps, peak)
                };
            let start: BTreeMap<String, Part> = if share {
                // The steady state: what a step leaves is what the next one starts with.
                let mut start = simulate(&BTreeMap::new()).0;
                for _ in 0..4 {
                    let end = simulate(&start).0;
                    if end == start {
                        break;
                    }
                    start = end;
                }
                start
            } else {
                here_ids
                    .iter()
                    .map(|id| (id.to_string(), level(id, Part::All)))
                    .collect()
            };
            let (_, steps, peak) = simulate(&start);
            grouped
                .entry((
                    start.into_iter().collect(),
                    steps,
                    peak,
                    capacity,
                    lower_bound,
                ))
                .or_default()
                .push((rank, end));
        }
        let mut programs: Vec<RankProgram> = grouped
            .into_iter()
            .map(
                |((resident, steps, peak, capacity, lower_bound), ranks)| RankProgram {
                    ranks: RankSet::from_ranges(ranks),
                    resident: resident.into_iter().collect(),
                    steps,
                    peak,
                    capacity,
                    lower_bound,
                },
            )
            .collect();
        programs.sort_by_key(|p| p.ranks.nth(0));
        programs
    }

    /// Bytes an op needs beyond the resident state: the phase's activations / KV cache, and the
    /// part of its phase's state the resident state does not cover (an FSDP-gathered layer).
    fn transient(
        &self,
        op: &Op,
        resident: &BTreeMap<String, Part>,
        held: &dyn Fn(&str, Part) -> u64,
    ) -> u64 {
        let phase = match &op.kind {
            OpKind::Generate { .. } => "generate",
            OpKind::Logprobs { .. } => "logprobs",
            OpKind::Values { .. } => "values",
            OpKind::Score { .. } => "score",
            OpKind::Update { .. } => "train",
            _ => return 0,
        };
        let Some(inst) = op
            .instance
            .as_deref()
            .and_then(|id| self.instances.iter().find(|i| i.id == id))
        else {
            return 0;
        };
        let Some(m) = inst.memory.get(phase) else {
            return 0;
        };
        let have = resident.get(&inst.id).map_or(0, |p| held(&inst.id, *p));
        m.state().saturating_sub(have) + m.transient()
    }
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

fn optimizer(o: &prog::Optimizer) -> Optimizer {
    Optimizer {
        name: o.name.clone(),
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

fn binary_name(op: &str) -> &'static str {
    match op {
        "+" => "add",
        "-" => "sub",
        "*" => "mul",
        "/" => "div",
        "%" => "rem",
        "==" => "eq",
        "!=" => "ne",
        "<" => "lt",
        "<=" => "le",
        ">" => "gt",
        ">=" => "ge",
        "&&" => "and",
        "||" => "or",
        _ => "binary",
    }
}

fn arg_name(a: &ast::Arg, i: usize, params: &[&str]) -> String {
    match &a.name {
        Some(n) => n.name.clone(),
        None => params.get(i).map_or_else(
            || {
                if i == 0 {
                    "x".into()
                } else {
                    format!("arg{i}")
                }
            },
            |p| p.to_string(),
        ),
    }
}

/// (batch reduction, grouped) of a builtin call: a `sum`/`mean`/`count`/`min`/`max` over every
/// axis (no `over:`) or over `B` reduces over the batch; `group_*` works on groups.
fn builtin_facts(name: &str, args: &[ast::Arg]) -> (bool, bool) {
    let over = args
        .iter()
        .find(|a| a.name.as_ref().is_some_and(|n| n.name == "over"));
    let reduces = match name {
        "sum" | "mean" | "count" => true,
        "min" | "max" => args.iter().filter(|a| a.name.is_none()).count() == 1,
        _ => false,
    };
    let over_batch = match over {
        None => true,
        Some(a) => matches!(&a.value.kind, ExprKind::Name(n) if n.name == "B"),
    };
    (reduces && over_batch, name.starts_with("group_"))
}

fn collect_calls_block(b: &ast::Block, out: &mut Vec<(String, Vec<ast::Arg>)>) {
    for s in &b.stmts {
        match &s.kind {
            StmtKind::Let { value, .. }
            | StmtKind::Assign { value, .. }
            | StmtKind::Emit { value }
            | StmtKind::Expr(value) => collect_calls(value, out),
            StmtKind::Loop { body, .. } | StmtKind::Every { body, .. } => {
                collect_calls_block(body, out)
            }
            StmtKind::Log { record } => record
                .fields
                .iter()
                .for_each(|f| collect_calls(&f.value, out)),
            StmtKind::Checkpoint { .. } => {}
        }
    }
}

fn collect_calls(e: &ast::Expr, out: &mut Vec<(String, Vec<ast::Arg>)>) {
    match &e.kind {
        ExprKind::Call {
            callee,
            args,
            closure,
        } => {
            if let ExprKind::Name(n) = &callee.kind {
                out.push((n.name.clone(), args.clone()));
            } else {
                collect_calls(callee, out);
            }
            args.iter().for_each(|a| collect_calls(&a.value, out));
            if let Some(c) = closure {
                collect_calls_block(&c.body, out);
            }
        }
        ExprKind::Member { base, .. } => collect_calls(base, out),
        ExprKind::Index { base, indices } => {
            collect_calls(base, out);
            indices.iter().for_each(|i| collect_calls(i, out));
        }
        ExprKind::Unary { operand, .. } => collect_calls(operand, out),
        ExprKind::Binary { lhs, rhs, .. } => {
            collect_calls(lhs, out);
            collect_calls(rhs, out);
        }
        ExprKind::Paren(inner) => collect_calls(inner, out),
        ExprKind::Record(r) => r.fields.iter().for_each(|f| collect_calls(&f.value, out)),
        ExprKind::Scan(s) => {
            s.carries.iter().for_each(|c| collect_calls(&c.init, out));
            collect_calls_block(&s.body, out);
        }
        ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) | ExprKind::Name(_) => {}
    }
}

/// Names read by a block (with the field when read as `name.field`), in order.
fn collect_reads_block(b: &ast::Block, out: &mut Vec<(String, Option<String>)>) {
    for s in &b.stmts {
        match &s.kind {
            StmtKind::Let { value, .. }
            | StmtKind::Assign { value, .. }
            | StmtKind::Emit { value }
            | StmtKind::Expr(value) => collect_reads(value, out),
            StmtKind::Loop { body, .. } | StmtKind::Every { body, .. } => {
                collect_reads_block(body, out)
            }
            StmtKind::Log { record } => record
                .fields
                .iter()
                .for_each(|f| collect_reads(&f.value, out)),
            StmtKind::Checkpoint { .. } => {}
        }
    }
}

fn collect_reads(e: &ast::Expr, out: &mut Vec<(String, Option<String>)>) {
    match &e.kind {
        ExprKind::Name(n) => out.push((n.name.clone(), None)),
        ExprKind::Member { base, name } => match &base.kind {
            ExprKind::Name(n) => out.push((n.name.clone(), Some(name.name.clone()))),
            _ => collect_reads(base, out),
        },
        ExprKind::Call {
            callee,
            args,
            closure,
        } => {
            if !matches!(callee.kind, ExprKind::Name(_)) {
                collect_reads(callee, out);
            }
            args.iter().for_each(|a| collect_reads(&a.value, out));
            if let Some(c) = closure {
                collect_reads_block(&c.body, out);
            }
        }
        ExprKind::Index { base, indices } => {
            collect_reads(base, out);
            indices.iter().for_each(|i| collect_reads(i, out));
        }
        ExprKind::Unary { operand, .. } => collect_reads(operand, out),
        ExprKind::Binary { lhs, rhs, .. } => {
            collect_reads(lhs, out);
            collect_reads(rhs, out);
        }
        ExprKind::Paren(inner) => collect_reads(inner, out),
        ExprKind::Record(r) => r.fields.iter().for_each(|f| collect_reads(&f.value, out)),
        ExprKind::Scan(s) => {
            s.carries.iter().for_each(|c| collect_reads(&c.init, out));
            collect_reads_block(&s.body, out);
        }
        ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) => {}
    }
}

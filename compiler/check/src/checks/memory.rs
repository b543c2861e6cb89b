//! The memory check (E0801): an estimate of the bytes each device holds for every role operation
//! the pipeline runs, against the device's memory.
//!
//! # What is estimated
//!
//! Every distinct `(model, phase)` among the pipeline's role calls (`update` runs in `train`) is
//! estimated on the placement [`Program::placement_for`] gives it; a model whose arch is unknown
//! is skipped (its error was reported already), and so is a phase with no placement or an `auto`
//! one (the planner chooses that layout). When one `(model, phase)` is called more than
//! once, the call with the largest estimate counts. Roles whose placements overlap time-share
//! the devices (the runtime offloads a phase's state while another runs), so a device's peak is
//! the **maximum** over the phases placed on it, not their sum.
//!
//! Notation: `P` parameters of the role, `b` bytes per value of its precision (4 for f32, 2 for
//! bf16/f16), `L` layers, `h` hidden, `a` heads, `v` vocab, `d = h / a` the head dimension;
//! `tp pp fsdp sp dp` the layout's factors (1 when not written), `R = dp·fsdp` the data ranks;
//! `s = prompt_len + response_len` tokens per sequence.
//!
//! `P` is [`Arch::parameters`] for a `CausalLM`; a `ValueModel` or `RewardModel` has an `h×1`
//! head instead of the `v×h` LM head ([`role_parameters`]).
//!
//! ## Training (`update`, phase `train`)
//!
//! Model state, sharded by ZeRO-3/FSDP, tensor and pipeline parallelism (data parallelism
//! replicates it):
//!
//! | term | bytes per device |
//! |---|---|
//! | weights | `P·b / (tp·pp·fsdp)` |
//! | gradients | `P·b / (tp·pp·fsdp)` (trainable models only) |
//! | optimizer state | `8·P / (tp·pp·fsdp)`: Adam's two fp32 moments (`4·P` for SGD with momentum or Lion) |
//! | fp32 master weights | `4·P / (tp·pp·fsdp)` when `b = 2` (so mixed precision is 16 bytes/param, as is f32) |
//!
//! A frozen model (or one without an optimizer) holds its weights only. Under FSDP
//! (`fsdp > 1`) a device also holds, while a layer runs, that layer gathered whole
//! (`P_layer·b/tp`) and, for trainable models, its whole gradient until it is reduce-scattered
//! (`P_layer·b/tp`): counted with the activations, since neither stays between operations (the
//! runtime's FSDP measures exactly these, `runtime/src/parallel/fsdp/memory.rs`).
//!
//! Activations, after Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
//! Transformer Models"), for a micro-batch of `m` sequences: `m` is the layout's `micro`, else
//! the per-rank minibatch `⌈minibatch / R⌉` (`minibatch` defaults to the call's batch). One layer
//! keeps, at 16 bit, `s·m·h·(34 + 5·a·s/h)` bytes; of the 34, 10 are the parts sequence
//! parallelism splits (layer norms, dropout masks, residual inputs) and 24 the parts tensor
//! parallelism splits, as are the `5·a·s/h` attention scores:
//!
//! ```text
//! layer(m) = (b/2) · ( s·m·h·(10/sp + 24/tp) + 5·a·s²·m/tp )
//! ```
//!
//! (`sp = tp` is Megatron's sequence parallelism and gives the paper's `s·m·h·(34 + 5as/h)/tp`.
//! The attention-score term assumes no fused/flash attention, so the estimate errs high.)
//!
//! A pipeline stage holds `⌈L/pp⌉` layers; under the 1F1B schedule the first stage has
//! `k = min(pp, micro-batches per step)` micro-batches in flight (the paper's observation that the
//! first stage stores `pp` micro-batches; `k = 1` without pipeline parallelism or accumulation):
//!
//! ```text
//! activations = k·⌈L/pp⌉·layer(m)                                 (no recompute)
//!             = k·⌈L/pp⌉·b·s·m·h/sp + layer(m)                    (recompute = true)
//!             + 4·m·s·v/tp                                        (CausalLM: fp32 logits of the loss)
//! ```
//!
//! With recomputation only each layer's input (`2·s·m·h` bytes at 16 bit) is kept, plus the full
//! activations of the one layer being recomputed. Stage-0 activations and last-stage logits are
//! summed: a conservative bound for the worst stage.
//!
//! ## Generation (`generate`)
//!
//! Inference engines shard weights by tensor and pipeline parallelism only; `fsdp` ranks act as
//! replicas. With `n = ⌈batch / R⌉` sequences per replica:
//!
//! ```text
//! weights     = P·b / (tp·pp)
//! KV cache    = 2·⌈L/pp⌉·⌈kv_heads/tp⌉·d·s·n·b      (= 2·L·kv_heads·d·s·n·b/(tp·pp) when they divide;
//!                                                    KV heads are replicated when tp > kv_heads)
//! activations = 4·n·v/tp                             (CausalLM: fp32 logits of one decode step)
//! ```
//!
//! ## Forward passes (`logprobs`, `values`, `score`)
//!
//! No state for a backward pass: the weights, one layer's activations for the micro-batch
//! (`m` = `micro`, else `⌈batch / R⌉`) and the log-prob logits:
//!
//! ```text
//! weights     = P·b / (tp·pp·fsdp) + (fsdp > 1 ? P_layer·b/tp : 0)   (FSDP gathers one layer at a time)
//! activations = layer(m) + (logprobs ? 4·m·s·v/tp : 0)
//! ```
//!
//! ## Unknowns
//!
//! A batch, prompt length or response length the program does not fix counts as 0 in the terms
//! that use it; the [`Breakdown`] lists them in `unknown`, which makes its total a lower bound
//! (the diagnostic says "at least" and the table marks the rows).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::program::*;
use rlc_diagnostics::{Code, Diagnostic};

const KIB: f64 = 1024.0;
const GIB: f64 = KIB * KIB * KIB;

/// One row of a [`Breakdown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Term {
    Weights,
    Gradients,
    OptimizerState,
    MasterWeights,
    Activations,
    KvCache,
}

impl Term {
    pub const ALL: [Term; 6] = [
        Term::Weights,
        Term::Gradients,
        Term::OptimizerState,
        Term::MasterWeights,
        Term::Activations,
        Term::KvCache,
    ];

    /// The row's name in the breakdown table.
    pub fn label(self) -> &'static str {
        match self {
            Term::Weights => "weights",
            Term::Gradients => "gradients",
            Term::OptimizerState => "optimizer state",
            Term::MasterWeights => "fp32 master weights",
            Term::Activations => "activations",
            Term::KvCache => "KV cache",
        }
    }
}

/// A quantity the estimate needs that the program does not fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Quantity {
    /// Sequences per step (or per minibatch).
    Batch,
    PromptLen,
    ResponseLen,
}

impl Quantity {
    pub fn as_str(self) -> &'static str {
        match self {
            Quantity::Batch => "batch size",
            Quantity::PromptLen => "prompt length",
            Quantity::ResponseLen => "response length",
        }
    }
}

/// Bytes one device holds for one role phase.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Breakdown {
    pub weights: f64,
    pub gradients: f64,
    pub optimizer_state: f64,
    pub master_weights: f64,
    pub activations: f64,
    pub kv_cache: f64,
    /// Terms that used a quantity the program does not fix, counted as 0 (sorted, no
    /// duplicates). When not empty, [`Breakdown::total`] is a lower bound.
    pub unknown: Vec<(Term, Quantity)>,
}

impl Breakdown {
    pub fn total(&self) -> f64 {
        Term::ALL.iter().map(|&t| self.get(t)).sum()
    }

    pub fn get(&self, term: Term) -> f64 {
        match term {
            Term::Weights => self.weights,
            Term::Gradients => self.gradients,
            Term::OptimizerState => self.optimizer_state,
            Term::MasterWeights => self.master_weights,
            Term::Activations => self.activations,
            Term::KvCache => self.kv_cache,
        }
    }

    /// Weights, gradients, optimizer state and master weights: what sharding divides.
    pub fn model_state(&self) -> f64 {
        self.weights + self.gradients + self.optimizer_state + self.master_weights
    }

    /// Whether some term counted an unknown quantity as 0.
    pub fn is_lower_bound(&self) -> bool {
        !self.unknown.is_empty()
    }

    fn mark(&mut self, term: Term, quantity: Quantity) {
        if let Err(at) = self.unknown.binary_search(&(term, quantity)) {
            self.unknown.insert(at, (term, quantity));
        }
    }
}

/// The estimate of one role phase on one device of its placement.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseMemory {
    pub model: usize,
    pub phase: Phase,
    /// Index into [`Program::placements`].
    pub placement: usize,
    pub breakdown: Breakdown,
}

/// A run of devices that hold the same phases, and those phases (each device holds them all,
/// time-shared).
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceMemory {
    pub cluster: usize,
    /// The devices, never empty; the runs of a cluster do not overlap.
    pub devices: std::ops::Range<u64>,
    /// Ordered by `(model, phase)`.
    pub phases: Vec<PhaseMemory>,
    /// The largest phase total (phases time-share the device).
    pub peak: f64,
    /// `(model, phase)` of the peak (the first one on a tie).
    pub peak_phase: Option<(usize, Phase)>,
    /// Bytes of device memory.
    pub capacity: f64,
}

/// Parameters of a role: [`Arch::parameters`] for a `CausalLM`; a value or reward model swaps
/// the `vocab×hidden` LM head for a `hidden×1` head.
pub fn role_parameters(kind: RoleKind, arch: &Arch) -> u64 {
    match kind {
        RoleKind::CausalLM => arch.parameters(),
        RoleKind::ValueModel | RoleKind::RewardModel => {
            let tied = Arch {
                tie_embeddings: true,
                ..arch.clone()
            };
            tied.parameters() + arch.hidden
        }
    }
}

/// Parameters of one transformer layer (attention, MLP, norms).
pub fn layer_parameters(arch: &Arch) -> u64 {
    let empty = Arch {
        layers: 0,
        ..arch.clone()
    };
    (arch.parameters() - empty.parameters()) / arch.layers.max(1)
}

/// Bytes of optimizer state per parameter: two fp32 moments for Adam-like optimizers, one for
/// SGD with momentum and Lion.
fn optimizer_bytes_per_param(optimizer: &Optimizer) -> f64 {
    let name = optimizer.name.to_ascii_lowercase();
    if name.contains("sgd") || name.contains("lion") {
        4.0
    } else {
        8.0
    }
}

fn count(v: Option<Sourced<i64>>) -> Option<u64> {
    v.map(|s| s.value.max(0) as u64)
}

/// Activations one layer keeps for `m` sequences of `s` tokens (see the module docs).
fn layer_activations(arch: &Arch, layout: &Layout, bytes: f64, s: f64, m: f64) -> f64 {
    let (h, a) = (arch.hidden as f64, arch.heads as f64);
    let (tp, sp) = (layout.tp().max(1) as f64, layout.sp().max(1) as f64);
    bytes / 2.0 * (s * m * h * (10.0 / sp + 24.0 / tp) + 5.0 * a * s * s * m / tp)
}

/// Bytes of a finished rollout per row and position (see the generate phase of [`breakdown`]).
pub const ROLLOUT_BYTES_PER_POSITION: f64 = 31.0;

/// The per-device estimate of `model` running `phase` with `layout` for `call`.
pub fn breakdown(
    model: &Model,
    arch: &Arch,
    phase: Phase,
    layout: &Layout,
    call: &RoleCall,
) -> Breakdown {
    let mut out = Breakdown::default();
    let b = model.precision.bytes() as f64;
    let params = role_parameters(model.kind, arch) as f64;
    let (tp, pp, fsdp) = (layout.tp().max(1), layout.pp().max(1), layout.fsdp().max(1));
    let ranks = layout.data_ranks().max(1);
    let prompt = count(call.prompt_len);
    let response = count(call.response_len);
    let s = (prompt.unwrap_or(0) + response.unwrap_or(0)) as f64;
    let mut sequence_unknown = Vec::new();
    if prompt.is_none() {
        sequence_unknown.push(Quantity::PromptLen);
    }
    if response.is_none() {
        sequence_unknown.push(Quantity::ResponseLen);
    }
    let (h, v) = (arch.hidden as f64, arch.vocab as f64);
    let stage_layers = arch.layers.div_ceil(pp) as f64;
    let causal = model.kind == RoleKind::CausalLM;
    let per_rank_batch = count(call.batch).map(|n| n.div_ceil(ranks));

    match phase {
        Phase::Train => {
            let shard = (tp * pp * fsdp) as f64;
            let gathered = if fsdp > 1 {
                layer_parameters(arch) as f64 * b / tp as f64
            } else {
                0.0
            };
            out.weights = params * b / shard;
            let trainable = model.optimizer.is_some() && !model.frozen;
            if let Some(optimizer) = model.optimizer.as_ref().filter(|_| !model.frozen) {
                out.gradients = params * b / shard;
                out.optimizer_state = optimizer_bytes_per_param(optimizer) * params / shard;
                if b < 4.0 {
                    out.master_weights = 4.0 * params / shard;
                }
            }
            let per_rank = count(call.minibatch)
                .or(count(call.batch))
                .map(|n| n.div_ceil(ranks));
            let m = layout.micro().or(per_rank);
            if m.is_none() {
                out.mark(Term::Activations, Quantity::Batch);
            }
            let m = m.unwrap_or(0);
            let in_flight = match per_rank {
                Some(n) => pp.min(n.div_ceil(m.max(1)).max(1)),
                None => {
                    if pp > 1 {
                        out.mark(Term::Activations, Quantity::Batch);
                    }
                    1
                }
            } as f64;
            let m = m as f64;
            let full = layer_activations(arch, layout, b, s, m);
            let kept = if model.recompute {
                in_flight * stage_layers * b * s * m * h / layout.sp().max(1) as f64 + full
            } else {
                in_flight * stage_layers * full
            };
            let logits = if causal {
                4.0 * m * s * v / tp as f64
            } else {
                0.0
            };
            // FSDP's gathered layer and its whole gradient exist only while the layer runs.
            let unsharded = if trainable { 2.0 * gathered } else { gathered };
            out.activations = kept + logits + unsharded;
            for &q in &sequence_unknown {
                out.mark(Term::Activations, q);
            }
        }
        Phase::Generate => {
            out.weights = params * b / (tp * pp) as f64;
            if per_rank_batch.is_none() {
                out.mark(Term::KvCache, Quantity::Batch);
                if causal {
                    out.mark(Term::Activations, Quantity::Batch);
                }
            }
            let n = per_rank_batch.unwrap_or(0) as f64;
            let head_dim = (arch.hidden / arch.heads.max(1)) as f64;
            let kv_heads = arch.kv_heads.div_ceil(tp) as f64;
            out.kv_cache = 2.0 * stage_layers * kv_heads * head_dim * s * n * b;
            for &q in &sequence_unknown {
                out.mark(Term::KvCache, q);
            }
            if causal {
                out.activations = 4.0 * n * v / tp as f64;
            }
            // Generating `staleness` steps ahead keeps that many finished rollouts waiting for
            // training: per position a token (8 bytes), the sampler's log-prob (4), the version
            // of the weights that sampled it (8), its masks (`mask`, `last`, attention: 3), and
            // the target (8).
            let ahead = call
                .sampling
                .as_ref()
                .and_then(|s| s.staleness)
                .map_or(0, |s| s.value.max(0)) as f64;
            out.activations += ahead * n * s * ROLLOUT_BYTES_PER_POSITION;
        }
        Phase::Logprobs | Phase::Values | Phase::Score => {
            out.weights = params * b / (tp * pp * fsdp) as f64;
            if fsdp > 1 {
                out.weights += layer_parameters(arch) as f64 * b / tp as f64;
            }
            let m = layout.micro().or(per_rank_batch);
            if m.is_none() {
                out.mark(Term::Activations, Quantity::Batch);
            }
            let m = m.unwrap_or(0) as f64;
            out.activations = layer_activations(arch, layout, b, s, m);
            if phase == Phase::Logprobs && causal {
                out.activations += 4.0 * m * s * v / tp as f64;
            }
            for &q in &sequence_unknown {
                out.mark(Term::Activations, q);
            }
        }
    }
    out
}

/// One estimated phase and the call it came from.
struct Estimated {
    memory: PhaseMemory,
    call: usize,
}

/// Every distinct `(model, phase)` the pipeline runs that has an arch and a placement, ordered by
/// `(model, phase)`.
fn estimate_phases(program: &Program) -> Vec<Estimated> {
    let mut by_phase: BTreeMap<(usize, Phase), Estimated> = BTreeMap::new();
    let Some(pipeline) = &program.pipeline else {
        return Vec::new();
    };
    for (index, call) in pipeline.calls.iter().enumerate() {
        let Some(model) = program.models.get(call.model) else {
            continue;
        };
        let Some(arch) = &model.arch else {
            continue;
        };
        let phase = call.op.phase();
        let Some(placement) = program.placement_index_for(call.model, phase) else {
            continue;
        };
        if program.placements[placement].auto {
            continue;
        }
        let layout = &program.placements[placement].layout;
        let estimated = Estimated {
            memory: PhaseMemory {
                model: call.model,
                phase,
                placement,
                breakdown: breakdown(model, arch, phase, layout, call),
            },
            call: index,
        };
        match by_phase.get_mut(&(call.model, phase)) {
            Some(existing)
                if estimated.memory.breakdown.total() > existing.memory.breakdown.total() =>
            {
                *existing = estimated;
            }
            Some(_) => {}
            None => {
                by_phase.insert((call.model, phase), estimated);
            }
        }
    }
    by_phase.into_values().collect()
}

/// The estimate for every device some role phase of the pipeline runs on, as runs of devices
/// that hold the same phases, ordered by `(cluster, first device)`. Devices outside their cluster
/// are left out (the placement check reports them). The runs are cut where a placement starts or
/// ends: their number, and the work, are those of the placements, not of the devices.
pub fn estimate(program: &Program) -> Vec<DeviceMemory> {
    // (cluster, devices, phase) for each phase, ordered by `(model, phase)`.
    let mut placed = Vec::new();
    for estimated in estimate_phases(program) {
        let memory = estimated.memory;
        let placement = &program.placements[memory.placement];
        let Some(cluster) = program.clusters.get(placement.cluster) else {
            continue;
        };
        let count = cluster.device_count();
        let range = placement.devices.start.min(count)..placement.devices.end.min(count);
        if !range.is_empty() {
            placed.push((placement.cluster, range, memory));
        }
    }
    let mut cuts: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for (cluster, range, _) in &placed {
        cuts.entry(*cluster)
            .or_default()
            .extend([range.start, range.end]);
    }
    let mut runs = Vec::new();
    for (cluster, mut cuts) in cuts {
        cuts.sort_unstable();
        cuts.dedup();
        for pair in cuts.windows(2) {
            let devices = pair[0]..pair[1];
            let mut run = DeviceMemory {
                cluster,
                devices: devices.clone(),
                phases: Vec::new(),
                peak: 0.0,
                peak_phase: None,
                capacity: program.clusters[cluster].device.memory,
            };
            for (_, _, memory) in placed
                .iter()
                .filter(|(c, r, _)| *c == cluster && r.contains(&devices.start))
            {
                let total = memory.breakdown.total();
                if run.peak_phase.is_none() || total > run.peak {
                    run.peak = total;
                    run.peak_phase = Some((memory.model, memory.phase));
                }
                run.phases.push(memory.clone());
            }
            if !run.phases.is_empty() {
                runs.push(run);
            }
        }
    }
    runs
}

/// Reports E0801 once per placement where a phase's estimate exceeds the device memory.
pub fn check(program: &Program, diags: &mut Vec<Diagnostic>) {
    let phases = estimate_phases(program);
    let mut over: BTreeMap<usize, Vec<&Estimated>> = BTreeMap::new();
    for estimated in &phases {
        let placement = &program.placements[estimated.memory.placement];
        let Some(cluster) = program.clusters.get(placement.cluster) else {
            continue;
        };
        if estimated.memory.breakdown.total() > cluster.device.memory {
            over.entry(estimated.memory.placement)
                .or_default()
                .push(estimated);
        }
    }
    for (placement, list) in over {
        let worst = list.iter().fold(list[0], |worst, e| {
            if e.memory.breakdown.total() > worst.memory.breakdown.total() {
                e
            } else {
                worst
            }
        });
        let others: Vec<&Estimated> = list
            .iter()
            .copied()
            .filter(|e| !std::ptr::eq(*e, worst))
            .collect();
        diags.push(diagnostic(program, placement, worst, &others));
    }
}

fn diagnostic(
    program: &Program,
    placement_index: usize,
    worst: &Estimated,
    others: &[&Estimated],
) -> Diagnostic {
    let placement = &program.placements[placement_index];
    let cluster = &program.clusters[placement.cluster];
    let model = &program.models[worst.memory.model];
    let arch = model.arch.as_ref().expect("estimated models have an arch");
    let call = &program
        .pipeline
        .as_ref()
        .expect("estimated from a pipeline")
        .calls[worst.call];
    let memory = &worst.memory;
    let b = &memory.breakdown;
    let capacity = cluster.device.memory;
    let at_least = if b.is_lower_bound() { "at least " } else { "" };
    let role_phase = format!("{}.{}", model.name, memory.phase.as_str());
    let devices = format!(
        "{}[{}..{}]",
        cluster.name, placement.devices.start, placement.devices.end
    );
    let message = format!(
        "`{role_phase}` needs {at_least}{} per device on `{devices}` but {} {} has {}",
        format_bytes(b.total()),
        article(&cluster.device.name),
        cluster.device.name,
        format_bytes(capacity),
    );
    let mut diag = Diagnostic::new(
        Code::OutOfMemory,
        message,
        placement.origin.file,
        placement.origin.span,
    )
    .primary_label(format!(
        "needs {at_least}{} per device with {}",
        format_bytes(b.total()),
        layout_text(&placement.layout),
    ))
    .label(
        model.arch_origin.file,
        model.arch_origin.span,
        format!(
            "{} parameters from here",
            human_count(role_parameters(model.kind, arch))
        ),
    );
    if b.activations + b.kv_cache > b.model_state() && call.origin != placement.origin {
        let what = if memory.phase == Phase::Generate {
            "the KV cache dominates"
        } else {
            "activations dominate"
        };
        let sequences = match count(call.batch) {
            Some(batch) => format!("{batch} sequences"),
            None => "sequences".to_string(),
        };
        let tokens = count(call.prompt_len).unwrap_or(0) + count(call.response_len).unwrap_or(0);
        diag = diag.label(
            call.origin.file,
            call.origin.span,
            format!("{sequences} of {tokens} tokens per step: {what}"),
        );
    }
    diag = diag.help(suggest(program, placement, memory, call, capacity));
    diag = diag.note(table(&role_phase, &devices, &placement.layout, b, capacity));
    if !others.is_empty() {
        let list: Vec<String> = others
            .iter()
            .map(|e| {
                format!(
                    "`{}.{}` ({})",
                    program.models[e.memory.model].name,
                    e.memory.phase.as_str(),
                    format_bytes(e.memory.breakdown.total())
                )
            })
            .collect();
        diag = diag.note(format!(
            "also over the device memory on this placement: {}",
            list.join(", ")
        ));
    }
    diag
}

/// The fixed-width breakdown table of a diagnostic's note.
fn table(role_phase: &str, devices: &str, layout: &Layout, b: &Breakdown, capacity: f64) -> String {
    const WIDTH: usize = 21;
    let gib = |x: f64| format!("{:>9.1} GiB", x / GIB);
    let mut out = format!(
        "memory per device for `{role_phase}` on `{devices}` with {}:",
        layout_text(layout)
    );
    for term in Term::ALL {
        let _ = write!(out, "\n  {:<WIDTH$}{}", term.label(), gib(b.get(term)));
        let unknown: Vec<&str> = b
            .unknown
            .iter()
            .filter(|(t, _)| *t == term)
            .map(|(_, q)| q.as_str())
            .collect();
        if !unknown.is_empty() {
            let _ = write!(out, "  ({} unknown, counted as 0)", unknown.join(", "));
        }
    }
    let _ = write!(out, "\n  {}", "-".repeat(WIDTH + 13));
    let _ = write!(out, "\n  {:<WIDTH$}{}", "total", gib(b.total()));
    if b.is_lower_bound() {
        out.push_str("  (at least)");
    }
    let _ = write!(out, "\n  {:<WIDTH$}{}", "capacity", gib(capacity));
    out
}

/// A candidate change for the help line.
struct Candidate {
    text: String,
    total: f64,
}

/// The most effective single change that makes the phase fit, else the one that saves the most.
fn suggest(
    program: &Program,
    placement: &Placement,
    memory: &PhaseMemory,
    call: &RoleCall,
    capacity: f64,
) -> String {
    let model = &program.models[memory.model];
    let arch = model.arch.as_ref().expect("estimated models have an arch");
    let cluster = &program.clusters[placement.cluster];
    let layout = placement.layout;
    let phase = memory.phase;
    let current = &memory.breakdown;
    let estimate_with =
        |model: &Model, layout: &Layout| breakdown(model, arch, phase, layout, call).total();
    let ranks = layout.data_ranks().max(1);
    let devices = layout.devices().max(1);

    // Activation-side changes.
    let mut activation_side = Vec::new();
    if phase == Phase::Train && !model.recompute {
        let recomputing = Model {
            recompute: true,
            ..model.clone()
        };
        activation_side.push(Candidate {
            text: format!(
                "set `recompute = true` on `{}` (keep only each layer's input for the backward pass)",
                model.name
            ),
            total: estimate_with(&recomputing, &layout),
        });
    }
    if phase != Phase::Generate {
        let per_rank = match phase {
            Phase::Train => count(call.minibatch).or(count(call.batch)),
            _ => count(call.batch),
        }
        .map(|n| n.div_ceil(ranks));
        if let Some(m) = layout.micro().or(per_rank) {
            let mut k = m / 2;
            while k >= 1 {
                let smaller = Layout {
                    micro: set(layout.micro, k),
                    ..layout
                };
                activation_side.push(Candidate {
                    text: format!("use a smaller micro-batch: micro({k})"),
                    total: estimate_with(model, &smaller),
                });
                k /= 2;
            }
        }
    }

    // Sharding on the same devices.
    let mut sharding = Vec::new();
    if phase != Phase::Generate {
        for f in super::divisors_of(ranks)
            .into_iter()
            .filter(|&f| f > layout.fsdp())
        {
            let d = ranks / f;
            let sharded = Layout {
                fsdp: set(layout.fsdp, f),
                dp: set(layout.dp, d),
                ..layout
            };
            sharding.push(Candidate {
                text: format!(
                    "shard over the data ranks: {} (the same {devices} devices)",
                    layout_text(&sharded)
                ),
                total: estimate_with(model, &sharded),
            });
        }
    }
    let mut t = layout.tp().max(1) * 2;
    while t <= cluster.devices_per_node.value && arch.heads.is_multiple_of(t) {
        let r = t / layout.tp().max(1);
        let wider = if layout.dp().is_multiple_of(r) {
            Some(Layout {
                tp: set(layout.tp, t),
                dp: set(layout.dp, layout.dp() / r),
                ..layout
            })
        } else if layout.fsdp().is_multiple_of(r) {
            Some(Layout {
                tp: set(layout.tp, t),
                fsdp: set(layout.fsdp, layout.fsdp() / r),
                ..layout
            })
        } else {
            None
        };
        if let Some(wider) = wider {
            sharding.push(Candidate {
                text: format!(
                    "widen tensor parallelism within a node: {} (the same {devices} devices)",
                    layout_text(&wider)
                ),
                total: estimate_with(model, &wider),
            });
        }
        t *= 2;
    }

    // More devices.
    let mut more = Vec::new();
    for k in 2..=64u64 {
        let grown = if phase != Phase::Generate {
            Layout {
                fsdp: set(layout.fsdp, layout.fsdp() * k),
                ..layout
            }
        } else if current.kv_cache > current.weights {
            Layout {
                dp: set(layout.dp, layout.dp() * k),
                ..layout
            }
        } else {
            let p = layout.pp().max(1) * k;
            if !arch.layers.is_multiple_of(p) {
                continue;
            }
            Layout {
                pp: set(layout.pp, p),
                ..layout
            }
        };
        if grown.devices() > cluster.device_count() {
            break;
        }
        let total = estimate_with(model, &grown);
        more.push(Candidate {
            text: format!(
                "use more devices: {} on {} devices",
                layout_text(&grown),
                grown.devices()
            ),
            total,
        });
        if total <= capacity {
            break;
        }
    }

    let activation_heavy = current.activations + current.kv_cache > current.model_state();
    let ordered: Vec<Candidate> = if activation_heavy {
        activation_side
            .into_iter()
            .chain(sharding)
            .chain(more)
            .collect()
    } else {
        sharding
            .into_iter()
            .chain(activation_side)
            .chain(more)
            .collect()
    };
    if let Some(fit) = ordered.iter().find(|c| c.total <= capacity) {
        return format!("{} ({} per device)", fit.text, format_bytes(fit.total));
    }
    let best =
        ordered
            .iter()
            .filter(|c| c.total < current.total())
            .fold(None::<&Candidate>, |best, c| match best {
                Some(b) if b.total <= c.total => Some(b),
                _ => Some(c),
            });
    match best {
        Some(best) => format!(
            "no single change fits; the largest saving is to {} ({} per device), combined with \
             devices that have more memory or a smaller model",
            best.text,
            format_bytes(best.total)
        ),
        None => "use devices with more memory, more devices or a smaller model".to_string(),
    }
}

fn set(factor: Option<Sourced<u64>>, value: u64) -> Option<Sourced<u64>> {
    Some(Sourced {
        value,
        origin: factor.map(|f| f.origin).unwrap_or_default(),
    })
}

/// A layout as it is written: factors other than 1 and the micro-batch, e.g. `fsdp(8) tp(8)`.
fn layout_text(layout: &Layout) -> String {
    let factors = [
        ("dp", layout.dp()),
        ("tp", layout.tp()),
        ("pp", layout.pp()),
        ("fsdp", layout.fsdp()),
        ("sp", layout.sp()),
    ];
    let mut parts: Vec<String> = factors
        .iter()
        .filter(|(_, v)| *v != 1)
        .map(|(name, v)| format!("{name}({v})"))
        .collect();
    if let Some(m) = layout.micro() {
        parts.push(format!("micro({m})"));
    }
    if parts.is_empty() {
        "dp(1)".to_string()
    } else {
        parts.join(" ")
    }
}

/// "a" or "an" for a device name read aloud (`an h100_80g`, `an a100_80g`, `a cpu`).
fn article(name: &str) -> &'static str {
    let lower = name.to_ascii_lowercase();
    let mut chars = lower.chars();
    let first = chars.next();
    let second = chars.next();
    let vowel = matches!(first, Some('a' | 'e' | 'i' | 'o' | 'u'));
    // A letter spelled out before a digit: "an h100", "an l40s", "an m2".
    let spelled = matches!(first, Some('f' | 'h' | 'l' | 'm' | 'n' | 'r' | 's' | 'x'))
        && second.is_some_and(|c| c.is_ascii_digit());
    if vowel || spelled { "an" } else { "a" }
}

/// `14.2B`, `350.0M`, `12.0K`, `512`.
pub fn human_count(n: u64) -> String {
    let x = n as f64;
    if x >= 1e9 {
        format!("{:.1}B", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}K", x / 1e3)
    } else {
        n.to_string()
    }
}

/// Bytes in binary units with one decimal: `80.0 GiB`, `512.0 MiB`, `12 B`.
pub fn format_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    while unit < UNITS.len() - 1 && (value * 10.0).round().abs() >= KIB * 10.0 {
        value /= KIB;
        unit += 1;
    }
    if unit == 0 {
        format!("{} B", value.round() as i64)
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use crate::checks::divisors_of;

    #[test]
    fn divisors_in_square_root_steps() {
        assert_eq!(divisors_of(1), [1]);
        assert_eq!(divisors_of(12), [1, 2, 3, 4, 6, 12]);
        assert_eq!(divisors_of(16), [1, 2, 4, 8, 16]);
        assert_eq!(divisors_of(i32::MAX as u64), [1, i32::MAX as u64]);
        assert_eq!(divisors_of(1 << 31).len(), 32);
    }
}

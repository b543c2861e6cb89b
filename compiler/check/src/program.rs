//! The program model: what the evaluator learned about a job (hardware, roles, placements and
//! the pipeline's role calls), with every number carrying the span it came from. The placement,
//! batch, algorithm, memory and waste checks are pure functions of this model, and lowering
//! (the plan) starts from it.

use rlc_diagnostics::{FileId, Span};

/// A place in the source: which file and which bytes. Numbers keep one so that a diagnostic can
/// label where each came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Origin {
    pub file: FileId,
    pub span: Span,
}

/// A number and where it was written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub origin: Origin,
}

/// One kind of accelerator (or CPU device).
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSpec {
    pub name: String,
    /// Bytes of device memory.
    pub memory: f64,
    /// Peak dense FLOP/s at the training precision.
    pub flops: f64,
    /// Memory bandwidth, bytes/s.
    pub bandwidth: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    pub name: String,
    pub nodes: Sourced<u64>,
    pub devices_per_node: Sourced<u64>,
    pub device: DeviceSpec,
    /// Bytes/s between devices of one node, and between nodes.
    pub intra_bandwidth: f64,
    pub inter_bandwidth: f64,
    pub is_cpu: bool,
    pub origin: Origin,
}

impl Cluster {
    pub fn device_count(&self) -> u64 {
        self.nodes.value.saturating_mul(self.devices_per_node.value)
    }
}

/// A transformer's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Arch {
    /// The preset's name, when the arch came from one (for messages: "qwen2_7b").
    pub preset: Option<String>,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub ffn: u64,
    pub vocab: u64,
    pub max_len: u64,
    pub tie_embeddings: bool,
    /// RoPE base θ as written (`rope_theta`); [`Arch::rope_theta`] resolves the default.
    pub rope_theta: Option<f64>,
    /// RMSNorm ε as written (`norm_eps`); [`Arch::norm_eps`] resolves the default.
    pub norm_eps: Option<f64>,
    /// How tokens learn their position (`positions`): rotary (the default) or a learned table.
    pub positions: Positions,
}

/// How a decoder encodes token positions (`arch(positions:)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Positions {
    /// Rotary embeddings on queries and keys (Llama, Qwen2): relative positions only.
    #[default]
    Rope,
    /// A learned `[max_len, hidden]` table added to the token embeddings (GPT-2): absolute
    /// positions, no rotation.
    Learned,
}

impl Positions {
    pub const ALL: [Positions; 2] = [Positions::Rope, Positions::Learned];

    pub fn as_str(self) -> &'static str {
        match self {
            Positions::Rope => "rope",
            Positions::Learned => "learned",
        }
    }

    pub fn from_name(name: &str) -> Option<Positions> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl Arch {
    /// `arch(rope_theta:)` when not written: Llama 2's and most small models' base.
    pub const DEFAULT_ROPE_THETA: f64 = 10_000.0;
    /// `arch(norm_eps:)` when not written: Llama's RMSNorm ε.
    pub const DEFAULT_NORM_EPS: f64 = 1e-5;

    /// RoPE's base θ: as written, else [`Arch::DEFAULT_ROPE_THETA`].
    pub fn rope_theta(&self) -> f64 {
        self.rope_theta.unwrap_or(Self::DEFAULT_ROPE_THETA)
    }

    /// RMSNorm's ε: as written, else [`Arch::DEFAULT_NORM_EPS`].
    pub fn norm_eps(&self) -> f64 {
        self.norm_eps.unwrap_or(Self::DEFAULT_NORM_EPS)
    }

    /// Parameter count of the decoder with an LM head (untied unless `tie_embeddings`):
    /// embeddings (with learned positions, a `[max_len, hidden]` table too), per layer attention
    /// (q, k, v, o with grouped KV) + SwiGLU MLP + two norms, the final norm.
    ///
    /// Counted in 128 bits and saturated: sizes up to `2³¹ − 1` each (the checker's bound) make
    /// products past 64 bits.
    pub fn parameters(&self) -> u64 {
        let [hidden, heads, kv_heads, ffn, vocab, layers] = [
            self.hidden,
            self.heads,
            self.kv_heads,
            self.ffn,
            self.vocab,
            self.layers,
        ]
        .map(u128::from);
        let head_dim = hidden / heads.max(1);
        let kv = kv_heads * head_dim;
        let attention = hidden * hidden * 2 + hidden * kv * 2;
        let mlp = 3 * hidden * ffn;
        let norms = 2 * hidden;
        let embed = vocab * hidden
            + match self.positions {
                Positions::Rope => 0,
                Positions::Learned => u128::from(self.max_len) * hidden,
            };
        let head = if self.tie_embeddings {
            0
        } else {
            vocab * hidden
        };
        let total = embed
            .saturating_add(layers.saturating_mul(attention + mlp + norms))
            .saturating_add(hidden + head);
        u64::try_from(total).unwrap_or(u64::MAX)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RoleKind {
    CausalLM,
    ValueModel,
    RewardModel,
}

impl RoleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RoleKind::CausalLM => "CausalLM",
            RoleKind::ValueModel => "ValueModel",
            RoleKind::RewardModel => "RewardModel",
        }
    }

    pub fn from_name(name: &str) -> Option<RoleKind> {
        [
            RoleKind::CausalLM,
            RoleKind::ValueModel,
            RoleKind::RewardModel,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
    }

    /// The operations a model of this kind supports.
    pub fn supports(self, op: Op) -> bool {
        match op {
            Op::Generate | Op::Logprobs => self == RoleKind::CausalLM,
            Op::Values => self == RoleKind::ValueModel,
            Op::Score => self == RoleKind::RewardModel,
            Op::Update => true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Precision {
    F32,
    Bf16,
    F16,
}

impl Precision {
    pub fn bytes(self) -> u64 {
        match self {
            Precision::F32 => 4,
            Precision::Bf16 | Precision::F16 => 2,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    Random {
        seed: u64,
    },
    HuggingFace {
        path: String,
    },
    Checkpoint {
        path: String,
    },
    /// `frozen(policy)`: a frozen copy of another role's initial weights.
    CopyOf {
        model: usize,
    },
}

/// The shape of the learning rate after warm-up (`adamw(schedule:)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LrSchedule {
    /// Half a cosine from `lr` down to `lr · min_lr_ratio` at the last step (the default).
    Cosine,
    /// A straight line from `lr` down to `lr · min_lr_ratio` at the last step.
    Linear,
    /// `lr` throughout (no floor).
    Constant,
}

impl LrSchedule {
    pub const ALL: [LrSchedule; 3] = [LrSchedule::Cosine, LrSchedule::Linear, LrSchedule::Constant];

    pub fn as_str(self) -> &'static str {
        match self {
            LrSchedule::Cosine => "cosine",
            LrSchedule::Linear => "linear",
            LrSchedule::Constant => "constant",
        }
    }

    pub fn from_name(name: &str) -> Option<LrSchedule> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// An optimizer with every setting resolved (the defaults of `adamw(…)` filled in).
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    pub name: String,
    pub lr: f64,
    pub warmup: u64,
    pub weight_decay: f64,
    pub clip: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub schedule: LrSchedule,
    /// The schedule's floor as a fraction of `lr` (decaying schedules only).
    pub min_lr_ratio: f64,
}

impl Optimizer {
    /// `adamw(lr: lr)` with every other setting at its documented default (`docs/language.md`):
    /// no warm-up, no weight decay, clipping at 1.0, β = (0.9, 0.999), ε = 1e-8, cosine decay
    /// to a tenth of `lr`.
    pub fn adamw(lr: f64) -> Optimizer {
        Optimizer {
            name: "adamw".into(),
            lr,
            warmup: 0,
            weight_decay: 0.0,
            clip: 1.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            schedule: LrSchedule::Cosine,
            min_lr_ratio: 0.1,
        }
    }
}

/// One `model` item.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub name: String,
    pub kind: RoleKind,
    /// `None` when the arch could not be evaluated (an error was reported already).
    pub arch: Option<Arch>,
    /// Where the arch was set (the `arch = …` line), for labels.
    pub arch_origin: Origin,
    pub init: Option<Init>,
    /// `None` for a frozen model.
    pub optimizer: Option<Optimizer>,
    pub frozen: bool,
    pub precision: Precision,
    /// Activation recomputation (gradient checkpointing) during training.
    pub recompute: bool,
    pub origin: Origin,
}

/// What a role does in a step; `place role.phase` names one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Generate,
    Logprobs,
    Values,
    Score,
    Update,
}

impl Op {
    /// The operation a role call names (`policy.generate(…)`).
    pub fn from_name(name: &str) -> Option<Op> {
        [
            Op::Generate,
            Op::Logprobs,
            Op::Values,
            Op::Score,
            Op::Update,
        ]
        .into_iter()
        .find(|op| op.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Generate => "generate",
            Op::Logprobs => "logprobs",
            Op::Values => "values",
            Op::Score => "score",
            Op::Update => "update",
        }
    }

    /// The placement phase this operation runs under (`update` runs in `train`).
    pub fn phase(self) -> Phase {
        match self {
            Op::Generate => Phase::Generate,
            Op::Logprobs => Phase::Logprobs,
            Op::Values => Phase::Values,
            Op::Score => Phase::Score,
            Op::Update => Phase::Train,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Train,
    Generate,
    Logprobs,
    Values,
    Score,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Train,
        Phase::Generate,
        Phase::Logprobs,
        Phase::Values,
        Phase::Score,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Train => "train",
            Phase::Generate => "generate",
            Phase::Logprobs => "logprobs",
            Phase::Values => "values",
            Phase::Score => "score",
        }
    }

    pub fn from_name(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// Whether the phase keeps gradients and optimiser state.
    pub fn is_training(self) -> bool {
        self == Phase::Train
    }
}

/// A parallel layout; a factor not written is 1.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Layout {
    pub dp: Option<Sourced<u64>>,
    pub tp: Option<Sourced<u64>>,
    pub pp: Option<Sourced<u64>>,
    pub fsdp: Option<Sourced<u64>>,
    pub sp: Option<Sourced<u64>>,
    pub micro: Option<Sourced<u64>>,
}

impl Layout {
    fn get(f: Option<Sourced<u64>>) -> u64 {
        f.map_or(1, |s| s.value)
    }
    pub fn dp(&self) -> u64 {
        Self::get(self.dp)
    }
    pub fn tp(&self) -> u64 {
        Self::get(self.tp)
    }
    pub fn pp(&self) -> u64 {
        Self::get(self.pp)
    }
    pub fn fsdp(&self) -> u64 {
        Self::get(self.fsdp)
    }
    pub fn sp(&self) -> u64 {
        Self::get(self.sp)
    }
    /// Sequences per micro-batch per data-parallel rank (`None`: the whole per-rank minibatch).
    pub fn micro(&self) -> Option<u64> {
        self.micro.map(|m| m.value)
    }
    /// Ranks that each hold a different slice of the batch (data and fully-sharded data parallel).
    pub fn data_ranks(&self) -> u64 {
        self.dp().saturating_mul(self.fsdp())
    }
    /// Devices the layout occupies.
    pub fn devices(&self) -> u64 {
        self.dp()
            .saturating_mul(self.fsdp())
            .saturating_mul(self.tp())
            .saturating_mul(self.pp())
    }
}

/// One `place` item, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub model: usize,
    /// `None`: every phase of the role not placed on its own.
    pub phase: Option<Phase>,
    pub cluster: usize,
    /// Devices `start..end` of the cluster, in node-major order.
    pub devices: std::ops::Range<u64>,
    pub devices_origin: Origin,
    /// `… auto`: the planner chooses the layout (no arithmetic to check yet).
    pub auto: bool,
    pub layout: Layout,
    pub origin: Origin,
}

/// Sampling settings of one `generate` call.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    pub n: Sourced<i64>,
    pub max_new: Sourced<i64>,
    pub temperature: Sourced<f64>,
    pub top_p: Sourced<f64>,
    pub top_k: Option<Sourced<i64>>,
    /// `env: calc, max_turns: 3, max_obs: 6`: a multi-turn rollout (`max_new` is then per turn).
    pub env: Option<EnvSampling>,
    /// `staleness: s`: the rollout may come from weights up to `s` updates old, so that its
    /// generation overlaps the training of the `s` steps before (0, or `None`: synchronous).
    pub staleness: Option<Sourced<i64>>,
    /// `pause_at: p`: a partial rollout. The generator pauses each response after its `p`-th
    /// token, takes the next version of the weights (one update newer), recomputes the prompt's
    /// and those tokens' cache with it and goes on: tokens from position `p` on are one update
    /// fresher. Needs `staleness` ≥ 1.
    pub pause_at: Option<Sourced<i64>>,
}

/// The multi-turn settings of a `generate` call.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvSampling {
    /// The `environment` item's name (a key of [`Program::environments`]).
    pub environment: String,
    /// Where `env:` was written.
    pub origin: Origin,
    pub max_turns: Sourced<i64>,
    pub max_obs: Sourced<i64>,
}

impl EnvSampling {
    /// Response positions of a rollout with `max_new` tokens per turn: every turn's, and an
    /// observation between two turns (none after the last); `None` on overflow.
    pub fn response_len(&self, max_new: i64) -> Option<i64> {
        let turns = self.max_turns.value;
        turns
            .checked_mul(max_new)?
            .checked_add((turns - 1).checked_mul(self.max_obs.value)?)
    }
}

/// One role operation the pipeline performs per step.
#[derive(Clone, Debug, PartialEq)]
pub struct RoleCall {
    pub model: usize,
    pub op: Op,
    /// Sequences this call processes per step (prompts × samples), when known.
    pub batch: Option<Sourced<i64>>,
    /// Longest prompt in tokens, when the dataset says (a synthetic task does).
    pub prompt_len: Option<Sourced<i64>>,
    /// Response tokens per sequence (the generating call's `max_new`).
    pub response_len: Option<Sourced<i64>>,
    /// Set on `generate`.
    pub sampling: Option<Sampling>,
    /// Set on `update`.
    pub epochs: Option<Sourced<i64>>,
    pub minibatch: Option<Sourced<i64>>,
    /// On `update`: its loss reads the behaviour policy's log-probs (`rollout.logp`).
    pub reads_behaviour_logp: bool,
    pub origin: Origin,
}

/// The one pipeline of the root module, as the checks need it.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineFacts {
    pub name: String,
    pub steps: Option<i64>,
    pub calls: Vec<RoleCall>,
    pub origin: Origin,
    /// The recipe the pipeline runs, when its body is a call of one.
    pub instance: Option<Instance>,
}

/// A job's instance of a generic pipeline: `pipeline train { grpo(…) }`.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// The recipe called.
    pub recipe: String,
    /// The call, in the job's file.
    pub call: Origin,
    /// The files of the recipes the instance runs (one recipe may call another).
    pub files: Vec<rlc_diagnostics::FileId>,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    pub clusters: Vec<Cluster>,
    pub models: Vec<Model>,
    pub placements: Vec<Placement>,
    pub pipeline: Option<PipelineFacts>,
    /// Where `place auto` hands every unplaced role to the planner, if it does.
    pub auto_place: Option<Origin>,
    /// The cluster `place auto on C` names (`None`: it names none, or not a cluster).
    pub auto_cluster: Option<usize>,
    /// Where each model's learning-rate warm-up was written, by model name: the `warmup:`
    /// argument, or the `optim` line when it is not written there.
    pub warmup_origins: std::collections::BTreeMap<String, Origin>,
    /// Every dataset the pipeline reads, by its item's name, as evaluated.
    pub datasets: std::collections::BTreeMap<String, crate::value::DatasetSpec>,
    /// The dataset each `ds.sample(…)` / `ds.score(…)` / `ds.demonstrations(…)` /
    /// `ds.preferences(…)` call reads, by the call's file and span (a dataset may be imported
    /// under another name).
    pub dataset_calls: std::collections::BTreeMap<(FileId, Span), String>,
    /// Every verifier the pipeline calls, by its item's name, as evaluated.
    pub verifiers: std::collections::BTreeMap<String, crate::value::VerifierSpec>,
    /// Each call of a verifier, by the call's file and span: the verifier's name and the
    /// dataset the scored rollout's prompts came from.
    pub verifier_calls: std::collections::BTreeMap<(FileId, Span), (String, String)>,
    /// Every environment a `generate` call names, by its item's name, as evaluated.
    pub environments: std::collections::BTreeMap<String, crate::value::EnvironmentSpec>,
}

impl Program {
    /// Records that the call at `span` of `file` reads `dataset`.
    pub fn record_dataset_call(
        &mut self,
        file: FileId,
        span: Span,
        dataset: &crate::value::DatasetSpec,
    ) {
        self.datasets
            .entry(dataset.name.clone())
            .or_insert_with(|| dataset.clone());
        self.dataset_calls
            .insert((file, span), dataset.name.clone());
    }

    /// Records that the call at `span` of `file` runs `verifier` on rows of `dataset`.
    pub fn record_verifier_call(
        &mut self,
        file: FileId,
        span: Span,
        verifier: &crate::value::VerifierSpec,
        dataset: &crate::value::DatasetSpec,
    ) {
        self.verifiers
            .entry(verifier.name.clone())
            .or_insert_with(|| verifier.clone());
        self.datasets
            .entry(dataset.name.clone())
            .or_insert_with(|| dataset.clone());
        self.verifier_calls
            .insert((file, span), (verifier.name.clone(), dataset.name.clone()));
    }

    /// The verifier the call at `span` of `file` runs, and the dataset whose rows it scores.
    pub fn verifier_at(
        &self,
        file: FileId,
        span: Span,
    ) -> Option<(&crate::value::VerifierSpec, &crate::value::DatasetSpec)> {
        let (v, d) = self.verifier_calls.get(&(file, span))?;
        Some((self.verifiers.get(v)?, self.datasets.get(d)?))
    }

    /// The dataset the call at `span` of `file` reads.
    pub fn dataset_at(&self, file: FileId, span: Span) -> Option<&crate::value::DatasetSpec> {
        self.datasets.get(self.dataset_calls.get(&(file, span))?)
    }

    pub fn model_index(&self, name: &str) -> Option<usize> {
        self.models.iter().position(|m| m.name == name)
    }

    /// The placement an operation of `model` runs on: its own phase's, else the role's, else
    /// (for log-probs and values of a trainable model) its training placement.
    pub fn placement_for(&self, model: usize, phase: Phase) -> Option<&Placement> {
        self.placement_index_for(model, phase)
            .map(|index| &self.placements[index])
    }

    /// The index in `placements` of the placement [`Program::placement_for`] gives.
    pub fn placement_index_for(&self, model: usize, phase: Phase) -> Option<usize> {
        let find = |phase: Option<Phase>| {
            self.placements
                .iter()
                .position(|p| p.model == model && p.phase == phase)
        };
        let train = || {
            matches!(phase, Phase::Logprobs | Phase::Values)
                .then(|| find(Some(Phase::Train)))
                .flatten()
        };
        find(Some(phase)).or_else(|| find(None)).or_else(train)
    }
}

//! The plan data model: what the runtime reads. It knows nothing of the compiler (no spans, no
//! checker types); `docs/plan.md` documents every field.
//!
//! Conventions:
//! - ranks are numbered globally, cluster after cluster, node-major within a cluster;
//! - ops and values are numbered by their index (`ops[i].id == i`);
//! - every list is in a deterministic order (ids, then names), so the same program gives the
//!   same bytes.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

mod verifier;
pub use verifier::{Environment, OnError, Verifier, VerifierEndpoint, WorkerLimits};

/// The plan format version this crate writes and reads.
pub const PLAN_VERSION: u32 = 3;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// [`PLAN_VERSION`]; checked first when a plan is loaded.
    pub version: u32,
    /// The pipeline's name.
    pub pipeline: String,
    /// Iterations of the step loop, when the program fixes them.
    pub steps: Option<u64>,
    /// Ranks in all: the devices of every cluster.
    pub world_size: u32,
    pub clusters: Vec<Cluster>,
    pub roles: Vec<Role>,
    /// The prompt sources the pipeline samples, by name (what `sample` ops name).
    pub datasets: Vec<Dataset>,
    pub instances: Vec<Instance>,
    /// Data produced in one step.
    pub values: Vec<Value>,
    /// One step's operations, in a topological order (every dependency comes first).
    pub ops: Vec<Op>,
    /// Producer → consumer data edges.
    pub edges: Vec<Edge>,
    /// Per-rank ordered programs with their memory timeline; ranks with identical programs share
    /// one entry.
    pub programs: Vec<RankProgram>,
    /// Values carried from one step to the next (`loop … with (beta = 0.1)`), in declaration
    /// order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<Carried>,
    /// External rewards the pipeline calls (`verify` ops name them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifiers: Vec<Verifier>,
    /// Multi-turn environments the pipeline's `generate` ops talk to (`OpKind::Generate::env`
    /// names them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environments: Vec<Environment>,
    /// The fused kernels the ops run, in the kernel IR of `rlc-kernel`: each `kernel` op's `fn`
    /// and each `update`'s loss closure, lowered by the compiler, referred to by index
    /// (`OpKind::Kernel::kernel`, `Loss::kernel`). The runtime runs them without the sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<rlc_kernel::ir::Kernel>,
    /// Provenance: the program's own source files (std is built into `rlc`) the plan was built
    /// from. `rlc build` fills it; lowering leaves it out. Running needs none of it (the kernels
    /// travel above); relative dataset and verifier paths start from the root file's folder
    /// when it is there, from the plan file's otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<Sources>,
}

/// The source files a plan was built from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sources {
    /// The root file's name, as the checker was given it.
    pub root: String,
    /// Every non-std module's text, by the name the checker loaded it under.
    pub files: BTreeMap<String, String>,
}

/// A set of ranks, written `"0..8,16..24"` (half-open ranges, sorted, merged).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RankSet(Vec<(u32, u32)>);

impl RankSet {
    pub fn range(start: u32, end: u32) -> RankSet {
        RankSet::from_ranges([(start, end)])
    }

    pub fn from_ranges(ranges: impl IntoIterator<Item = (u32, u32)>) -> RankSet {
        let mut v: Vec<(u32, u32)> = ranges.into_iter().filter(|(a, b)| a < b).collect();
        v.sort();
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match out.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        RankSet(out)
    }

    pub fn from_ranks(ranks: impl IntoIterator<Item = u32>) -> RankSet {
        RankSet::from_ranges(ranks.into_iter().map(|r| (r, r + 1)))
    }

    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.0
    }

    pub fn len(&self) -> u32 {
        self.0.iter().map(|(a, b)| b - a).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, rank: u32) -> bool {
        self.0.iter().any(|&(a, b)| a <= rank && rank < b)
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().flat_map(|&(a, b)| a..b)
    }

    /// The `i`-th rank in ascending order.
    pub fn nth(&self, mut i: u32) -> Option<u32> {
        for &(a, b) in &self.0 {
            if i < b - a {
                return Some(a + i);
            }
            i -= b - a;
        }
        None
    }

    /// One past the largest rank (0 when empty).
    pub fn end(&self) -> u32 {
        self.0.last().map_or(0, |r| r.1)
    }

    pub fn union(&self, other: &RankSet) -> RankSet {
        RankSet::from_ranges(self.0.iter().chain(other.0.iter()).copied())
    }

    pub fn intersects(&self, other: &RankSet) -> bool {
        self.0
            .iter()
            .any(|&(a, b)| other.0.iter().any(|&(c, d)| a < d && c < b))
    }

    /// Parses `"0..8,16..24"` (also a single rank, `"5"`); the empty string is the empty set.
    pub fn parse(text: &str) -> Result<RankSet, String> {
        let mut ranges = Vec::new();
        for part in text.split(',').filter(|p| !p.is_empty()) {
            let bad = || format!("`{part}` is not a rank range such as `0..8`");
            let (a, b) = match part.split_once("..") {
                Some((a, b)) => (
                    a.parse::<u32>().map_err(|_| bad())?,
                    b.parse::<u32>().map_err(|_| bad())?,
                ),
                None => {
                    let r = part.parse::<u32>().map_err(|_| bad())?;
                    let end = r
                        .checked_add(1)
                        .ok_or_else(|| format!("rank `{part}` is beyond the largest rank"))?;
                    (r, end)
                }
            };
            if a >= b {
                return Err(format!("`{part}` is an empty rank range"));
            }
            ranges.push((a, b));
        }
        Ok(RankSet::from_ranges(ranges))
    }
}

impl fmt::Display for RankSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (a, b)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if b - a == 1 {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}..{b}")?;
            }
        }
        Ok(())
    }
}

impl Serialize for RankSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for RankSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RankSet, D::Error> {
        let text = String::deserialize(d)?;
        RankSet::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A pool of identical devices; its ranks are `ranks`, node-major.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub name: String,
    pub ranks: RankSet,
    pub nodes: u64,
    pub devices_per_node: u64,
    /// The device kind's name (`h100_80g`, `cpu`).
    pub device: String,
    pub is_cpu: bool,
    /// Bytes of memory per device.
    pub memory: u64,
    /// Bytes/s between devices of one node, and between nodes.
    pub intra_bandwidth: f64,
    pub inter_bandwidth: f64,
    /// The device kind's peak dense FLOP/s and memory bandwidth (bytes/s), from its `device(…)`
    /// (`std.hardware`): what the planner's cost model divides by. 0 in plans written before
    /// these fields existed.
    #[serde(default)]
    pub flops: f64,
    #[serde(default)]
    pub memory_bandwidth: f64,
}

/// A prompt source: one of std's synthetic tasks, or a JSON Lines file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dataset {
    pub name: String,
    pub source: DatasetSource,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case", deny_unknown_fields)]
pub enum DatasetSource {
    /// `task(kind:, digits:)`.
    Task { task: TaskKind, digits: u64 },
    /// `jsonl(path, field:, tokenizer:)`: `path` and `tokenizer` (a folder with a
    /// `tokenizer.json`; without one, the text's bytes are the tokens) relative to the program's
    /// root file.
    Jsonl {
        path: String,
        field: String,
        tokenizer: Option<String>,
        /// `keep: [...]`: the other fields of each line the run keeps (verifiers read them).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keep: Vec<String>,
    },
}

/// std's synthetic digit tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    ReverseDigits,
    AddNumbers,
    SortDigits,
    /// Addition with a calculator tool (`add_numbers`' prompts and answers; demonstrations
    /// call the tool).
    AddWithTool,
}

impl TaskKind {
    pub const ALL: [TaskKind; 4] = [
        TaskKind::ReverseDigits,
        TaskKind::AddNumbers,
        TaskKind::SortDigits,
        TaskKind::AddWithTool,
    ];

    /// The name `task(kind:)` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::ReverseDigits => "reverse_digits",
            TaskKind::AddNumbers => "add_numbers",
            TaskKind::SortDigits => "sort_digits",
            TaskKind::AddWithTool => "add_with_tool",
        }
    }

    pub fn from_name(name: &str) -> Option<TaskKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// What a role's model computes: next-token logits, a value per token, or a score per sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RoleKind {
    CausalLM,
    ValueModel,
    RewardModel,
}

impl RoleKind {
    /// The name a `model` item's kind is written with.
    pub fn as_str(self) -> &'static str {
        match self {
            RoleKind::CausalLM => "CausalLM",
            RoleKind::ValueModel => "ValueModel",
            RoleKind::RewardModel => "RewardModel",
        }
    }
}

impl fmt::Display for RoleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The element type of a role's weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    Bf16,
    F16,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }

    /// Bytes per weight.
    pub fn bytes(self) -> u64 {
        match self {
            Precision::F32 => 4,
            Precision::Bf16 | Precision::F16 => 2,
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a supervised `sample` op draws instead of prompts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleForm {
    /// `task.demonstrations(n)`: `n` teacher-forced answers.
    Demonstrations,
    /// `task.preferences(n)`: `n` pairs, chosen and rejected, in `2·n` rows.
    Preferences,
}

impl SampleForm {
    pub fn as_str(self) -> &'static str {
        match self {
            SampleForm::Demonstrations => "demonstrations",
            SampleForm::Preferences => "preferences",
        }
    }
}

/// The prompts a supervised form draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataSplit {
    Train,
    Test,
}

/// A model role: its architecture and how it trains.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Role {
    pub name: String,
    pub kind: RoleKind,
    pub arch: Option<Arch>,
    pub parameters: Option<u64>,
    pub precision: Precision,
    pub frozen: bool,
    pub recompute: bool,
    pub init: Init,
    pub optimizer: Option<Optimizer>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arch {
    pub preset: Option<String>,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub ffn: u64,
    pub vocab: u64,
    pub max_len: u64,
    pub tie_embeddings: bool,
    /// RoPE base θ (unused with learned positions).
    pub rope_theta: f64,
    /// RMSNorm ε.
    pub norm_eps: f64,
    /// How tokens learn their position; plans written before it was a setting were rotary.
    #[serde(default)]
    pub positions: Positions,
}

/// A decoder's position encoding (`arch(positions:)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Positions {
    /// Rotary embeddings on queries and keys, base `rope_theta`.
    #[default]
    Rope,
    /// A learned `[max_len, hidden]` table (`model.embed_positions.weight`) added to the token
    /// embeddings; no rotation.
    Learned,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case", deny_unknown_fields)]
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
    /// A frozen copy of another role's initial weights.
    CopyOf {
        role: String,
    },
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Optimizer {
    pub name: OptimizerName,
    /// The peak learning rate, reached at the end of warm-up.
    pub lr: f64,
    /// Optimizer steps of linear warm-up from 0.
    pub warmup: u64,
    pub weight_decay: f64,
    /// The gradients' global norm is clipped to this.
    pub clip: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// The learning rate's shape after warm-up.
    pub schedule: LrSchedule,
    /// A decaying schedule's floor at the run's last optimizer step, as a fraction of `lr`.
    pub min_lr_ratio: f64,
}

/// The optimizer's algorithm: `adamw(…)` is the language's only one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerName {
    Adamw,
}

impl std::fmt::Display for OptimizerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OptimizerName::Adamw => "adamw",
        })
    }
}

/// The learning rate's shape after warm-up, over the run's optimizer steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    /// Half a cosine from `lr` to `lr · min_lr_ratio`.
    Cosine,
    /// A straight line from `lr` to `lr · min_lr_ratio`.
    Linear,
    /// `lr` throughout.
    Constant,
}

/// The parallel factors of a layout (1 when not written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    pub dp: u32,
    pub fsdp: u32,
    pub tp: u32,
    pub pp: u32,
    pub sp: u32,
    /// Sequences per micro-batch per data rank (`None`: the whole per-rank batch).
    pub micro: Option<u64>,
}

impl Layout {
    /// `dp · fsdp · tp · pp`, without sequence parallelism, each data rank's whole batch as one
    /// micro-batch.
    pub const fn new(dp: u32, fsdp: u32, tp: u32, pp: u32) -> Layout {
        Layout {
            dp,
            fsdp,
            tp,
            pp,
            sp: 1,
            micro: None,
        }
    }

    /// Whether two layouts hold a model's weights the same way (micro-batching aside).
    pub fn same_shards(&self, other: &Layout) -> bool {
        (self.dp, self.fsdp, self.tp, self.pp, self.sp)
            == (other.dp, other.fsdp, other.tp, other.pp, other.sp)
    }

    /// Data-parallel groups: each holds a different slice of the batch.
    pub fn data_ranks(&self) -> u32 {
        self.dp * self.fsdp
    }
    pub fn devices(&self) -> u32 {
        self.dp * self.fsdp * self.tp * self.pp
    }
}

/// A role placed on ranks with one layout: one `place` of the program. It serves `phases`.
///
/// Rank order inside `ranks` is `pp`, `dp`, `fsdp`, `tp` from slowest to fastest: the rank of
/// coordinate `(p, d, f, t)` is `ranks.nth(((p·dp + d)·fsdp + f)·tp + t)`. A data rank is
/// `(d, f)`, numbered `d·fsdp + f`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    /// `role` or `role.phase`, as the `place` item names it.
    pub id: String,
    pub role: String,
    pub cluster: String,
    pub phases: Vec<Phase>,
    pub ranks: RankSet,
    pub layout: Layout,
    /// The program left this layout to the planner (`place … auto`); lowered as `dp` over the range.
    pub auto: bool,
    /// Estimated bytes per device for each phase (from the memory check's estimate).
    pub memory: BTreeMap<Phase, PhaseMemory>,
}

/// What a role's instance serves. Declared in alphabetical order, so `memory`'s keys come out
/// sorted by name in the JSON as they did when they were strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Generate,
    Logprobs,
    Score,
    Train,
    Values,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Generate => "generate",
            Phase::Logprobs => "logprobs",
            Phase::Score => "score",
            Phase::Train => "train",
            Phase::Values => "values",
        }
    }
}

/// Bytes per device one phase of an instance holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseMemory {
    pub weights: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub master_weights: u64,
    pub activations: u64,
    pub kv_cache: u64,
    pub total: u64,
    /// Some term used a quantity the program does not fix (counted as 0): `total` is a lower bound.
    pub lower_bound: bool,
}

impl PhaseMemory {
    /// What stays on the device between operations: weights, gradients, optimizer state and
    /// master weights.
    pub fn state(&self) -> u64 {
        self.weights + self.gradients + self.optimizer_state + self.master_weights
    }
    /// What exists only while the phase runs: activations and KV cache.
    pub fn transient(&self) -> u64 {
        self.activations + self.kv_cache
    }
}

/// The coordinate axes of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    Pp,
    Dp,
    Fsdp,
    Tp,
}

impl Instance {
    /// The rank at coordinate `(pp, dp, fsdp, tp)`.
    pub fn rank_at(&self, p: u32, d: u32, f: u32, t: u32) -> Option<u32> {
        let l = &self.layout;
        self.ranks.nth(((p * l.dp + d) * l.fsdp + f) * l.tp + t)
    }

    /// The coordinate `(pp, dp, fsdp, tp)` of a rank of this instance.
    pub fn coord_of(&self, rank: u32) -> Option<(u32, u32, u32, u32)> {
        let mut index = 0;
        let mut found = None;
        for &(a, b) in self.ranks.ranges() {
            if a <= rank && rank < b {
                found = Some(index + rank - a);
                break;
            }
            index += b - a;
        }
        let i = found?;
        let l = &self.layout;
        Some((
            i / (l.dp * l.fsdp * l.tp),
            i / (l.fsdp * l.tp) % l.dp,
            i / l.tp % l.fsdp,
            i % l.tp,
        ))
    }

    /// The data rank (`d·fsdp + f`, of `layout.data_ranks()`) of a rank of this instance: which
    /// slice of the batch it holds.
    pub fn data_rank_of(&self, rank: u32) -> Option<u32> {
        let (_, d, f, _) = self.coord_of(rank)?;
        Some(d * self.layout.fsdp + f)
    }

    /// Every rank of data rank `data` (all its tensor and pipeline ranks).
    pub fn data_group(&self, data: u32) -> RankSet {
        let l = &self.layout;
        let (d, f) = (data / l.fsdp, data % l.fsdp);
        RankSet::from_ranks(
            (0..l.pp).flat_map(|p| (0..l.tp).filter_map(move |t| self.rank_at(p, d, f, t))),
        )
    }

    /// The rank that holds data rank `data`'s outputs first: the last pipeline stage, tensor rank 0.
    pub fn data_leader(&self, data: u32) -> Option<u32> {
        let l = &self.layout;
        self.rank_at(l.pp - 1, data / l.fsdp, data % l.fsdp, 0)
    }

    /// The communicator groups along `axis`: ranks that differ only in that coordinate.
    pub fn groups(&self, axis: Axis) -> Vec<Vec<u32>> {
        let l = self.layout;
        let mut out = Vec::new();
        let (pp, dp, fsdp, tp) = (l.pp, l.dp, l.fsdp, l.tp);
        for p in 0..pp {
            for d in 0..dp {
                for f in 0..fsdp {
                    for t in 0..tp {
                        let lead = match axis {
                            Axis::Pp => p == 0,
                            Axis::Dp => d == 0,
                            Axis::Fsdp => f == 0,
                            Axis::Tp => t == 0,
                        };
                        if !lead {
                            continue;
                        }
                        let n = match axis {
                            Axis::Pp => pp,
                            Axis::Dp => dp,
                            Axis::Fsdp => fsdp,
                            Axis::Tp => tp,
                        };
                        let group = (0..n)
                            .filter_map(|i| match axis {
                                Axis::Pp => self.rank_at(i, d, f, t),
                                Axis::Dp => self.rank_at(p, i, f, t),
                                Axis::Fsdp => self.rank_at(p, d, i, t),
                                Axis::Tp => self.rank_at(p, d, f, i),
                            })
                            .collect();
                        out.push(group);
                    }
                }
            }
        }
        out.sort();
        out
    }
}

/// A tensor dimension: a known size or a symbol (`B`, `T`, `P`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Dim {
    Size(u64),
    Sym(String),
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Size(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// A tensor type: element type and shape (no dimensions: a scalar). Written as text,
/// `"f32[128, 8]"`, `"i32[128, P]"`, `"f32"`: the element type, then the dimensions (a size or a
/// symbol) in brackets.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TensorType {
    pub dtype: String,
    pub shape: Vec<Dim>,
}

impl TensorType {
    pub fn parse(text: &str) -> Result<TensorType, String> {
        let bad = || format!("`{text}` is not a tensor type such as `f32[128, 8]`");
        let (dtype, dims) = match text.split_once('[') {
            Some((d, rest)) => (d, rest.strip_suffix(']').ok_or_else(bad)?),
            None => (text, ""),
        };
        if dtype.is_empty() || !dtype.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad());
        }
        let shape = if dims.is_empty() {
            Vec::new()
        } else {
            dims.split(',')
                .map(|d| {
                    let d = d.trim();
                    if d.is_empty() {
                        Err(bad())
                    } else {
                        Ok(d.parse::<u64>()
                            .map_or_else(|_| Dim::Sym(d.to_string()), Dim::Size))
                    }
                })
                .collect::<Result<_, _>>()?
        };
        Ok(TensorType {
            dtype: dtype.to_string(),
            shape,
        })
    }

    /// Bytes of the tensor, when its element type and every dimension are known.
    pub fn bytes(&self) -> Option<u64> {
        let mut n: u64 = match self.dtype.as_str() {
            "f32" | "i32" => 4,
            "bf16" | "f16" => 2,
            "i64" => 8,
            "bool" => 1,
            _ => return None,
        };
        for d in &self.shape {
            match d {
                Dim::Size(s) => n = n.checked_mul(*s)?,
                Dim::Sym(_) => return None,
            }
        }
        Some(n)
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dtype)?;
        if !self.shape.is_empty() {
            let dims: Vec<String> = self.shape.iter().map(ToString::to_string).collect();
            write!(f, "[{}]", dims.join(", "))?;
        }
        Ok(())
    }
}

impl Serialize for TensorType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for TensorType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TensorType, D::Error> {
        let text = String::deserialize(d)?;
        TensorType::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The type of a value: a tensor (`"f32[128, 8]"`), a record of tensors
/// (`{"record": "Rollout", "fields": {"mask": "bool[128, 8]", …}}`, such as the `Rollout` a
/// `generate` returns), or something the runtime handles by name (`{"opaque": "a batch of prompts"}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ValueType {
    Tensor(TensorType),
    Record {
        record: String,
        fields: BTreeMap<String, TensorType>,
    },
    Opaque {
        opaque: String,
    },
}

impl ValueType {
    pub fn bytes(&self) -> Option<u64> {
        match self {
            ValueType::Tensor(t) => t.bytes(),
            ValueType::Record { fields, .. } => fields.values().map(TensorType::bytes).sum(),
            ValueType::Opaque { .. } => None,
        }
    }
}

/// How a value is laid out over the ranks of the instance it lives on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Split {
    /// Every rank holds all of it.
    Replicated,
    /// The leading (batch) dimension is cut into `parts` contiguous blocks, one per data rank
    /// (block `i` = rows `[i·rows/parts, (i+1)·rows/parts)`), each held by every rank of that data rank.
    Rows { parts: u32, rows: Option<u64> },
}

/// One value of a step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Value {
    pub id: u32,
    /// The pipeline's name for it (`rollout`), or a name made from its producer (`mean#1`).
    pub name: String,
    /// The op that produces it; `None` for a carried value, which the step starts with (see
    /// [`Carried`]).
    pub producer: Option<u32>,
    /// The instance whose ranks hold it.
    pub at: String,
    #[serde(rename = "type")]
    pub ty: ValueType,
    pub split: Split,
}

/// A value carried from one step to the next: every read in a step sees `value`, which holds
/// `init` in step 0 and afterwards what the previous step assigned (`next`, or `next_const`);
/// a step that assigns nothing (or skips the assignment's `every`) leaves it unchanged. Each
/// rank of `ranks` keeps its own copy; they agree because each computes `next` from the same
/// (all-reduced) inputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Carried {
    pub name: String,
    /// A scalar: `f32` or `i64`.
    #[serde(rename = "type")]
    pub ty: TensorType,
    /// The value of step 0, as the program's constant (`0.1`, `0`).
    pub init: String,
    /// The value the step reads (a value without a producer).
    pub value: u32,
    /// The value the next step starts with; `None` when the assignment is a constant or absent.
    pub next: Option<u32>,
    /// A constant assigned (`n = 0.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_const: Option<String>,
    /// The assignment applies only in steps where `(step + 1) % every == 0` (it is inside
    /// `every N steps { … }`).
    pub every: Option<u64>,
    /// The ranks that hold it: those of the instance kernels run on. Every reader runs there.
    pub ranks: RankSet,
}

/// A collective or transfer pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// One source group to many destination groups, each receiving its rows.
    Scatter,
    /// Many source groups to one destination group.
    Gather,
    /// Re-split among overlapping ranks.
    AllToAll,
    /// The whole value from one rank to many.
    Broadcast,
    /// Sends between disjoint pools.
    P2p,
    AllReduce,
    ReduceScatter,
    AllGather,
}

/// A half-open slice `[start, end)` of `of` units (rows of a batch, layers, a fraction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slice {
    pub start: u64,
    pub end: u64,
    pub of: u64,
}

/// `rows` of a value go from rank `from` to every rank of `to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Send {
    pub from: u32,
    pub to: RankSet,
    pub rows: Slice,
}

/// One piece of a role's weights moving from a training rank to generation (or inference)
/// ranks: the layers `layers`, the `tp` slice of each tensor's tensor-parallel dimension, and the
/// `rows` slice of the flattened tensor-parallel shard that FSDP gives each rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardMove {
    pub from: u32,
    pub to: RankSet,
    pub layers: Slice,
    pub tp: Slice,
    pub rows: Slice,
}

/// A collective of the training step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GradCollective {
    /// `before_forward` (per micro-batch, layer by layer), `before_backward`, `after_accumulation`
    /// (once per optimizer step).
    pub when: String,
    pub collective: Collective,
    /// `parameters` or `gradients`.
    pub tensor: String,
    pub axis: Axis,
    /// Bytes each rank contributes.
    pub bytes: u64,
}

/// The loss an `update` minimises: a kernel of the closure's body, seeded by the model output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loss {
    /// The closure's parameter: the model output (`logp`, `v`).
    pub param: String,
    /// Functions the body calls, in order of first use.
    pub calls: Vec<String>,
    /// Values the body reads (with the record field when it reads one).
    pub captures: Vec<Input>,
    /// The body as an entry of [`Plan::kernels`]: inputs `param`, each captured tensor by name
    /// and each record field the body reads as `name.field`; output `result`, a scalar.
    pub kernel: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The parameter (or record field) name.
    pub name: String,
    pub value: u32,
    pub field: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogField {
    pub name: String,
    pub value: u32,
}

/// The multi-turn part of a `generate` op (`generate(…, env: calc, max_turns: 3, max_obs: 6)`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvTurns {
    /// An entry of [`Plan::environments`].
    pub environment: String,
    /// Turns per episode at most (≥ 1); the episode ends earlier when the environment says done.
    pub max_turns: u64,
    /// Tokens per observation at most (≥ 1); a longer observation is a failure (`on_error`).
    pub max_obs: u64,
}

/// What an op does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum OpKind {
    /// Each data rank draws its share of the step's prompts.
    Sample {
        dataset: String,
        count: Option<u64>,
        /// `demonstrations` or `preferences`: a teacher-forced rollout of the task's answers
        /// (`count` demonstrations, or `count` pairs in `2·count` rows) instead of prompts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        form: Option<SampleForm>,
        /// The prompts a supervised form draws from (`train` when not written).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        split: Option<DataSplit>,
    },
    Generate {
        role: String,
        /// Sequences out (prompts × samples).
        batch: Option<u64>,
        n: Option<u64>,
        prompt_len: Option<u64>,
        /// New tokens per turn (the whole response when `env` is `None`).
        max_new: Option<u64>,
        temperature: Option<f64>,
        top_p: Option<f64>,
        top_k: Option<u64>,
        /// A multi-turn rollout: turns of at most `max_new` tokens alternate with the
        /// environment's observations; the response holds `max_turns × max_new +
        /// (max_turns − 1) × max_obs` positions.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<EnvTurns>,
        /// The rollout may come from weights up to this many updates old: the generator runs
        /// that many steps ahead of training (see `WeightSync::lag`). 0: synchronous.
        #[serde(default, skip_serializing_if = "is_zero")]
        staleness: u64,
        /// A partial rollout: each response pauses after this many tokens while the generator
        /// takes the next version of the weights (the sync of `WeightSync::lag` into this
        /// instance, received here instead of after the step), recomputes the prompt's and those
        /// tokens' cache with it and continues. Tokens from this position on are one update
        /// fresher (`rollout.version`). Needs `staleness` ≥ 1; absent: no pause.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pause_at: Option<u64>,
    },
    Logprobs {
        role: String,
        batch: Option<u64>,
        micro: Option<u64>,
        /// The `generate` op (of the same role, in the same step, on weights no update has
        /// changed since) whose sampler's log-probs of the response tokens this op returns
        /// instead of running a forward pass. Set by the compiler for `f32` roles only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_sampling: Option<u32>,
    },
    Values {
        role: String,
        batch: Option<u64>,
        micro: Option<u64>,
    },
    Score {
        role: String,
        batch: Option<u64>,
        micro: Option<u64>,
    },
    /// A `fn` of the program (or a builtin, or a dataset's `score`), run element-wise on each data
    /// rank's rows.
    Kernel {
        function: String,
        /// The module that defines it (`std.algo`, the root file's name); `None` for builtins.
        module: Option<String>,
        /// Arguments known before the job starts.
        attrs: BTreeMap<String, String>,
        /// Reduces over the batch: the data ranks all-reduce its partial results.
        batch_reduction: bool,
        /// Works on groups of rows (`group_*`): a group must not straddle two data ranks.
        grouped: bool,
        /// Its entry in [`Plan::kernels`], whose inputs are the op's inputs and `attrs` (as
        /// scalars) by name; `None` for a dataset's `score`, which the runtime implements.
        kernel: Option<u32>,
    },
    /// An external reward: the plan's verifier `verifier` scores each data rank's rows (decoded
    /// prompt and response, token ids, the dataset row's other fields). Inputs: the rollout;
    /// outputs: the reward `f32[B]`, then each of the verifier's metrics.
    Verify {
        verifier: String,
        /// The dataset whose rows the rollout's prompts came from (their fields are sent).
        dataset: String,
        /// Row fields each request carries besides the text and tokens.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        fields: Vec<String>,
    },
    Update {
        role: String,
        batch: Option<u64>,
        epochs: u64,
        minibatch: Option<u64>,
        /// Minibatches per epoch (`batch / minibatch`).
        minibatches: Option<u64>,
        /// Sequences per micro-batch per data rank.
        micro: Option<u64>,
        /// Micro-batches each data rank accumulates per optimizer step.
        accumulation: Option<u64>,
        /// Optimizer steps per `update` (`epochs × minibatches`).
        optimizer_steps: Option<u64>,
        optimizer: Option<Optimizer>,
        loss: Loss,
        /// Collectives of one optimizer step, in order.
        collectives: Vec<GradCollective>,
    },
    /// Moves a value from the layout that produced it to the layout that reads it.
    Transfer {
        collective: Collective,
        value: u32,
        from: String,
        to: String,
        /// Bytes moved in all, when the shape is known.
        bytes: Option<u64>,
        sends: Vec<Send>,
    },
    /// Copies the trained weights of `role` from its training layout to another layout (3D
    /// re-sharding). Runs after the step's `update`; the destination uses the new weights from
    /// the next step on.
    WeightSync {
        role: String,
        from: String,
        to: String,
        /// Source and destination share devices (the copy is device-local where it can be).
        colocated: bool,
        /// Bytes of weights in all.
        bytes: u64,
        moves: Vec<ShardMove>,
        /// The destination generates this many steps ahead (its `generate`'s `staleness`): it
        /// takes the weights of step `k − lag`'s update at step `k` (none in the first `lag`
        /// steps), and the last `lag` steps send none. 0: every step's weights, that step.
        #[serde(default, skip_serializing_if = "is_zero")]
        lag: u64,
    },
    Checkpoint {
        role: String,
        instance: String,
    },
    Log {
        fields: Vec<LogField>,
    },
}

impl OpKind {
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Sample { .. } => "sample",
            OpKind::Generate { .. } => "generate",
            OpKind::Logprobs { .. } => "logprobs",
            OpKind::Values { .. } => "values",
            OpKind::Score { .. } => "score",
            OpKind::Kernel { .. } => "kernel",
            OpKind::Verify { .. } => "verify",
            OpKind::Update { .. } => "update",
            OpKind::Transfer { .. } => "transfer",
            OpKind::WeightSync { .. } => "weight_sync",
            OpKind::Checkpoint { .. } => "checkpoint",
            OpKind::Log { .. } => "log",
        }
    }

    /// The role a role operation runs.
    pub fn role(&self) -> Option<&str> {
        match self {
            OpKind::Generate { role, .. }
            | OpKind::Logprobs { role, .. }
            | OpKind::Values { role, .. }
            | OpKind::Score { role, .. }
            | OpKind::Update { role, .. }
            | OpKind::WeightSync { role, .. }
            | OpKind::Checkpoint { role, .. } => Some(role),
            _ => None,
        }
    }
}

/// One operation of a step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Op {
    pub id: u32,
    /// A short label: `policy.generate`, `kernel gae`, `transfer ref_logp`.
    pub label: String,
    pub kind: OpKind,
    /// The instance whose layout it runs with (none for transfers and weight syncs, which span two).
    pub instance: Option<String>,
    /// Every rank that takes part.
    pub ranks: RankSet,
    /// Instances that must be on the device while it runs (their weights are read or written).
    pub uses: Vec<String>,
    pub inputs: Vec<Input>,
    pub outputs: Vec<u32>,
    /// Ops of the same step that must finish first (sorted).
    pub deps: Vec<u32>,
    /// Longest dependency chain before it: ops of one level have no order between them.
    pub level: u32,
    /// Runs only in steps where `(step + 1) % every == 0`.
    pub every: Option<u64>,
}

/// A data edge: `value` (or one `field` of it) from `from` to `to`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edge {
    pub value: u32,
    pub field: Option<String>,
    pub from: u32,
    pub to: u32,
    #[serde(rename = "type")]
    pub ty: ValueType,
    /// How the consumer needs it split over its ranks.
    pub split: Split,
    /// The transfer that re-lays it out, when producer and consumer layouts differ.
    pub via: Option<u32>,
}

/// How much of an instance's state a step moves (or an op needs on the device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The weights only (what a forward pass, generation or a weight sync reads).
    Weights,
    /// Gradients, optimizer state and fp32 master weights: what only training needs.
    TrainingState,
    /// Everything the instance keeps on the device.
    All,
}

/// One entry of a rank's program.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Runs op `op`; `bytes` is the device memory in use while it runs.
    Run { op: u32, bytes: u64 },
    /// Moves `part` of the instance's state to host memory; `bytes` is the device memory in use
    /// after it.
    Offload {
        instance: String,
        part: Part,
        bytes: u64,
    },
    /// Brings `part` back; `bytes` is the device memory in use after it.
    Onload {
        instance: String,
        part: Part,
        bytes: u64,
    },
}

/// The ordered program of some ranks (identical for all of them) and its memory timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankProgram {
    pub ranks: RankSet,
    /// What is on the device when a step starts: instance → `weights` or `all` (the state the
    /// previous step left; the runtime loads it before step 0).
    pub resident: BTreeMap<String, Part>,
    pub steps: Vec<Step>,
    /// The largest `bytes` of the timeline, and the device's memory.
    pub peak: u64,
    pub capacity: u64,
    /// Some estimate used a quantity the program does not fix: the figures are lower bounds.
    pub lower_bound: bool,
}

impl Plan {
    /// The plan as pretty JSON with a final newline (the file format).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a plan serialises");
        s.push('\n');
        s
    }

    pub fn instance(&self, id: &str) -> Option<&Instance> {
        self.instances.iter().find(|i| i.id == id)
    }

    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.iter().find(|r| r.name == name)
    }

    pub fn dataset(&self, name: &str) -> Option<&Dataset> {
        self.datasets.iter().find(|d| d.name == name)
    }

    /// Whether instances `a` and `b` hold one model (the same ranks, the same shards): the
    /// runtime builds it once, and a weight sync between them moves nothing.
    pub fn share_model(&self, a: &str, b: &str) -> bool {
        match (self.instance(a), self.instance(b)) {
            (Some(a), Some(b)) => a.ranks == b.ranks && a.layout.same_shards(&b.layout),
            _ => false,
        }
    }
}

/// Serde: a count of 0 is left out of the plan (the default of fields added in version 3).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_sets_merge_and_print() {
        let s = RankSet::from_ranks([5, 0, 1, 2, 3, 9, 4]);
        assert_eq!(s.to_string(), "0..6,9");
        assert_eq!(RankSet::parse("0..6,9").unwrap(), s);
        assert_eq!(s.len(), 7);
        assert_eq!(s.nth(6), Some(9));
        assert_eq!(s.end(), 10);
        assert!(RankSet::parse("3..3").is_err());
        assert!(RankSet::parse("a..b").is_err());
        assert_eq!(RankSet::parse("").unwrap(), RankSet::default());
    }

    #[test]
    fn instance_coordinates_are_pp_dp_fsdp_tp() {
        let inst = Instance {
            id: "x".into(),
            role: "x".into(),
            cluster: "c".into(),
            phases: vec![Phase::Train],
            ranks: RankSet::range(8, 24),
            layout: Layout {
                dp: 2,
                fsdp: 2,
                tp: 2,
                pp: 2,
                sp: 1,
                micro: None,
            },
            auto: false,
            memory: BTreeMap::new(),
        };
        // ((p·dp + d)·fsdp + f)·tp + t
        assert_eq!(inst.rank_at(1, 0, 1, 1), Some(8 + ((2) * 2 + 1) * 2 + 1));
        for r in 8..24 {
            let (p, d, f, t) = inst.coord_of(r).unwrap();
            assert_eq!(inst.rank_at(p, d, f, t), Some(r));
        }
        assert_eq!(inst.data_group(1).to_string(), "10..12,18..20");
        assert_eq!(inst.data_leader(1), Some(18));
        assert_eq!(inst.groups(Axis::Tp).len(), 8);
        assert_eq!(inst.groups(Axis::Fsdp)[0], vec![8, 10]);
    }

    #[test]
    fn tensor_types_read_back() {
        for text in ["f32[128, 8]", "i32[512, P]", "f32", "bool[4]"] {
            assert_eq!(TensorType::parse(text).unwrap().to_string(), text);
        }
        assert!(TensorType::parse("f32[4").is_err());
        assert_eq!(TensorType::parse("bf16[2, 3]").unwrap().bytes(), Some(12));
    }
}

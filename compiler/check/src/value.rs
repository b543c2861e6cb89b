//! The checker's values. One domain serves both levels of the language: configuration (numbers
//! known before the job starts, clusters, architectures) and tensors (known by element type and
//! shape only). A scalar carries its constant when the program text decides it.

use crate::program::{self, Origin};
use rlc_diagnostics::Span;
use std::fmt;
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    Bf16,
    F16,
    I32,
    I64,
    Bool,
}

impl DType {
    pub fn from_name(name: &str) -> Option<DType> {
        Some(match name {
            "f32" => DType::F32,
            "bf16" => DType::Bf16,
            "f16" => DType::F16,
            "i32" | "Tokens" => DType::I32,
            "i64" => DType::I64,
            "bool" | "Mask" => DType::Bool,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::Bf16 | DType::F16)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }
}

/// A tensor dimension: a symbol of the enclosing signature (`B`, `T`) or a known size.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Sym(String),
    Size(u64),
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Sym(s) => f.write_str(s),
            Dim::Size(n) => write!(f, "{n}"),
        }
    }
}

/// Element type and shape; no dimensions is a scalar.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorTy {
    pub dtype: DType,
    pub dims: Vec<Dim>,
}

impl TensorTy {
    pub fn scalar(dtype: DType) -> Self {
        TensorTy {
            dtype,
            dims: Vec::new(),
        }
    }
    pub fn is_scalar(&self) -> bool {
        self.dims.is_empty()
    }
}

impl fmt::Display for TensorTy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dtype.as_str())?;
        if let Some((first, rest)) = self.dims.split_first() {
            write!(f, "[{first}")?;
            for d in rest {
                write!(f, ", {d}")?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// A record value: `Rollout`, a user `struct`, or a `log { … }` literal.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordVal {
    pub name: String,
    pub fields: Vec<(String, Val)>,
}

/// A synthetic task or a prompt file.
#[derive(Clone, Debug, PartialEq)]
pub struct DatasetSpec {
    pub name: String,
    /// `reverse_digits`, `add_numbers`, `sort_digits`, `add_with_tool`, or `jsonl`.
    pub kind: String,
    pub digits: Option<i64>,
    pub path: Option<String>,
    pub field: Option<String>,
    /// `jsonl(…, tokenizer: "dir")`: the folder whose `tokenizer.json` encodes the text
    /// (relative to the module's file).
    pub tokenizer: Option<String>,
    /// The tokenizer file was read and is not usable (reported as E0408).
    pub tokenizer_unusable: bool,
    /// Vocabulary size of a synthetic task's tokenizer, or of a `jsonl` dataset's `tokenizer.json`.
    pub vocab: Option<i64>,
    /// Longest prompt in tokens, when the task fixes it.
    pub prompt_len: Option<i64>,
    /// The row fields a verifier may ask for: `jsonl(…, keep: ["answer"])`'s, or a digit
    /// task's `answer` (the target text).
    pub keep: Vec<String>,
    pub origin: Origin,
}

/// Every option of a verifier's `program(…)`; `http(…)` takes those that are not
/// [`VERIFIER_PROCESS_OPTIONS`].
pub const VERIFIER_OPTIONS: [&str; 11] = [
    "workers",
    "batch",
    "timeout",
    "on_error",
    "fields",
    "metrics",
    "cpu",
    "memory",
    "files",
    "processes",
    "network",
];

/// Every option of an environment's `program(…)`: a verifier's but `metrics` (an environment's
/// rewards are summed into the rollout's `env_reward`).
pub const ENVIRONMENT_OPTIONS: [&str; 10] = [
    "workers",
    "batch",
    "timeout",
    "on_error",
    "fields",
    "cpu",
    "memory",
    "files",
    "processes",
    "network",
];

/// The options that limit a worker process (meaningless for an HTTP server).
pub const VERIFIER_PROCESS_OPTIONS: [&str; 5] = ["cpu", "memory", "files", "processes", "network"];

/// A `verifier` declaration, its options evaluated (defaults filled in).
///
/// Defaults: `workers: 1`, `batch: 64`, `timeout: 60s`, `cpu:` the timeout rounded up to whole
/// seconds, `memory: 1GiB`, `files: 64MiB`, `processes: 16`, `network: false`,
/// `on_error: fail`, `fields: []`, `metrics: []`.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifierSpec {
    /// The item's name.
    pub name: String,
    pub endpoint: VerifierEndpoint,
    pub workers: u32,
    pub batch: u32,
    pub timeout_ms: u64,
    pub cpu_seconds: u64,
    pub memory_bytes: u64,
    pub file_bytes: u64,
    pub processes: u64,
    pub network: bool,
    /// `on_error: zero`: a failed sample scores 0 (and is counted); `fail` stops the run.
    pub on_error_zero: bool,
    /// Row fields each request carries, with where each was written.
    pub fields: Vec<(String, Span)>,
    /// Named metrics besides the reward, in declaration order.
    pub metrics: Vec<String>,
    /// The declaration's name.
    pub origin: Origin,
}

/// An `environment` declaration: a verifier's options, evaluated the same way (same defaults);
/// its `metrics` are always empty.
pub type EnvironmentSpec = VerifierSpec;

/// Where a verifier's scores come from.
#[derive(Clone, Debug, PartialEq)]
pub enum VerifierEndpoint {
    /// `program("python3", "answer.py")`: the command and its arguments.
    Program(Vec<String>),
    /// `http("http://…")`.
    Http(String),
}

/// The record name of a verifier's result when it declares metrics (`r.reward`, `r.format`).
pub const VERIFIER_RESULT: &str = "VerifierResult";

/// Prompts drawn from a dataset in one step.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptsVal {
    pub dataset: Rc<DatasetSpec>,
    pub count: Option<i64>,
    pub count_origin: Origin,
}

/// What a role call produced, for the calls that consume it.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutInfo {
    pub rows: Option<i64>,
    pub rows_origin: Origin,
    pub prompt_len: Option<i64>,
    pub response_len: Option<i64>,
    pub response_origin: Origin,
    pub group_size: Option<i64>,
    pub group_origin: Origin,
    pub dataset: Rc<DatasetSpec>,
    /// The model that generated it; `None` for a dataset's demonstrations or preference pairs.
    pub model: Option<usize>,
}

/// A reference to an item of a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ItemRef {
    pub module: usize,
    pub index: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Int(Option<i64>),
    Float(Option<f64>),
    Bool(Option<bool>),
    Str(Option<String>),
    Tensor(TensorTy),
    Record(Rc<RecordVal>),
    /// The rollout record of a `generate` call, with what it knows about the batch.
    Rollout(Rc<RecordVal>, Rc<RolloutInfo>),
    Arch(Rc<program::Arch>),
    Device(Rc<program::DeviceSpec>),
    Cluster(usize),
    /// A cluster not yet named by a `cluster` item (`cpu(devices: 2)`).
    ClusterSpec(Rc<program::Cluster>),
    Devices {
        cluster: usize,
        start: Option<i64>,
        end: Option<i64>,
    },
    Init(Rc<InitVal>),
    Optim(Rc<program::Optimizer>),
    Dataset(Rc<DatasetSpec>),
    Verifier(Rc<VerifierSpec>),
    /// An `environment` item: usable only as `generate(…, env: name)`.
    Environment(Rc<EnvironmentSpec>),
    /// `["answer", "steps"]`
    List(Rc<Vec<Val>>),
    Prompts(Rc<PromptsVal>),
    Model(usize),
    Fn(ItemRef),
    /// A `pipeline` item: callable only as the whole body of another pipeline.
    Pipeline(ItemRef),
    Module(usize),
    Range(Option<i64>, Option<i64>),
    /// A statement's value, or a call that returns nothing.
    Unit,
    /// Poison: an error was reported; uses of this value report nothing more.
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub enum InitVal {
    Random(i64),
    Hf(String),
    Load(String),
    Frozen(usize),
}

impl Val {
    /// A short description of the value's kind, for "expected …, found …".
    pub fn describe(&self) -> String {
        match self {
            Val::Int(_) => "an integer".into(),
            Val::Float(_) => "a number".into(),
            Val::Bool(_) => "a boolean".into(),
            Val::Str(_) => "a string".into(),
            Val::Tensor(t) if t.is_scalar() => format!("a scalar `{t}`"),
            Val::Tensor(t) => format!("a tensor `{t}`"),
            Val::Record(r) | Val::Rollout(r, _) => format!("a `{}` record", r.name),
            Val::Arch(_) => "an architecture".into(),
            Val::Device(_) => "a device".into(),
            Val::Cluster(_) | Val::ClusterSpec(_) => "a cluster".into(),
            Val::Devices { .. } => "a set of devices".into(),
            Val::Init(_) => "an initialisation".into(),
            Val::Optim(_) => "an optimiser".into(),
            Val::Dataset(_) => "a dataset".into(),
            Val::Verifier(_) => "a verifier".into(),
            Val::Environment(_) => "an environment".into(),
            Val::List(_) => "a list".into(),
            Val::Prompts(_) => "a batch of prompts".into(),
            Val::Model(_) => "a model".into(),
            Val::Fn(_) => "a function".into(),
            Val::Pipeline(_) => "a pipeline".into(),
            Val::Module(_) => "a module".into(),
            Val::Range(..) => "a range".into(),
            Val::Unit => "nothing".into(),
            Val::Error => "an invalid value".into(),
        }
    }

    /// The value as a tensor type, for numbers and tensors.
    pub fn as_tensor(&self) -> Option<TensorTy> {
        match self {
            Val::Tensor(t) => Some(t.clone()),
            Val::Float(_) => Some(TensorTy::scalar(DType::F32)),
            Val::Int(_) => Some(TensorTy::scalar(DType::I64)),
            Val::Bool(_) => Some(TensorTy::scalar(DType::Bool)),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Val::Int(v) => *v,
            Val::Float(Some(f)) if f.fract() == 0.0 && f.abs() < 9e15 => Some(*f as i64),
            _ => None,
        }
    }

    pub fn as_float(&self) -> Option<f64> {
        match self {
            Val::Int(Some(i)) => Some(*i as f64),
            Val::Float(v) => *v,
            _ => None,
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Val::Error)
    }
}

/// Fields of the record `ds.demonstrations(n)` returns (a rollout whose response is the
/// task's answer), and with `chosen` for `ds.preferences(n)` (pairs of rows sharing a `group`).
pub fn supervised_record(rows: Dim, response: Dim, pairs: bool) -> RecordVal {
    let mut record = rollout_record(rows.clone(), response);
    if pairs {
        record.fields.push((
            "chosen".into(),
            Val::Tensor(TensorTy {
                dtype: DType::Bool,
                dims: vec![rows],
            }),
        ));
    }
    record
}

/// Fields of the record a multi-turn `generate(…, env: …)` returns: a rollout's, and the
/// turns each sample took (`i32[B]`, 1 to `max_turns`), the sum of the environment's rewards
/// over them (`f32[B]`), and each response position's turn (`i32[B, T]`: the turn index of a
/// policy token, -1 for observation tokens and padding). `mask` covers the policy's tokens only.
pub fn env_rollout_record(rows: Dim, response: Dim) -> RecordVal {
    let mut record = sampled_rollout_record(rows.clone(), response.clone());
    let t = |dtype, dims: Vec<Dim>| Val::Tensor(TensorTy { dtype, dims });
    record.fields.extend([
        ("turns".into(), t(DType::I32, vec![rows.clone()])),
        ("env_reward".into(), t(DType::F32, vec![rows.clone()])),
        ("turn".into(), t(DType::I32, vec![rows, response])),
    ]);
    record
}

/// Fields of the record a `generate` call returns: a rollout's, `logp` (`f32[B, T]`), the
/// log-probability of each response token under the weights that sampled it (the behaviour
/// policy's, which an asynchronous rollout's off-policy correction needs), and `version`
/// (`i32[B, T]`), how many updates those weights had seen, token by token (a partial rollout
/// changes weights mid-response).
pub fn sampled_rollout_record(rows: Dim, response: Dim) -> RecordVal {
    let mut record = rollout_record(rows.clone(), response.clone());
    record.fields.push((
        "logp".into(),
        Val::Tensor(TensorTy {
            dtype: DType::F32,
            dims: vec![rows.clone(), response.clone()],
        }),
    ));
    record.fields.push((
        "version".into(),
        Val::Tensor(TensorTy {
            dtype: DType::I32,
            dims: vec![rows, response],
        }),
    ));
    record
}

/// Fields of every rollout record (a `Rollout` parameter's type; supervised batches add theirs).
pub fn rollout_record(rows: Dim, response: Dim) -> RecordVal {
    let t = |dtype, dims: Vec<Dim>| Val::Tensor(TensorTy { dtype, dims });
    let bt = vec![rows.clone(), response];
    RecordVal {
        name: "Rollout".into(),
        fields: vec![
            (
                "prompt".into(),
                t(DType::I32, vec![rows.clone(), Dim::Sym("P".into())]),
            ),
            ("response".into(), t(DType::I32, bt.clone())),
            ("mask".into(), t(DType::Bool, bt.clone())),
            ("last".into(), t(DType::Bool, bt.clone())),
            ("target".into(), t(DType::I32, bt)),
            ("group".into(), t(DType::I32, vec![rows])),
        ],
    }
}

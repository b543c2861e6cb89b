//! External rewards: the user's own program (or HTTP server) that scores responses. The plan
//! carries each declaration whole, so the runtime starts its worker pool from the plan alone.

use serde::{Deserialize, Serialize};

/// A `verifier` declaration: where the scores come from, how many workers, their limits and
/// what a failure does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verifier {
    pub name: String,
    pub endpoint: VerifierEndpoint,
    /// Long-lived workers (processes, or concurrent connections to a server).
    pub workers: u32,
    /// Samples per request (one JSON line carries this many items at most).
    pub batch: u32,
    /// Per-request deadline; a worker that misses it is killed (a process) or abandoned (HTTP).
    pub timeout_ms: u64,
    pub limits: WorkerLimits,
    pub on_error: OnError,
    /// Named metrics each result carries besides the reward, in declaration order: the op's
    /// outputs after the reward, one `f32[B]` each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum VerifierEndpoint {
    /// A program speaking the worker protocol over stdin/stdout (`docs/verifiers.md`).
    /// `command[0]` is looked up on `PATH`; relative paths in it start from the program's root
    /// file's folder.
    Program { command: Vec<String> },
    /// An HTTP/JSON server: one POST per request.
    Http { url: String },
}

/// rlimits of each worker process (`None`: the OS default). Ignored for HTTP endpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// Cut the worker off the network (a new network namespace) where the OS allows it.
    pub no_network: bool,
}

/// An `environment` declaration: the other side of a multi-turn rollout. After each turn of a
/// `generate` op that names it (`OpKind::Generate::env`), the environment receives each episode
/// so far and answers an observation, a reward and whether the episode is done
/// (`docs/environments.md`). Same endpoint, pool and limits as a [`Verifier`]; no metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    pub name: String,
    pub endpoint: VerifierEndpoint,
    /// Long-lived workers (processes, or concurrent connections to a server).
    pub workers: u32,
    /// Episodes per request (one JSON line carries this many items at most).
    pub batch: u32,
    /// Per-request deadline; a worker that misses it is killed (a process) or abandoned (HTTP).
    pub timeout_ms: u64,
    pub limits: WorkerLimits,
    /// What a failed request or an observation longer than `max_obs` does: `fail` stops the
    /// run; `zero` ends the episode with an environment reward of 0 and counts it.
    pub on_error: OnError,
    /// Row fields of the prompts' dataset each item carries (`fields: ["answer"]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

/// What a failed request (crash, timeout, garbage, NaN, a missing result) does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// The run stops with an error naming the verifier, the sample and the cause.
    Fail,
    /// The sample's reward (and metrics) are 0, and the step's `verifier_failures` counts it.
    Zero,
}

//! External rewards (`verifier` declarations, `docs/verifiers.md`): the worker protocol, worker
//! processes in their sandbox, the pool that spreads batched requests over them, HTTP endpoints,
//! and turning results into the reward and metric tensors. Multi-turn environments
//! (`environment` declarations, `docs/environments.md`) use the same pool with their own
//! messages (`environment`).

pub mod environment;
pub mod http;
pub mod pool;
pub mod protocol;
pub mod scoring;
pub mod worker;

pub use pool::{Outcome, Pool, Scored};
pub use protocol::Item;
pub use scoring::{SampleFailed, Scores, apply};

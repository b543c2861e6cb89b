//! The `Plan`: a resource-placed execution graph, the one serialised boundary between the
//! compiler and the runtime (`docs/plan.md` is its reference).
//!
//! - [`model`]: the data model (serde, versioned); depends on nothing of the compiler.
//! - [`validate`]: loading a plan file, with coded errors (`P0001`…).
//! - [`graph`]: Graphviz and Mermaid pictures of a plan.
//! - [`lower`] (feature `lower`, on by default): a checked program → a plan. The runtime depends
//!   on this crate with `default-features = false` and never sees the checker.
//!
//! The crate does no IO.

pub mod graph;
#[cfg(feature = "lower")]
pub mod lower;
pub mod model;
pub mod validate;

pub use model::{PLAN_VERSION, Plan};
pub use validate::{PlanCode, PlanError, load, validate};

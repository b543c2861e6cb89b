//! The `Plan`: a resource-placed execution graph, the one serialised boundary between the
//! compiler and the runtime (`docs/plan.md` is its reference).
//!
//! - [`model`]: the data model (serde, versioned); depends on nothing of the compiler.
//! - [`validate`]: loading a plan file, with coded errors (`P0001`…).
//! - [`graph`]: Graphviz and Mermaid pictures of a plan.
//! - [`lower`] (feature `lower`, on by default): a checked program → a plan. The runtime depends
//!   on this crate with `default-features = false` and never sees the checker.
//! - [`cost`]: the cost model (seconds per op from the hardware the plan carries).
//! - [`simulate`]: a plan's simulated timeline, utilisation and forecast, and its Gantt chart.
//! - [`planner`] (feature `lower`): `place … auto`: the search over pools and layouts.
//! - [`reshard`]: the moves of a weight sync between two layouts of a role.
//!
//! The crate does no IO.

pub mod cost;
pub mod graph;
#[cfg(feature = "lower")]
pub mod lower;
pub mod model;
#[cfg(feature = "lower")]
pub mod planner;
pub mod reshard;
pub mod simulate;
pub mod validate;

pub use model::{PLAN_VERSION, Plan};
pub use validate::{PlanCode, PlanError, load, validate};

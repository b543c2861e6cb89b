//! The cost model: seconds for each operation of a step on the hardware a plan carries.
//!
//! - [`params`]: the model's tunable numbers (efficiencies, latencies, overheads);
//! - [`calibrate`]: those numbers fitted to a run's `metrics.jsonl` (its step times and the
//!   time of each kind of op);
//! - [`hardware`]: a view of a plan cluster's device and links (the numbers `std.hardware`
//!   gives; nothing here keeps a table of its own);
//! - [`collective`]: the α–β model of ring and tree collectives;
//! - [`work`]: compute- and memory-bound time of a role phase (generation, forward passes,
//!   training) under a layout;
//! - [`plan_ops`]: the duration of every op and offload/onload step of a [`crate::Plan`].
//!
//! Every function is pure and cheap: the planner calls [`work`] for each candidate layout.

pub mod calibrate;
pub mod collective;
pub mod hardware;
pub mod params;
pub mod plan_ops;
pub mod work;

pub use hardware::{Hardware, Link, Placed};
pub use params::CostParams;
pub use plan_ops::PlanCosts;
pub use work::{PhaseWork, RoleShape, Sequences};

//! The planner: `place … auto` decided by search (`docs/planner.md`).
//!
//! - [`units`]: what is placed (units), what each runs per step (calls);
//! - [`options`]: the feasible layouts of a unit on a number of devices (arithmetic and memory
//!   rules, cost model), Pareto-pruned;
//! - [`objective`]: the step time of a complete placement (a list schedule);
//! - [`search`]: branch and bound over pools, splits and layouts, and the brute force the tests
//!   compare it with;
//! - [`apply`]: the chosen placement written into the program, checked and lowered;
//! - [`report`]: the report `rlc plan` prints.

pub mod apply;
pub mod objective;
pub mod options;
pub mod report;
pub mod search;
pub mod units;

pub use apply::{Planned, plan_auto};

//! The simulated timeline of a plan: every rank program runs its steps in order, an op starts
//! when all its ranks have reached it and its dependencies are done, and lasts what the
//! [cost model](crate::cost) says. Ranks with identical programs share one lane.
//!
//! - [`timeline`]: one step's timeline, utilisation per lane, and the forecast for `N` steps;
//! - [`gantt`]: the timeline as an SVG Gantt chart, and as the drawing the PNG is rasterised from.

pub mod gantt;
pub mod timeline;

pub use timeline::{
    Bar, BarKind, Forecast, Lane, TIME_KEY_PREFIX, Timeline, forecast, simulate_step,
};

//! Half of an import cycle: this module imports `e0204_import_cycle.rl`, which imports it.

import "../e0204_import_cycle.rl" { bonus }  //~ E0204

/// The reward plus the other module's bonus.
pub fn shaped(reward: f32[B]) -> f32[B] {
  reward + bonus(reward)
}

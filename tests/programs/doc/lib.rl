//! A small library for `rlc doc`'s tests: functions whose signatures name other items,
//! a constant, a dataset and a private helper that is left out.
//!
//! - one list item
//! - and another, with `code` and a <tag>

import "./weights.rl" { beta, Scores }
import std.task.digits { reverse_task }

/// The reward less `beta` times the penalty: `r − β·p`.
pub fn net(reward: f32[B], penalty: f32[B], beta = beta) -> f32[B] {
  reward - beta * penalty
}

/// The total of a pair of scores.
pub fn total(s: Scores) -> f32[B] {
  net(s.reward, s.penalty)
}

/// How many digits the task has.
pub let width = 6

/// The reversal task at `width` digits.
pub dataset task = reverse_task(digits: width)

// Not pub: not documented.
fn helper(x: f32) -> f32 {
  x
}

//! The static RLHF checks, one module each, as pure functions of the [`Program`].

mod algorithm;
mod batch;
pub mod memory;
mod placement;
mod schedule;
mod waste;

use crate::program::Program;
use rlc_diagnostics::Diagnostic;

pub fn run(program: &Program, diags: &mut Vec<Diagnostic>) {
    let before = diags.len();
    placement::check(program, diags);
    batch::check(program, diags);
    algorithm::check(program, diags);
    schedule::check(program, diags);
    // Memory and waste are judged on a placement that is itself valid.
    if diags[before..].iter().any(Diagnostic::is_error) {
        return;
    }
    memory::check(program, diags);
    waste::check(program, diags);
}

/// Divisors of `n` up to `max`, for help text (`1, 2, 4, 8`); the work is bounded by `max`,
/// whatever `n`.
pub(crate) fn divisors(n: u64, max: u64) -> String {
    let ds: Vec<String> = (1..=max.min(n))
        .filter(|d| n.is_multiple_of(*d))
        .map(|d| d.to_string())
        .collect();
    ds.join(", ")
}

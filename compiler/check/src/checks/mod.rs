//! The static RLHF checks, one module each, as pure functions of the [`Program`].

mod algorithm;
mod asynchronous;
mod batch;
pub mod memory;
mod placement;
mod schedule;
mod waste;

use crate::program::Program;
use rlc_diagnostics::Diagnostic;

/// What of the program a syntax error left out (the items it cut short are missing), in
/// increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Missing {
    /// Every item parsed.
    Nothing,
    /// Only `fn`s or `struct`s: the configuration is whole, but the pipeline may lack role calls
    /// (which only ever makes fewer demands), so only the waste lints, which read an unused
    /// placement as a mistake, are left out.
    Code,
    /// A configuration item (`model`, `cluster`, `place`, `let`, `dataset`, `pipeline`, an
    /// `import`, or text that starts no item): only the checks that judge each `place` line, role
    /// call and schedule on its own run; those that need the whole program (every phase placed,
    /// batches over every rank, memory and idle devices per device) would report what the
    /// missing items would have declared.
    Configuration,
}

pub fn run(program: &Program, diags: &mut Vec<Diagnostic>) {
    run_with(program, Missing::Nothing, diags);
}

/// The checks that `missing` leaves meaningful (see [`Missing`]).
pub fn run_with(program: &Program, missing: Missing, diags: &mut Vec<Diagnostic>) {
    if missing == Missing::Configuration {
        placement::arithmetic(program, diags);
        algorithm::check(program, diags);
        schedule::check(program, diags);
        return;
    }
    let before = diags.len();
    placement::check(program, diags);
    batch::check(program, diags);
    algorithm::check(program, diags);
    asynchronous::check(program, diags);
    schedule::check(program, diags);
    // Memory and waste are judged on a placement that is itself valid.
    if diags[before..].iter().any(Diagnostic::is_error) {
        return;
    }
    memory::check(program, diags);
    if missing == Missing::Nothing {
        waste::check(program, diags);
    }
}

/// The divisors of `n`, ascending, found in `√n` steps (a layout may have 2³¹ ranks).
pub(crate) fn divisors_of(n: u64) -> Vec<u64> {
    let mut low = Vec::new();
    let mut high = Vec::new();
    let mut d = 1;
    while d <= n / d {
        if n.is_multiple_of(d) {
            low.push(d);
            if d != n / d {
                high.push(n / d);
            }
        }
        d += 1;
    }
    low.extend(high.into_iter().rev());
    low
}

pub(crate) fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
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

//! The static RLHF checks, one module each, as pure functions of the [`Program`].

mod algorithm;
mod batch;
pub mod memory;
mod placement;
mod waste;

use crate::program::Program;
use rlc_diagnostics::Diagnostic;

pub fn run(program: &Program, diags: &mut Vec<Diagnostic>) {
    let before = diags.len();
    placement::check(program, diags);
    batch::check(program, diags);
    algorithm::check(program, diags);
    // Memory and waste are judged on a placement that is itself valid.
    if diags[before..].iter().any(Diagnostic::is_error) {
        return;
    }
    memory::check(program, diags);
    waste::check(program, diags);
}

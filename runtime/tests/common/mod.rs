//! Setup shared by the kernel tests: check an in-memory root module (with std) and insist that
//! it is clean.

use rlc_check::{Checked, SourceLoader};
use rlc_diagnostics::Files;

/// Imports of files are not served: the test modules import std only.
struct NoFiles;

impl SourceLoader for NoFiles {
    fn read(&self, path: &str) -> Result<String, String> {
        Err(format!("{path}: not found"))
    }
}

/// The checked program of `source`, named `name`; panics with the diagnostics if it has errors.
pub fn checked(name: &str, source: &str) -> Checked {
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, name, source.to_string());
    let errors: Vec<_> = checked
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .collect();
    assert!(
        errors.is_empty(),
        "the test module does not check: {errors:#?}"
    );
    checked
}

#[allow(dead_code)]
pub mod kernels;

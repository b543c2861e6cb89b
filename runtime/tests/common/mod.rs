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

/// The options of a test job in `dir` on two CPU threads with seed 3: its run folder
/// `dir/run`, relative paths from `dir`; no trace, verifiers on their background thread.
#[allow(dead_code)]
pub fn run_options(dir: &std::path::Path) -> rlc_runtime::exec::RunOptions {
    rlc_runtime::exec::RunOptions {
        run_dir: dir.join("run"),
        source_dir: dir.to_path_buf(),
        seed: 3,
        resume: false,
        progress: false,
        stop_after: None,
        threads: Some(2),
        device: rlc_runtime::device::DeviceRequest::Cpu,
        trace: false,
        verify_in_place: false,
    }
}

/// The JSON objects of a JSON Lines file.
#[allow(dead_code)]
pub fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

//! Runs this test binary's `#[ignore]`d rank test as the processes of an MPI job on loopback.

use rlc_runtime::collectives::processes::local_mpirun;

/// Starts `mpirun -np <np>` of this binary's ignored test `test`; whether every process passed,
/// and their output (standard output, then standard error).
pub fn run_as_processes(np: usize, test: &str) -> (bool, String) {
    run_as_processes_with(np, &[], test)
}

/// [`run_as_processes`] with more options for `mpirun` (e.g. its CPU binding).
pub fn run_as_processes_with(np: usize, mpirun: &[&str], test: &str) -> (bool, String) {
    let out = local_mpirun(np)
        .args(mpirun)
        .arg(std::env::current_exe().expect("the test binary's path"))
        .args([
            "--ignored",
            "--exact",
            test,
            "--test-threads=1",
            "--nocapture",
        ])
        .output()
        .expect("starting mpirun");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

//! `rlc`: the command-line front of the rl compiler. The compiler crates are pure; this binary
//! reads files, calls them, renders diagnostics and sets the exit code
//! (0 clean, 1 errors found, 2 usage or I/O error).
//!
//! It never links libtorch, so that `check`, `fmt`, `build`, `lsp` … start in milliseconds
//! (tests/front.rs checks the binary's dynamic dependencies): the two commands that evaluate on
//! libtorch, `run` and `kernel --inputs`, are carried out by `rlc-run` (src/bin/rlc-run/), built
//! with the `runtime` feature next to `rlc`, which this process becomes.

mod cli;

use clap::Parser;
use std::process::ExitCode;

/// `run` and `kernel --inputs`: handed to `rlc-run`, after `rlc` has parsed the arguments (so
/// usage errors and `--help` stay here).
const HAND_OVER: cli::Runtime = cli::Runtime {
    run: |_| hand_over(),
    evaluate: |_| hand_over(),
};

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args, &HAND_OVER) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

/// What `run` and `kernel --inputs` say in a build without libtorch.
#[cfg(not(feature = "runtime"))]
fn hand_over() -> Result<ExitCode, String> {
    Err("this `rlc` was built without the runtime; build it with \
         `cargo build --release --features runtime` (scripts/main-job.sh does, installing libtorch \
         when missing), which makes `rlc-run` next to `rlc`"
        .into())
}

/// The runtime's executable, next to `rlc`.
#[cfg(feature = "runtime")]
const RUNNER: &str = "rlc-run";

/// Replaces this process with `rlc-run` (next to this executable, symbolic links resolved) on
/// the same arguments. On Unix it is an `exec`: the process id, signals, standard streams,
/// environment and exit status are the runtime's, so `mpirun -np 2 rlc run …` and `srun` see
/// one process per rank, as before.
#[cfg(feature = "runtime")]
fn hand_over() -> Result<ExitCode, String> {
    let me = std::env::current_exe()
        .map_err(|e| format!("cannot find the `rlc` executable to start `{RUNNER}`: {e}"))?;
    let runner = me.with_file_name(format!("{RUNNER}{}", std::env::consts::EXE_SUFFIX));
    if !runner.is_file() {
        return Err(format!(
            "`rlc run` and `rlc kernel --inputs` are carried out by `{RUNNER}`, the runtime, \
             which is not next to `rlc` (looked for `{}`); install both `rlc` and `{RUNNER}` \
             from the same `cargo build --release --features runtime` (target/release/) into \
             one directory",
            runner.display()
        ));
    }
    let mut command = std::process::Command::new(&runner);
    command.args(std::env::args_os().skip(1));
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let err = command.exec();
        Err(format!("cannot start `{}`: {err}", runner.display()))
    }
    #[cfg(not(unix))]
    {
        let status = command
            .status()
            .map_err(|e| format!("cannot start `{}`: {e}", runner.display()))?;
        Ok(ExitCode::from(status.code().map_or(1, |c| c as u8)))
    }
}

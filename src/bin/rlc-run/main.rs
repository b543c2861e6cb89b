//! `rlc-run`: the `rlc` command line linked with the libtorch runtime. `rlc run …` and
//! `rlc kernel --inputs …` replace the `rlc` process with this one (src/main.rs), found next to
//! `rlc`; every command works here too, but only these two need it. Keeping libtorch out of `rlc`
//! is what keeps `check`, `fmt`, `build`, `lsp` … instant: loading libtorch alone takes about
//! a quarter of a second (docs/benchmarks.md, "Start-up").

#[path = "../../cli/mod.rs"]
mod cli;
mod kernel;
mod memory;
mod run;

use clap::Parser;
use std::process::ExitCode;

/// Both commands in this process.
const IN_PROCESS: cli::Runtime = cli::Runtime {
    run: run::run,
    evaluate: kernel::evaluate,
};

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args, &IN_PROCESS) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

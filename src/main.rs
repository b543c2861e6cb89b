//! `rlc`: the command-line front of the rl compiler. The compiler crates are pure; this binary
//! reads files, calls them, renders diagnostics and sets the exit code
//! (0 clean, 1 errors found, 2 usage or I/O error).

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

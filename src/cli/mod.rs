//! Command-line interface: argument parsing and one module per command.

mod check;
mod explain;
mod fmt;
mod output;
mod sources;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

pub use output::{ColorChoice, MessageFormat};

/// A typed language and compiler for RLHF / RL-for-LLM training jobs.
///
/// Describe model roles, dataflow and parallel placement in `.rl` files; `rlc` checks them
/// (shapes, roles, placement and batch arithmetic, memory) before anything runs.
///
/// Exit status: 0 when clean, 1 when errors were found, 2 on a usage or I/O error.
#[derive(Debug, Parser)]
#[command(name = "rlc", version, about, long_about, max_term_width = 100)]
#[command(
    after_help = "Examples:\n  rlc check examples/grpo_digits.rl\n  rlc check --format json examples/\n  rlc fmt --check .\n  rlc explain E0103"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check .rl files (or every .rl file under a directory) and report all diagnostics.
    #[command(
        after_help = "Examples:\n  rlc check pipeline.rl\n  rlc check --format sarif . > rlc.sarif"
    )]
    Check {
        /// Files or directories to check.
        #[arg(required = true, value_name = "FILE|DIR")]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Format .rl files in the one canonical style (comments are kept).
    #[command(
        after_help = "Examples:\n  rlc fmt pipeline.rl\n  rlc fmt --check examples/\n  rlc fmt - < in.rl > out.rl"
    )]
    Fmt {
        /// Report files that are not formatted (exit 1) instead of rewriting them.
        #[arg(long)]
        check: bool,
        /// Files or directories to format; `-` reads standard input and writes standard output.
        #[arg(required = true, value_name = "FILE|DIR|-")]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Explain a diagnostic code: what it means, why, a wrong and a fixed example.
    #[command(after_help = "Examples:\n  rlc explain E0103\n  rlc explain --list")]
    Explain {
        /// The code, e.g. E0103.
        #[arg(required_unless_present = "list")]
        code: Option<String>,
        /// List every code with its title.
        #[arg(long)]
        list: bool,
    },
}

/// How diagnostics are printed.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// `human` (default, for terminals), `json` (one object per line) or `sarif` (SARIF 2.1.0, for CI).
    #[arg(long, value_enum, default_value_t = MessageFormat::Human)]
    pub format: MessageFormat,
    /// Colour in human output; `auto` uses colour on a terminal unless NO_COLOR is set.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// Runs one command. `Err` is a usage or I/O error (exit 2).
pub fn run(cli: Cli) -> Result<ExitCode, String> {
    match cli.command {
        Command::Check { paths, output } => check::run(&paths, &output),
        Command::Fmt {
            check,
            paths,
            output,
        } => fmt::run(&paths, check, &output),
        Command::Explain { code, list } => explain::run(code.as_deref(), list),
    }
}

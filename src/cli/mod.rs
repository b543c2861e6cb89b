//! Command-line interface: argument parsing and one module per command.

// `build`, `graph`, `output`, `kernel` and `run` are also what `rlc-run`'s own code (the commands
// that need libtorch, src/bin/rlc-run/) builds on.
pub(crate) mod build;
mod check;
mod doc;
mod explain;
mod fmt;
pub(crate) mod graph;
pub(crate) mod kernel;
mod lsp;
mod new;
pub(crate) mod output;
mod plan;
pub(crate) mod run;
mod signature;
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
    /// Check a program and lower it to a plan: the resource-placed execution graph the runtime runs.
    #[command(
        after_help = "Examples:\n  rlc build pipeline.rl\n  rlc build examples/ppo_70b_split.rl -o ppo.plan.json\n  rlc build pipeline.rl -o - | jq .ops"
    )]
    Build {
        /// The program to build.
        #[arg(value_name = "FILE")]
        path: PathBuf,
        /// Where to write the plan (written atomically); `-` is standard output.
        /// Default: next to the source, `pipeline.rl` → `pipeline.plan.json`.
        #[arg(short = 'o', long = "output", value_name = "PLAN")]
        out: Option<PathBuf>,
        /// Every `logprobs` op runs its forward pass: none is marked to take the log-probs the
        /// sampler recorded (`from_sampling`).
        #[arg(long)]
        forward_logprobs: bool,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Draw a program's plan (or a plan file): device pools as clusters, role phases as nodes,
    /// transfers as labelled edges.
    #[command(
        after_help = "Examples:\n  rlc graph pipeline.rl > plan.dot\n  rlc graph pipeline.rl --format svg -o plan.svg\n  rlc graph pipeline.plan.json --format mermaid"
    )]
    Graph {
        /// A program (`.rl`) or a plan file (`.json`, validated when read).
        #[arg(value_name = "FILE")]
        path: PathBuf,
        /// `dot` (Graphviz source), `svg` (needs Graphviz's `dot`), `mermaid`.
        #[arg(long, value_enum, default_value_t = graph::GraphFormat::Dot)]
        format: graph::GraphFormat,
        /// Where to write the picture; default standard output.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        out: Option<PathBuf>,
        /// How diagnostics of the program are printed: `human`, `json` or `sarif`.
        #[arg(long, value_enum, default_value_t = MessageFormat::Human)]
        message_format: MessageFormat,
        /// Colour in human output; `auto` uses colour on a terminal unless NO_COLOR is set.
        #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
        color: ColorChoice,
    },
    /// Plan a program: decide its `place … auto` placements, predict the step time, simulate a
    /// step (a timeline per device) and fit the cost model to a measured run.
    #[command(
        after_help = "Examples:\n  rlc plan examples/ppo_70b_split.rl --simulate --steps 1000\n  rlc plan pipeline.rl --calibrate runs/x/metrics.jsonl --save-cost cost.json\n  rlc plan other.rl --cost cost.json --simulate"
    )]
    Plan(plan::PlanArgs),
    /// Check a program, lower it and run its plan: the ranks of a CPU cluster as threads of
    /// this process. Writes metrics, a reward/KL curve, a summary and checkpoints to a run folder.
    #[command(
        after_help = "Examples:\n  rlc run examples/grpo_digits.rl\n  rlc run pipeline.rl --seed 3 --out runs/try3\n  rlc run pipeline.rl --resume"
    )]
    Run(run::RunArgs),
    /// Evaluate one `fn` of a program on named tensors (a safetensors file), e.g. to test a
    /// reward or loss function; inputs that do not fit the signature are diagnostics.
    #[command(
        after_help = "Examples:\n  rlc kernel rewards.rl --fn exact --inputs batch.safetensors\n  rlc kernel loss.rl --fn my_loss --inputs in.safetensors --out out.safetensors"
    )]
    Kernel(kernel::KernelArgs),
    /// Document a program's modules (or the standard library) from their `///` comments,
    /// signatures and checked types: static HTML with cross-links and search, or Markdown.
    #[command(
        after_help = "Examples:\n  rlc doc examples/ --out target/rldoc\n  rlc doc --std --format markdown --out docs/std\n  rlc doc lib/ --private"
    )]
    Doc(doc::DocArgs),
    /// Create a package: a folder with its `rl.toml`, a working example (a small GRPO job, or
    /// with --lib a module with a `pub fn` and a job using it) and a README on checking it.
    #[command(after_help = "Examples:\n  rlc new digits_job\n  rlc new recipes --lib")]
    New {
        /// The folder to create (new or empty); its name is the package's (`-` read as `_`).
        #[arg(value_name = "NAME")]
        path: PathBuf,
        /// A library: a module with a `pub fn`, and a job that uses it under examples/.
        #[arg(long)]
        lib: bool,
    },
    /// Run the language server on standard input and output (for editors).
    #[command(after_help = "Editors start it themselves; see editors/README.md.")]
    Lsp,
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

/// How a binary carries out the two commands that evaluate on libtorch: `rlc` (which does not
/// link libtorch, so that every other command starts in milliseconds) hands them to `rlc-run`,
/// and `rlc-run` runs them in its own process.
pub struct Runtime {
    /// `rlc run`.
    pub run: fn(&run::RunArgs) -> Result<ExitCode, String>,
    /// `rlc kernel --inputs` (`--emit` needs no libtorch and stays in `rlc`).
    pub evaluate: fn(&kernel::KernelArgs) -> Result<ExitCode, String>,
}

/// Runs one command. `Err` is a usage or I/O error (exit 2).
pub fn run(cli: Cli, runtime: &Runtime) -> Result<ExitCode, String> {
    match cli.command {
        Command::Check { paths, output } => check::run(&paths, &output),
        Command::Fmt {
            check,
            paths,
            output,
        } => fmt::run(&paths, check, &output),
        Command::Build {
            path,
            out,
            forward_logprobs,
            output,
        } => build::run(&path, out.as_deref(), forward_logprobs, &output),
        Command::Graph {
            path,
            format,
            out,
            message_format,
            color,
        } => graph::run(
            &path,
            format,
            out.as_deref(),
            &OutputArgs {
                format: message_format,
                color,
            },
        ),
        Command::Explain { code, list } => explain::run(code.as_deref(), list),
        Command::Plan(args) => plan::run(&args),
        Command::Run(args) => (runtime.run)(&args),
        Command::Kernel(args) => match args.emit {
            Some(emit) => kernel::emit_kernel(&args, emit),
            None => (runtime.evaluate)(&args),
        },
        Command::Doc(args) => doc::run(&args),
        Command::New { path, lib } => new::run(&path, lib),
        Command::Lsp => lsp::run(),
    }
}

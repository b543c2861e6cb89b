//! `rlc run`: check and lower a program, then execute its plan on this machine's CPU ranks
//! (threads of this process), writing metrics, curves, a summary and checkpoints into a run
//! folder.

use super::OutputArgs;
#[cfg(feature = "runtime")]
use super::build;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The program to run (`.rl`), or a plan file built by `rlc build` (`.json`).
    #[arg(value_name = "FILE")]
    pub path: PathBuf,
    /// The run folder (metrics.jsonl, curves.png, summary.txt, checkpoints/).
    /// Default: `runs/<program name>`.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seeds prompt sampling and generation; the same seed gives the same metrics.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Continue from the newest checkpoint in the run folder (bit-exactly); without it a run
    /// replaces the folder's previous run.
    #[arg(long)]
    pub resume: bool,
    /// Stop after this many loop iterations in all (resume later with `--resume`).
    #[arg(long, value_name = "N")]
    pub stop_after: Option<u64>,
    /// CPU threads libtorch may use in all (default: every core), shared by the ranks; from 1
    /// to 4 per CPU of the machine.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Where the ranks' models and tensors live: `auto` (CUDA for a GPU cluster, else the
    /// CPU), `cpu`, or `cuda` (the visible CUDA devices, shared round-robin; the CPU with a
    /// note when CUDA is not available).
    #[arg(long, value_name = "DEVICE", default_value = "auto",
          value_parser = ["auto", "cpu", "cuda"])]
    pub device: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl RunArgs {
    #[cfg_attr(not(feature = "runtime"), allow(dead_code))]
    fn run_dir(&self) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            let stem = self
                .path
                .file_stem()
                .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned());
            Path::new("runs").join(stem)
        })
    }
}

#[cfg(feature = "runtime")]
pub fn run(args: &RunArgs) -> Result<ExitCode, String> {
    use rlc_runtime::exec::{self, RunOptions};
    use std::io::IsTerminal;

    let compiled = if args.path.extension().is_some_and(|e| e == "json") {
        from_plan_file(&args.path, &args.output)?
    } else {
        build::compile_checked(&args.path, &args.output)?
    };
    let (plan, checked) = match compiled {
        Ok(compiled) => compiled,
        Err(code) => return Ok(code),
    };
    let run_dir = args.run_dir();
    // Started by `mpirun` / `srun`: this process is one rank of the job, and the first one
    // speaks for it (the others print only their own errors).
    let processes = rlc_runtime::collectives::init_processes()?;
    let leader = processes.is_none_or(|p| p.rank == 0);
    // Only the leader clears the folder; the others cannot write to it before the leader
    // reaches the communicators' (collective) set-up, after it has cleared and opened the report.
    if !args.resume && leader {
        clear_previous_run(&run_dir)?;
    }
    // Relative dataset and model paths start at the root file's folder.
    let root = plan
        .sources
        .as_ref()
        .filter(|_| args.path.extension().is_some_and(|e| e == "json"))
        .map_or_else(|| args.path.clone(), |s| PathBuf::from(&s.root));
    let source_dir = match root.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let options = RunOptions {
        run_dir: run_dir.clone(),
        source_dir,
        seed: args.seed,
        resume: args.resume,
        progress: std::io::stderr().is_terminal(),
        stop_after: args.stop_after,
        threads: args.threads,
        device: args.device.parse()?,
    };
    if leader {
        eprintln!(
            "running `{}` ({} steps, {} ranks{}) into {}",
            plan.pipeline,
            plan.steps.map_or_else(|| "?".into(), |s| s.to_string()),
            plan.world_size,
            if processes.is_some() {
                " as processes"
            } else {
                ""
            },
            run_dir.display()
        );
    }
    match exec::run(&plan, &checked.modules, &options) {
        Ok(_) if !leader => Ok(ExitCode::SUCCESS),
        Ok(outcome) => {
            if let Some(step) = outcome.resumed_from {
                eprintln!("resumed after step {step}");
            }
            println!("{}", outcome.summary);
            println!(
                "run folder: {} (metrics.jsonl, curves.png, summary.txt, checkpoints/)",
                run_dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => match processes {
            Some(p) => {
                eprintln!(
                    "error: the run stopped in the process of rank {}: {e}",
                    p.rank
                );
                // The other ranks may be waiting in a collective for this one: end them all.
                rlc_runtime::collectives::abort_job(1)
            }
            None => {
                eprintln!("error: the run stopped: {e}");
                Ok(ExitCode::from(1))
            }
        },
    }
}

/// A plan file and the program it carries (checked again: the runtime evaluates its `fn`s).
#[cfg(feature = "runtime")]
fn from_plan_file(
    path: &Path,
    output: &OutputArgs,
) -> Result<Result<(rlc_plan::Plan, rlc_check::Checked), ExitCode>, String> {
    let plan = match super::graph::load(path)? {
        Ok(plan) => plan,
        Err(code) => return Ok(Err(code)),
    };
    let Some(sources) = plan.sources.clone() else {
        return Err(format!(
            "`{}` carries no sources to run; build it with `rlc build`",
            path.display()
        ));
    };
    let root_text = sources.files.get(&sources.root).cloned().ok_or_else(|| {
        format!(
            "`{}` names `{}` as its root but does not carry it",
            path.display(),
            sources.root
        )
    })?;
    let mut files = rlc_diagnostics::Files::new();
    let checked = rlc_check::check(&Embedded(&sources), &mut files, &sources.root, root_text);
    if checked.has_errors() {
        let mut diagnostics = checked.diagnostics.clone();
        return Ok(Err(super::output::emit(&mut diagnostics, &files, output)));
    }
    Ok(Ok((plan, checked)))
}

/// Serves a plan's embedded files to the checker.
#[cfg(feature = "runtime")]
struct Embedded<'a>(&'a rlc_plan::model::Sources);

#[cfg(feature = "runtime")]
impl rlc_check::SourceLoader for Embedded<'_> {
    fn read(&self, path: &str) -> Result<String, String> {
        self.0
            .files
            .get(path)
            .cloned()
            .ok_or_else(|| format!("{path}: not carried by the plan"))
    }
}

/// A fresh run replaces what an earlier run left in its folder (and nothing else there).
#[cfg(feature = "runtime")]
fn clear_previous_run(dir: &Path) -> Result<(), String> {
    for name in ["metrics.jsonl", "curves.png", "summary.txt"] {
        let file = dir.join(name);
        if file.exists() {
            std::fs::remove_file(&file)
                .map_err(|e| format!("cannot replace `{}`: {e}", file.display()))?;
        }
    }
    let checkpoints = dir.join("checkpoints");
    if checkpoints.exists() {
        std::fs::remove_dir_all(&checkpoints)
            .map_err(|e| format!("cannot replace `{}`: {e}", checkpoints.display()))?;
    }
    Ok(())
}

/// What `run` and `kernel` say in a build without libtorch.
#[cfg(not(feature = "runtime"))]
pub const WITHOUT_RUNTIME: &str = "this `rlc` was built without the runtime; build it with \
     `cargo build --release --features runtime` (scripts/main-job.sh does, installing libtorch \
     when missing)";

#[cfg(not(feature = "runtime"))]
pub fn run(_args: &RunArgs) -> Result<ExitCode, String> {
    Err(WITHOUT_RUNTIME.into())
}

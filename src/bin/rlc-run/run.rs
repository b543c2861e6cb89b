//! `rlc run`: check and lower a program, then execute its plan on this machine's CPU ranks
//! (threads of this process, or one process per rank under `mpirun` / `srun`), writing metrics,
//! curves, a summary and checkpoints into a run folder.

use crate::cli::run::RunArgs;
use crate::cli::{build, graph};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The run folder: `--out`, or `runs/<program name>`.
fn run_dir(args: &RunArgs) -> PathBuf {
    args.out.clone().unwrap_or_else(|| {
        let stem = args
            .path
            .file_stem()
            .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned());
        Path::new("runs").join(stem)
    })
}

pub fn run(args: &RunArgs) -> Result<ExitCode, String> {
    use rlc_runtime::exec::{self, RunOptions};
    use std::io::IsTerminal;

    // A plan file carries everything the run needs (its kernels and losses as kernel IR), so
    // its sources need not exist any more.
    let compiled = if args.path.extension().is_some_and(|e| e == "json") {
        graph::load(&args.path)?
    } else {
        build::compile_checked(&args.path, &args.output)?.map(|(plan, _)| plan)
    };
    let mut plan = match compiled {
        Ok(compiled) => compiled,
        Err(code) => return Ok(code),
    };
    if args.forward_logprobs {
        rlc_plan::lower::forward_logprobs(&mut plan);
    }
    let run_dir = run_dir(args);
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
        trace: args.trace,
        verify_in_place: false,
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
    match exec::run(&plan, &options) {
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

/// A fresh run replaces what an earlier run left in its folder (and nothing else there).
fn clear_previous_run(dir: &Path) -> Result<(), String> {
    for name in ["metrics.jsonl", "curves.png", "summary.txt"] {
        let file = dir.join(name);
        if file.exists() {
            std::fs::remove_file(&file)
                .map_err(|e| format!("cannot replace `{}`: {e}", file.display()))?;
        }
    }
    // The traces of a previous run (`trace.json`, or `trace.rank-N.json` per process).
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("trace.") && name.ends_with(".json") {
                std::fs::remove_file(entry.path())
                    .map_err(|e| format!("cannot replace `{}`: {e}", entry.path().display()))?;
            }
        }
    }
    let checkpoints = dir.join("checkpoints");
    if checkpoints.exists() {
        std::fs::remove_dir_all(&checkpoints)
            .map_err(|e| format!("cannot replace `{}`: {e}", checkpoints.display()))?;
    }
    Ok(())
}

//! `rlc run`'s arguments. The command itself evaluates on libtorch, so `rlc-run` carries it
//! out (src/bin/rlc-run/run.rs): `rlc` hands it over (src/main.rs).

use super::OutputArgs;
use std::path::PathBuf;

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
    /// Also write `trace.json` into the run folder: each op every rank ran, with its start and
    /// duration on one clock (open it in https://ui.perfetto.dev or chrome://tracing); under
    /// `mpirun`/`srun` one `trace.rank-N.json` per process.
    #[arg(long)]
    pub trace: bool,
    /// Every `logprobs` op runs its forward pass: none takes the log-probs the sampler
    /// recorded (the plan's `from_sampling` marks are cleared, for comparing the two).
    #[arg(long)]
    pub forward_logprobs: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

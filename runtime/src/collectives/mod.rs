//! Collectives between ranks: threads of one process (the default), or processes connected by
//! MPI (`mpirun`, `srun`; cargo feature `mpi`).
//!
//! A transport only exchanges private copies of tensors: in-process, a rendezvous where each rank
//! deposits its input and the last to arrive publishes all deposits; between processes, MPI
//! all-gathers and all-to-alls of the encoded tensors. Each rank computes its own result from
//! what it received with the same code for both, and reductions always fold in rank order, so
//! results are bit-identical from run to run, across ranks, and between threads and processes.
//!
//! Point-to-point messages (`send`, `recv`) are buffered: a send never waits for its receiver.
//!
//! Between processes, a group whose ranks each hold their tensors on a GPU of their own may run
//! its collectives of CUDA tensors through NCCL instead, on the tensors' memory
//! ([`Communicator::use_nccl`], `nccl.rs`).

mod communicator;
#[cfg(feature = "mpi")]
mod nccl;
#[cfg(feature = "mpi")]
pub mod processes;
mod threads;
pub mod wire;

pub use communicator::{Communicator, Group};
/// How many collectives this process has run through NCCL (CUDA tensors between processes).
#[cfg(feature = "mpi")]
pub use nccl::launches as nccl_launches;

use tch::Tensor;

/// This process's place among a job's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessWorld {
    /// Rank of this process in the job.
    pub rank: usize,
    pub size: usize,
    /// Rank among the job's processes on this machine, and how many run here.
    pub local_rank: usize,
    pub local_size: usize,
    /// How many of the processes here (this one included) may run on this one's CPUs: all of
    /// them unless the launcher bound each to CPUs of its own. They share those CPUs' threads.
    pub cpu_sharers: usize,
}

/// Environment variables by which MPI launchers tell a process its rank: Open MPI's `mpirun`,
/// PMI (MPICH's Hydra, Slurm's `srun --mpi=pmi2`) and PMIx (`srun --mpi=pmix`, Open MPI 5).
const LAUNCHER_VARIABLES: [&str; 4] = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"];

/// Why this process cannot run as one of several that Slurm started without MPI's process
/// management (`srun` without `--mpi=pmix` where the cluster's default is none): each would run
/// the whole job, into the same run folder. `None` when Slurm did not start it as such.
fn slurm_without_pmi(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let tasks: usize = env("SLURM_STEP_NUM_TASKS")?.parse().ok()?;
    env("SLURM_PROCID")?;
    let pmi = LAUNCHER_VARIABLES.iter().any(|v| env(v).is_some());
    (tasks > 1 && !pmi).then(|| {
        format!(
            "Slurm started {tasks} tasks without MPI's process management, so each would run \
             the whole job: launch with `srun --mpi=pmix …` (or set `MpiDefault=pmix`)"
        )
    })
}

/// Whether an MPI launcher started this process as one rank of a job.
pub fn launched_by_mpi() -> bool {
    LAUNCHER_VARIABLES
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// Connects this process to the others of its job when an MPI launcher started it (once; later
/// calls give the first answer); `None` when it runs alone (ranks are then threads).
pub fn init_processes() -> Result<Option<ProcessWorld>, String> {
    if !launched_by_mpi() {
        return match slurm_without_pmi(|v| std::env::var(v).ok()) {
            Some(why) => Err(why),
            None => Ok(None),
        };
    }
    #[cfg(feature = "mpi")]
    {
        processes::init().map(Some)
    }
    #[cfg(not(feature = "mpi"))]
    {
        Err(
            "this process was started by an MPI launcher, but this build has no MPI support \
             (build with the cargo feature `mpi`, e.g. `cargo build --features rlc/mpi`)"
                .into(),
        )
    }
}

/// The job's processes once [`init_processes`] connected them.
pub fn process_world() -> Option<ProcessWorld> {
    #[cfg(feature = "mpi")]
    {
        processes::world()
    }
    #[cfg(not(feature = "mpi"))]
    {
        None
    }
}

/// Ends every process of the job (after this one reported why); exits when ranks are threads.
pub fn abort_job(code: i32) -> ! {
    #[cfg(feature = "mpi")]
    if process_world().is_some() {
        processes::abort(code);
    }
    std::process::exit(code)
}

/// Communicators for a partition of global ranks into `groups` (each in group order): with
/// ranks as threads, one for every rank of every group; with ranks as processes, this process's
/// own (if a group holds it). Every process of a job makes the same calls in the same order.
pub fn split(groups: &[Vec<u32>]) -> Result<Vec<(u32, Communicator)>, CollectiveError> {
    #[cfg(feature = "mpi")]
    if let Some(world) = process_world() {
        let ranks = groups
            .iter()
            .flatten()
            .copied()
            .max()
            .map_or(0, |r| r as usize + 1);
        if ranks > world.size {
            return Err(CollectiveError::Transport(format!(
                "the groups span {ranks} ranks, the job has {} processes",
                world.size
            )));
        }
        return Ok(processes::split(groups)
            .map_err(CollectiveError::Transport)?
            .map(|(comm, at, len)| (world.rank as u32, Communicator::processes(comm, at, len)))
            .into_iter()
            .collect());
    }
    Ok(groups
        .iter()
        .flat_map(|group| group.iter().copied().zip(Group::new(group.len())))
        .collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    /// Sum divided by the world size.
    Mean,
    Max,
    Min,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectiveError {
    #[error("a rank of the group exited (or panicked) before joining the collective")]
    PeerLost,
    #[error("cannot send {0} between ranks")]
    Unsupported(String),
    #[error("MPI: {0}")]
    Transport(String),
    #[error("NCCL: {0}")]
    Nccl(String),
    #[error("rank {rank} contributed shape {found:?}, rank 0 contributed {expected:?}")]
    ShapeMismatch {
        rank: usize,
        expected: Vec<i64>,
        found: Vec<i64>,
    },
    #[error("rank {rank} cannot exchange messages with rank {peer} of a group of {world_size}")]
    InvalidPeer {
        peer: usize,
        rank: usize,
        world_size: usize,
    },
    #[error("root rank {root} is outside a group of {world_size}")]
    InvalidRoot { root: usize, world_size: usize },
    #[error(
        "the root rank {root} must provide {expected} tensor(s) for this collective, it gave {found}"
    )]
    MissingRootInput {
        root: usize,
        expected: usize,
        found: usize,
    },
    #[error(
        "reduce_scatter needs a first dimension divisible by the world size {world_size}, got {size}"
    )]
    NotDivisible { size: i64, world_size: usize },
}

/// Folds `inputs` in order with `op`; the single definition both the collectives and their tests use.
pub fn reduce_in_order(inputs: &[Tensor], op: ReduceOp) -> Tensor {
    let mut acc = inputs[0].copy();
    for next in &inputs[1..] {
        acc = match op {
            ReduceOp::Sum | ReduceOp::Mean => acc + next,
            ReduceOp::Max => acc.maximum(next),
            ReduceOp::Min => acc.minimum(next),
        };
    }
    if op == ReduceOp::Mean {
        acc /= inputs.len() as f64;
    }
    acc
}

#[cfg(test)]
mod tests;

//! Executing a plan: one interpreter per rank runs the rank's program once per loop
//! iteration. The embedded default runs the ranks of a CPU cluster as threads of this process,
//! with in-process collectives; rank 0 reports each step's metrics.
//!
//! What runs: data-parallel (`dp`) and tensor-parallel (`tp`, `dp × tp`) layouts of every role,
//! sharded (`fsdp`, `dp × fsdp`) and pipelined (`pp`, `dp × pp`) layouts of LM-head roles,
//! colocated instances of a role with one layout sharing one model per rank, a role placed in
//! two layouts holding one model per layout (the weight sync after its update re-shards the
//! trained weights into the other layout's model, `parallel::reshard`), sampling from std's
//! tasks and JSONL files, generation, log-probs / values / scores, kernels (the reference
//! evaluator), `update` with its loss closure, `log` and `checkpoint`. Each rank's
//! communicators for every instance it belongs to (`parallel::process_groups`) are built before
//! its thread starts its interpreter; the models borrow them. Values read by a layout whose data
//! ranks hold other rows move with the plan's `transfer` sends. Sequence layouts, `fsdp` with
//! `tp`, and `pp` with `tp` or `fsdp` are refused with [`RunError::Unsupported`].
//!
//! Devices: ranks of a GPU cluster (or of any cluster with `--device cuda`) hold their models
//! and tensors on the CUDA devices libtorch sees, round-robin; without CUDA they run on the
//! CPU after saying why ([`crate::device`]). Between processes, their groups' collectives of
//! CUDA tensors go through NCCL where every rank of the group can use it (one note on stderr,
//! and host memory, where not).

mod ckpt;
mod environment;
mod error;
mod job;
mod kernel;
mod lagged;
mod lines;
mod partial;
mod rank;
mod roles;
mod rollout;
pub mod settings;
mod supervised;
mod transfer;
mod update;
mod values;
mod verify;

pub use error::RunError;
pub use verify::failures_key;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rlc_plan::Plan;
use rlc_plan::model::{OpKind, Precision};

use crate::collectives::{ProcessWorld, split};
use crate::device::{DeviceRequest, rank_device, wants_cuda};
use crate::panics::panic_message;
use crate::report::trace::{self, Span};
use crate::report::{Report, ReportOptions};
use error::Result;
use job::Job;
use rank::{Comms, Rank};

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Metrics, curves, summary and checkpoints go here.
    pub run_dir: PathBuf,
    /// The root source file's folder: relative dataset and model paths start here.
    pub source_dir: PathBuf,
    /// Seeds prompt sampling and generation (model init has its own seeds in the program).
    pub seed: u64,
    /// Continue from the newest checkpoint in `run_dir`.
    pub resume: bool,
    /// Draw a progress line on stderr.
    pub progress: bool,
    /// Stop after this many loop iterations in all (the run can be resumed later).
    pub stop_after: Option<u64>,
    /// Threads libtorch may use in all; split between the ranks.
    pub threads: Option<usize>,
    /// Where the ranks' models and tensors live.
    pub device: DeviceRequest,
    /// Write `trace.json`: every op each rank ran, with its start and end.
    pub trace: bool,
    /// Score each `verify` op before the rank runs on, instead of on a background thread
    /// while the ops that do not read its results run (`docs/verifiers.md#overlap`).
    pub verify_in_place: bool,
}

#[derive(Debug)]
pub struct RunOutcome {
    /// Loop iterations completed in all (including those before a resume).
    pub steps_done: u64,
    pub resumed_from: Option<u64>,
    /// The table of `summary.txt`.
    pub summary: String,
}

/// Runs `plan` to the end of its loop, or to `stop_after`. The plan is all it needs: its
/// kernels and loss closures travel in it as kernel IR.
pub fn run(plan: &Plan, options: &RunOptions) -> Result<RunOutcome> {
    supported(plan)?;
    if let Some(threads) = options.threads {
        check_threads(threads, machine_cpus())?;
    }
    let job = Job::new(plan, &options.source_dir)?;
    let world = plan.world_size;
    let processes = launched_processes(world)?;
    if processes.is_some() {
        logs_on_rank_zero(plan)?;
    }
    // The ranks this process runs, each on a thread of its own.
    let local_ranks: Vec<u32> = match processes {
        Some(p) => vec![p.rank as u32],
        None => (0..world).collect(),
    };
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    tch::set_num_threads(torch_threads(options.threads, available, processes, world) as i32);
    let devices = rank_devices(plan, options.device, processes);
    let resume = if options.resume {
        // The process of rank 0 clears what killed writes left, before any rank starts.
        resume_point(
            plan,
            &options.run_dir,
            options.seed,
            local_ranks.contains(&0),
        )?
    } else {
        None
    };
    let start = resume.as_ref().map_or(0, |(step, _)| *step);
    let end = options
        .stop_after
        .map_or(job.steps, |s| s.min(job.steps))
        .max(start);
    // Rank 0 reports; between processes, the others leave the run folder's report alone.
    let mut report = if local_ranks.contains(&0) {
        Some(
            Report::create(
                &options.run_dir,
                ReportOptions {
                    total_steps: job.steps,
                    progress: options.progress,
                    title: plan.pipeline.clone(),
                },
                resume.as_ref().map(|(step, _)| *step),
            )
            .map_err(|source| RunError::Io {
                what: format!("cannot write the run folder {}", options.run_dir.display()),
                source,
            })?,
        )
    } else {
        None
    };
    let mut comms = communicators(plan)?;
    // Between processes, collectives of CUDA tensors go through NCCL where every rank of a group
    // can use it. Every process takes part where the run asks for CUDA, on a GPU or not.
    let gpu_cluster = plan.clusters.iter().any(|c| !c.is_cpu);
    if processes.is_some() && wants_cuda(options.device, gpu_cluster) {
        use_nccl(&mut comms, &devices)?;
    }
    // The process of rank 0 writes each step's metrics line, from every local rank's part
    // (`lines`), before that step's checkpoints: a checkpoint of step S implies the lines of
    // every step before S, which a resumed run keeps.
    let written = lines::Written::starting_at(start);
    let (parts, received) = std::sync::mpsc::channel::<Option<lines::Part>>();
    let origin = Instant::now();
    let (results, writer): (Vec<Result<Vec<Span>>>, Result<()>) = std::thread::scope(|scope| {
        let written = &written;
        let writer = report.as_mut().map(|report| {
            let ranks = local_ranks.len();
            scope.spawn(move || -> Result<()> {
                let mut gather = lines::Gather::new(ranks);
                // `None`: a rank failed, and the steps it did not finish never complete.
                let result = received.iter().map_while(|part| part).try_for_each(|part| {
                    let Some(line) = gather.add(part) else {
                        return Ok(());
                    };
                    report.record(&line).map_err(|source| RunError::Io {
                        what: "cannot write metrics.jsonl".into(),
                        source,
                    })?;
                    written.set(line.step + 1);
                    Ok(())
                });
                // Whatever happened, no rank waits for a line any more.
                written.set(u64::MAX);
                result
            })
        });
        let reporting = writer.is_some();
        let handles: Vec<_> = local_ranks
            .iter()
            .map(|&rank| {
                let comms = comms.remove(&rank).unwrap_or_default();
                let parts = parts.clone();
                let job = &job;
                let resume = &resume;
                let device = devices[rank as usize];
                scope.spawn(move || -> Result<Vec<Span>> {
                    // The rank's communicators outlive its models, which borrow them.
                    let comms = comms;
                    let ends_early = lines::EndsEarly::new(&parts);
                    let mut r = Rank::new(
                        job,
                        rank,
                        device,
                        &comms,
                        options.seed,
                        &options.source_dir,
                        &options.run_dir,
                    )?;
                    r.trace = options.trace.then(|| (origin, Vec::new()));
                    r.end = end;
                    r.verify_in_place = options.verify_in_place;
                    if let Some((step, dirs)) = resume {
                        for (role, dir) in dirs {
                            if r.roles.contains_key(role) && r.restore(role, dir)? != *step {
                                return Err(RunError::Plan(format!(
                                    "{} is not the checkpoint of step {step}",
                                    dir.display()
                                )));
                            }
                        }
                        if !r.carried_restored && r.carried_names().next().is_some() {
                            return Err(RunError::Plan(format!(
                                "rank {rank} holds values the loop carries but no checkpoint it \
                                 loads saved them: the run cannot resume where it stopped"
                            )));
                        }
                        r.resume_lagged(*step, dirs)?;
                    } else {
                        r.start_lagged()?;
                    }
                    for step in start..end {
                        let started = Instant::now();
                        let out = r.step(step)?;
                        if reporting {
                            let seconds = started.elapsed().as_secs_f64();
                            // The writer gone (it failed) is reported when it is joined.
                            let _ = parts.send(Some(lines::Part {
                                rank,
                                step,
                                out,
                                seconds,
                            }));
                            if r.has_pending_checkpoints() {
                                written.wait_for(step);
                            }
                        }
                        r.write_checkpoints(step)?;
                    }
                    ends_early.disarm();
                    Ok(r.trace.take().map(|(_, spans)| spans).unwrap_or_default())
                })
            })
            .collect();
        // The ranks hold the senders: the writer stops when the last rank ends.
        drop(parts);
        let results = handles
            .into_iter()
            .zip(&local_ranks)
            .map(|(h, &rank)| {
                h.join().unwrap_or_else(|panic| {
                    Err(RunError::RankFailed {
                        rank,
                        message: panic_message(&panic),
                    })
                })
            })
            .collect();
        let writer = writer.map_or(Ok(()), |w| {
            w.join().unwrap_or_else(|panic| {
                Err(RunError::RankFailed {
                    rank: 0,
                    message: panic_message(&panic),
                })
            })
        });
        (results, writer)
    });
    // A failing rank breaks the collectives of the others: report the cause, not the echo.
    let mut errors = Vec::new();
    let mut spans = Vec::new();
    for result in results {
        match result {
            Ok(rank_spans) => spans.extend(rank_spans),
            Err(e) => errors.push(e),
        }
    }
    if let Err(e) = writer {
        errors.push(e);
    }
    if !errors.is_empty() {
        let cause = errors
            .iter()
            .position(|e| !matches!(e, RunError::Collective(_)))
            .unwrap_or(0);
        return Err(errors.swap_remove(cause));
    }
    if options.trace {
        let path = options.run_dir.join(trace::file_name(&local_ranks, world));
        trace::write(&path, &spans).map_err(|source| RunError::Io {
            what: format!("cannot write {}", path.display()),
            source,
        })?;
    }
    let summary = match report {
        Some(mut report) => report.finish().map_err(|source| RunError::Io {
            what: format!("cannot write the report in {}", options.run_dir.display()),
            source,
        })?,
        None => String::new(),
    };
    Ok(RunOutcome {
        steps_done: end,
        resumed_from: resume.map(|(step, _)| step),
        summary,
    })
}

/// The most libtorch threads `--threads` may ask for, per logical CPU of the machine. libtorch's
/// intra-op threads compute and never wait on I/O, so past the CPU count they only contend;
/// a little headroom keeps a script written for a somewhat bigger machine running, while
/// `--threads 100000` (which thrashes) is refused.
const THREADS_PER_CPU: usize = 4;

/// Refuses a `--threads` of 0 or beyond [`THREADS_PER_CPU`] per CPU of a machine of `cpus`.
fn check_threads(threads: usize, cpus: usize) -> Result<()> {
    let most = cpus.max(1) * THREADS_PER_CPU;
    if threads == 0 {
        return Err(RunError::Options(
            "--threads 0: libtorch needs at least one thread (leave --threads out to use every \
             CPU)"
                .into(),
        ));
    }
    if threads > most {
        return Err(RunError::Options(format!(
            "--threads {threads}: this machine has {cpus} CPUs, so at most {most} threads \
             ({THREADS_PER_CPU} per CPU; more only contend for them); leave --threads out to \
             use every CPU"
        )));
    }
    Ok(())
}

/// The machine's online logical CPUs (`--threads` counts them whatever this process is bound
/// to), and at least the CPUs this process may use.
fn machine_cpus() -> usize {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    #[cfg(unix)]
    {
        // SAFETY: `sysconf` only reads a system setting; a negative answer means unknown.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        available.max(usize::try_from(online).unwrap_or(0))
    }
    #[cfg(not(unix))]
    available
}

/// `precision = bf16` runs under every layout: weights, activations and gradients in
/// bfloat16, float32 master weights and moments in the optimizer (an FSDP model's float32
/// shards), log-probabilities and values float32. float16 would need loss scaling.
fn lower_precision_supported(role: &rlc_plan::model::Role) -> Result<()> {
    match role.precision {
        Precision::F32 | Precision::Bf16 => Ok(()),
        Precision::F16 => Err(RunError::Unsupported(format!(
            "`{}` is declared with `precision = f16`: float16 training needs loss scaling, which \
             `rlc run` does not do; write `precision = bf16` (the same memory, float32's range)",
            role.name
        ))),
    }
}

/// libtorch's threads for each rank of this process: `--threads` (the machine's, shared by the
/// ranks that run here) or this process's `available` CPUs, shared by the ranks that may run on
/// them — every rank when they are threads of this process, the processes the launcher did not
/// bind to CPUs of their own when they are processes.
fn torch_threads(
    requested: Option<usize>,
    available: usize,
    processes: Option<ProcessWorld>,
    world: u32,
) -> usize {
    let sharers = match (processes, requested) {
        (Some(p), Some(_)) => p.local_size,
        (Some(p), None) => p.cpu_sharers,
        (None, _) => world as usize,
    };
    (requested.unwrap_or(available) / sharers.max(1)).max(1)
}

/// The job's processes when a launcher started this one as a rank (MPI), checked to be one per
/// rank of the plan; `None` when ranks are threads of this process.
fn launched_processes(world: u32) -> Result<Option<ProcessWorld>> {
    let processes = crate::collectives::init_processes().map_err(RunError::Launch)?;
    match processes {
        Some(p) if p.size != world as usize => Err(RunError::Launch(format!(
            "the plan has {world} ranks, the launcher started {} processes: start one process \
             per rank (`mpirun -np {world} rlc run …`, `srun --ntasks {world} …`)",
            p.size
        ))),
        other => Ok(other),
    }
}

/// Each rank's device (ranks as processes count devices from their machine's first). Where
/// CUDA was asked for (`--device cuda`, or a GPU cluster) but is not there, says why on
/// stderr and runs on the CPU.
fn rank_devices(
    plan: &Plan,
    request: DeviceRequest,
    processes: Option<ProcessWorld>,
) -> Vec<tch::Device> {
    let gpu_cluster = plan.clusters.iter().any(|c| !c.is_cpu);
    let mut said = false;
    (0..plan.world_size)
        .map(|rank| {
            let index = match processes {
                Some(p) if p.rank == rank as usize => p.local_rank as u32,
                _ => rank,
            };
            rank_device(request, gpu_cluster, index).unwrap_or_else(|why| {
                if !std::mem::replace(&mut said, true) {
                    eprintln!("note: CUDA is not available ({why}); running on the CPU");
                }
                tch::Device::Cpu
            })
        })
        .collect()
}

/// Refuses what this runtime does not execute, before any work.
/// Ranks as processes: rank 0's process writes the metrics lines from its own rank's step, so a
/// `log` op another rank runs (a driver placed off rank 0) would lose its fields; refused
/// rather than run with them dropped (ranks as threads gather every rank's part).
fn logs_on_rank_zero(plan: &Plan) -> Result<()> {
    for op in &plan.ops {
        if let OpKind::Log { .. } = &op.kind
            && let Some(rank) = op.ranks.iter().next().filter(|&r| r != 0)
        {
            return Err(RunError::Unsupported(format!(
                "the `log` op runs on rank {rank}, and with ranks as processes only rank 0's \
                 process writes the metrics lines: run the ranks as threads (without `mpirun`), \
                 or place the phase whose instance runs the pipeline's kernels (its first \
                 `update`'s) on devices that include device 0"
            )));
        }
    }
    Ok(())
}

fn supported(plan: &Plan) -> Result<()> {
    // A lagging weight sync's messages wait in their channel for `lag` steps: the source and the
    // destination must be different ranks (the checker's E0511), and nothing else may travel
    // from the one to the other in the meantime.
    for op in &plan.ops {
        let OpKind::WeightSync { from, to, lag, .. } = &op.kind else {
            continue;
        };
        if *lag == 0 {
            continue;
        }
        let ranks = |id: &str| plan.instance(id).map(|i| i.ranks.clone());
        let (Some(src), Some(dst)) = (ranks(from), ranks(to)) else {
            continue;
        };
        let other_traffic = plan.ops.iter().any(|o| match &o.kind {
            OpKind::Transfer { from: f, to: t, .. } => {
                ranks(f).is_some_and(|r| r.intersects(&src))
                    && ranks(t).is_some_and(|r| r.intersects(&dst))
            }
            _ => false,
        });
        if src.intersects(&dst) || other_traffic {
            return Err(RunError::Unsupported(format!(
                "`{}` runs {lag} step(s) behind on ranks that {}: `rlc run` overlaps generation \
                 with training only between ranks that exchange nothing else",
                op.label,
                if src.intersects(&dst) {
                    "also train"
                } else {
                    "also receive other values from training"
                }
            )));
        }
    }
    for role in &plan.roles {
        lower_precision_supported(role)?;
        // FSDP recomputes each unit in its backward pass; the other layouts keep activations.
        let trained_with_fsdp = plan.ops.iter().any(|op| {
            matches!(&op.kind, OpKind::Update { role: r, .. } if *r == role.name)
                && op
                    .instance
                    .as_deref()
                    .and_then(|id| plan.instances.iter().find(|i| i.id == id))
                    .is_some_and(|i| i.layout.fsdp > 1)
        });
        if role.recompute && !trained_with_fsdp {
            return Err(RunError::Unsupported(format!(
                "`{}` asks for `recompute = true`, which `rlc run` does only for roles trained \
                 with `fsdp`: leave it out, or train the role with `fsdp(n)`",
                role.name
            )));
        }
    }
    for instance in &plan.instances {
        let l = &instance.layout;
        if l.sp > 1 || (l.fsdp > 1 && l.tp > 1) || (l.pp > 1 && (l.tp > 1 || l.fsdp > 1)) {
            return Err(RunError::Unsupported(format!(
                "`{}` is placed with sequence parallelism, FSDP with TP or pipelining with TP or \
                 FSDP (pp {}, sp {}, fsdp {}, tp {}); the CPU runtime executes `dp`, `tp`, \
                 `fsdp`, `pp`, `dp × tp`, `dp × fsdp` and `dp × pp` layouts",
                instance.id, l.pp, l.sp, l.fsdp, l.tp
            )));
        }
    }
    // A multi-turn generate asks its environment on each data rank; the ranks of a TP, FSDP
    // or pipeline group decode together and would each ask.
    for op in &plan.ops {
        if let OpKind::Generate { env: Some(env), .. } = &op.kind
            && let Some(l) = op
                .instance
                .as_deref()
                .and_then(|id| plan.instances.iter().find(|i| i.id == id))
                .map(|i| &i.layout)
            && (l.tp > 1 || l.fsdp > 1 || l.pp > 1)
        {
            return Err(RunError::Unsupported(format!(
                "`{}` plays episodes against environment `{}` in a layout with tp {}, fsdp {}, \
                 pp {}; a multi-turn generate runs on roles placed with `dp` only \
                 (docs/environments.md#layouts)",
                op.label, env.environment, l.tp, l.fsdp, l.pp
            )));
        }
    }
    Ok(())
}

/// Each rank's communicators in every instance it belongs to: the layout's groups along each
/// axis (`parallel::process_groups`), instance rank `i` being the instance's `i`-th device.
fn communicators(plan: &Plan) -> Result<BTreeMap<u32, Comms>> {
    let mut out: BTreeMap<u32, Comms> = BTreeMap::new();
    // A weight sync that re-shards exchanges pieces over a communicator of every rank (rank `r`
    // is global rank `r`).
    // So does a transfer of a value between two layouts' data ranks.
    let moves_values = |op: &rlc_plan::model::Op| matches!(op.kind, OpKind::Transfer { .. });
    if plan
        .ops
        .iter()
        .any(|op| resharding(plan, op) || moves_values(op))
    {
        for (rank, world) in split(&[(0..plan.world_size).collect()])? {
            out.entry(rank).or_default().world = Some(world);
        }
    }
    for instance in &plan.instances {
        let ranks: Vec<u32> = instance.ranks.iter().collect();
        if ranks.len() != instance.layout.devices() as usize {
            return Err(RunError::Plan(format!(
                "`{}` has {} devices, its layout {}",
                instance.id,
                ranks.len(),
                instance.layout.devices()
            )));
        }
        for groups in crate::parallel::process_groups_on(instance.layout, &ranks)? {
            out.entry(ranks[groups.rank])
                .or_default()
                .groups
                .insert(instance.id.clone(), groups);
        }
    }
    Ok(out)
}

/// Gives each communicator of more than one rank its NCCL companion for its rank's device
/// (`Communicator::use_nccl`, a collective of the group), in the same order in every process:
/// the all-ranks communicator, then each instance's (by id) axis by axis.
fn use_nccl(comms: &mut BTreeMap<u32, Comms>, devices: &[tch::Device]) -> Result<()> {
    for (&rank, c) in comms.iter_mut() {
        let axes = c
            .groups
            .values_mut()
            .flat_map(|g| [&mut g.tp, &mut g.pp, &mut g.fsdp, &mut g.dp, &mut g.data]);
        for comm in c.world.iter_mut().chain(axes) {
            if comm.world_size() > 1 {
                comm.use_nccl(devices[rank as usize])?;
            }
        }
    }
    Ok(())
}

/// Whether `op` is a weight sync between two layouts that hold the weights differently (one
/// between the same layout on the same ranks is free: its instances share the model).
pub(crate) fn resharding(plan: &Plan, op: &rlc_plan::model::Op) -> bool {
    match &op.kind {
        OpKind::WeightSync { from, to, .. } => !plan.share_model(from, to),
        _ => false,
    }
}

/// Where a resumed run starts: the steps done, and the checkpoint folder of each checkpointed role.
type ResumePoint = (u64, Vec<(String, PathBuf)>);

/// The newest step every checkpointed role committed (`checkpoint::newest_committed`), saying
/// on stderr each newer step it passes over and why (none to resume from when there are none;
/// refused when there are some but none is usable); with `clean`, first clears (and states)
/// what killed writes left. A checkpoint of a run with another seed is refused: the resumed
/// run would continue neither run.
fn resume_point(
    plan: &Plan,
    run_dir: &Path,
    seed: u64,
    clean: bool,
) -> Result<Option<ResumePoint>> {
    let mut roles: Vec<&str> = plan
        .ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Checkpoint { role, .. } => Some(role.as_str()),
            _ => None,
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    let roles: Vec<String> = roles.into_iter().map(str::to_string).collect();
    let root = ckpt::checkpoints_root(run_dir);
    if clean {
        for done in crate::checkpoint::clean_leftovers(&root, &roles)? {
            eprintln!("note: --resume {done}");
        }
    }
    let (committed, passed) = crate::checkpoint::newest_committed(&root, &roles)?;
    for skipped in &passed {
        eprintln!("note: --resume passes over a newer checkpoint: {skipped}");
    }
    let Some(committed) = committed else {
        if passed.is_empty() {
            return Ok(None);
        }
        // Checkpoints there, none usable: starting over is for the user to choose.
        let list: Vec<String> = passed.iter().map(ToString::to_string).collect();
        return Err(RunError::Resume(format!(
            "no checkpoint in {} is complete and intact ({}); run without --resume to start \
             over",
            root.display(),
            list.join("; ")
        )));
    };
    let saved_seed = committed
        .state
        .get("seed")
        .and_then(serde_json::Value::as_u64);
    if let Some(saved) = saved_seed.filter(|&saved| saved != seed) {
        let (_, dir) = &committed.dirs[0];
        return Err(RunError::Resume(format!(
            "the checkpoint of step {} ({}) was written by a run with --seed {saved}, and this \
             run has --seed {seed}; a resumed run continues its seed's streams: resume with \
             --seed {saved}, or start a new run folder for seed {seed}",
            committed.step,
            dir.display()
        )));
    }
    Ok(Some((committed.step, committed.dirs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(local_size: usize, cpu_sharers: usize) -> Option<ProcessWorld> {
        Some(ProcessWorld {
            rank: 0,
            size: 8,
            local_rank: 0,
            local_size,
            cpu_sharers,
        })
    }

    #[test]
    fn threads_are_checked_against_the_machine() {
        assert!(check_threads(1, 2).is_ok());
        assert!(check_threads(8, 2).is_ok());
        let said = check_threads(100_000, 2).unwrap_err().to_string();
        assert!(
            said.contains("--threads 100000") && said.contains("2 CPUs"),
            "{said}"
        );
        assert!(said.contains("at most 8"), "{said}");
        assert!(check_threads(9, 2).is_err());
        assert!(
            check_threads(0, 2)
                .unwrap_err()
                .to_string()
                .contains("--threads 0")
        );
        // The machine's CPUs, not fewer.
        assert!(machine_cpus() >= std::thread::available_parallelism().unwrap().get());
    }

    #[test]
    fn ranks_share_the_cpus_they_may_run_on() {
        // Threads of one process: the machine's 16 CPUs over 4 ranks, or 6 asked for.
        assert_eq!(torch_threads(None, 16, None, 4), 4);
        assert_eq!(torch_threads(Some(6), 16, None, 4), 1);
        // 4 unbound processes on a 16-CPU machine: each sees all 16, shares them with 3.
        assert_eq!(torch_threads(None, 16, process(4, 4), 8), 4);
        // Bound to 12 CPUs of its own (Slurm's --cpus-per-task=12): all 12.
        assert_eq!(torch_threads(None, 12, process(8, 1), 8), 12);
        // `--threads` counts the machine's CPUs, whatever the binding.
        assert_eq!(torch_threads(Some(96), 12, process(8, 1), 8), 12);
        // Never none.
        assert_eq!(torch_threads(None, 2, process(4, 4), 8), 1);
    }
}

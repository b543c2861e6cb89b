//! `rlc run` with its ranks as processes that `mpirun` starts (the `mpi` feature): the same job
//! logs bit-identical metrics whether its ranks are threads of one process or processes, for
//! every layout `rlc run` executes, and resumes as processes; a wrong process count is refused;
//! a rank killed mid-run ends the whole job, with a diagnosis naming it, in bounded time.
#![cfg(feature = "mpi")]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{metric_records as metrics, scratch, text};
use rlc_runtime::collectives::processes::local_mpirun;

mod common;

const RLC: &str = env!("CARGO_BIN_EXE_rlc");

/// The main example with its placements (`dp(2)`) replaced by `layout`, checkpointing every step.
fn program(dir: &Path, layout: &str) -> PathBuf {
    // The main job with its loop written out, where its checkpoints' interval is written.
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/grpo_digits_by_hand.rl"),
    )
    .unwrap();
    let placed = text.replace("with dp(2)", &format!("with {layout}"));
    let source = placed.replace("every 100 steps", "every 1 steps");
    assert_ne!(
        source, placed,
        "the example no longer says `every 100 steps`"
    );
    let path = dir.join("job.rl");
    std::fs::write(&path, source).unwrap();
    path
}

/// `rlc run source --out out extra…`, as one process (ranks as threads) or as `np` processes.
fn run(processes: Option<usize>, source: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut command = match processes {
        Some(np) => {
            let mut launcher = local_mpirun(np);
            launcher.arg(RLC);
            launcher
        }
        None => Command::new(RLC),
    };
    command
        .arg("run")
        .arg(source)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn every_layout_logs_the_same_metrics_as_processes_as_with_threads() {
    for layout in ["dp(2)", "tp(2)", "fsdp(2)", "pp(2)"] {
        let dir = scratch(&layout.replace(['(', ')'], ""));
        let source = program(&dir, layout);
        let by_threads = dir.join("threads");
        let out = run(None, &source, &by_threads, &["--stop-after", "3"]);
        assert!(out.status.success(), "{layout} threads: {}", text(&out));
        let by_processes = dir.join("processes");
        let out = run(Some(2), &source, &by_processes, &["--stop-after", "3"]);
        assert!(out.status.success(), "{layout} processes: {}", text(&out));
        assert!(
            text(&out).contains("2 ranks as processes"),
            "{layout}: {}",
            text(&out)
        );
        let expected = metrics(&by_threads);
        assert_eq!(expected.len(), 3, "{layout}");
        assert_eq!(metrics(&by_processes), expected, "{layout}: metrics differ");
        // Stopped after 2 steps and resumed as processes: the same third step.
        let resumed = dir.join("resumed");
        let out = run(Some(2), &source, &resumed, &["--stop-after", "2"]);
        assert!(out.status.success(), "{layout} first part: {}", text(&out));
        let out = run(
            Some(2),
            &source,
            &resumed,
            &["--stop-after", "3", "--resume"],
        );
        assert!(out.status.success(), "{layout} resumed: {}", text(&out));
        assert_eq!(
            metrics(&resumed),
            expected,
            "{layout}: resumed metrics differ"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A job whose `log` op runs on another rank than 0 (examples/grpo_async.rl: generation on rank
/// 0, training, the kernels and the `log` op on rank 1) is refused as processes, whose metrics
/// lines only rank 0's process writes, rather than run with its fields dropped; with threads it
/// runs and logs them.
#[test]
fn a_job_that_logs_off_rank_zero_is_refused_as_processes() {
    let dir = scratch("log-elsewhere");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/grpo_async.rl");
    let out = run(
        Some(2),
        &source,
        &dir.join("processes"),
        &["--stop-after", "1"],
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("the `log` op runs on rank 1"),
        "{}",
        text(&out)
    );
    let by_threads = dir.join("threads");
    let out = run(None, &source, &by_threads, &["--stop-after", "2"]);
    assert!(out.status.success(), "threads: {}", text(&out));
    assert!(
        metrics(&by_threads)
            .iter()
            .all(|m| m.contains_key("reward"))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_job_needs_one_process_per_rank() {
    let dir = scratch("count");
    let source = program(&dir, "dp(2)");
    let out = run(Some(3), &source, &dir.join("run"), &["--stop-after", "1"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("the plan has 2 ranks, the launcher started 3 processes"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The process of `mpirun` `launcher`'s job with the given rank (Open MPI tells each its rank
/// in `OMPI_COMM_WORLD_RANK`).
fn rank_process(launcher: u32, rank: usize) -> Option<u32> {
    let wanted = format!("OMPI_COMM_WORLD_RANK={rank}");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // The parent pid is the second field after the parenthesised command name.
            let parent: u32 = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            let has_rank = environ
                .split(|&b| b == 0)
                .any(|var| var == wanted.as_bytes());
            (parent == launcher && has_rank).then_some(pid)
        })
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_killed_rank_ends_every_rank_with_a_diagnosis() {
    let dir = scratch("kill");
    let source = program(&dir, "dp(2)");
    let run = dir.join("run");
    let mut launcher = local_mpirun(2)
        .arg(RLC)
        .arg("run")
        .arg(&source)
        .arg("--out")
        .arg(&run)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let metrics = run.join("metrics.jsonl");
    wait_for("the first step", Duration::from_secs(180), || {
        std::fs::read_to_string(&metrics).is_ok_and(|m| m.lines().count() >= 2)
    });
    let victim = rank_process(launcher.id(), 1).expect("rank 1's process");
    let survivor = rank_process(launcher.id(), 0).expect("rank 0's process");
    let killed = Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let killed_at = Instant::now();
    let mut status = None;
    wait_for(
        "the job's end after a rank died",
        Duration::from_secs(60),
        || {
            status = launcher.try_wait().unwrap();
            status.is_some()
        },
    );
    eprintln!(
        "the job ended {:?} after rank 1 was killed",
        killed_at.elapsed()
    );
    assert!(!status.unwrap().success());
    let mut stderr = String::new();
    launcher
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains("rank 1") && stderr.contains("signal 9"),
        "no diagnosis naming the killed rank: {stderr}"
    );
    assert!(
        !Path::new(&format!("/proc/{survivor}")).exists()
            || std::fs::read_to_string(format!("/proc/{survivor}/stat"))
                .is_ok_and(|s| s.contains(") Z ")),
        "rank 0 still runs after rank 1 died"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

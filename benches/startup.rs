//! Start-up of the binaries a user puts on PATH, measured over the whole process as a shell runs
//! it (spawn, dynamic loading, the command, exit): `rlc check` of each example, `rlc --version`,
//! and `rlc-run --version`, which loads libtorch as `rlc run` does. Goal: `rlc check` of every
//! example ≤ 10 ms median from the runtime build, i.e. `rlc` never loads libtorch.
//!
//! `cargo bench --features runtime --bench startup` (release build; `RLC_STARTUP_RUNS=N` sets the
//! runs per figure, default 51). The figures are in docs/benchmarks.md ("Start-up").

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RLC: &str = env!("CARGO_BIN_EXE_rlc");
const RLC_RUN: &str = env!("CARGO_BIN_EXE_rlc-run");

/// The CPU time (user + system) of this process's waited-for children so far, from
/// /proc/self/stat in the kernel's USER_HZ ticks (100 per second); zero where it cannot be read.
/// Unlike wall time it hardly changes with the machine's load.
fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses): cutime and cstime are the 14th
    // and 15th of them.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: u64 = rest
        .split_whitespace()
        .skip(13)
        .take(2)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// The median wall time of `runs` runs of `program args…` (after two unmeasured ones, which fill
/// the page cache), the mean CPU time of a run, and the exit status of the last.
fn median(program: &str, args: &[&str], runs: usize) -> (Duration, Duration, Option<i32>) {
    let run = || {
        let start = Instant::now();
        let status = Command::new(program)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        (start.elapsed(), status.code())
    };
    run();
    run();
    let mut times = Vec::with_capacity(runs);
    let mut code = None;
    let cpu = children_cpu();
    for _ in 0..runs {
        let (t, c) = run();
        times.push(t);
        code = c;
    }
    let cpu = (children_cpu() - cpu) / runs as u32;
    times.sort();
    (times[runs / 2], cpu, code)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // `cargo bench` passes `--bench`; a filter is not supported.
    let runs: usize = std::env::var("RLC_STARTUP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(51);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut examples: Vec<PathBuf> = std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rl"))
        .collect();
    examples.sort();

    println!(
        "start-up, median wall time of {runs} runs each (the whole process, as a shell runs it), \
         and mean CPU time (user + system) per run"
    );
    let row = |what: &str, (wall, cpu, _): (Duration, Duration, Option<i32>), note: &str| {
        println!(
            "  {what:<44} {:>8.1} ms  CPU {:>6.1} ms  {note}",
            ms(wall),
            ms(cpu)
        );
    };
    let libtorch = median(RLC_RUN, &["--version"], runs);
    row("rlc --version", median(RLC, &["--version"], runs), "");
    row(
        "rlc-run --version",
        libtorch,
        "(loads libtorch, as `rlc run` does)",
    );
    let mut worst = Duration::ZERO;
    for example in &examples {
        let rel = example.strip_prefix(root).unwrap_or(example);
        let rel = rel.to_str().expect("a UTF-8 path");
        let measured = median(RLC, &["check", "--color", "never", rel], runs);
        worst = worst.max(measured.0);
        row(
            &format!("rlc check {rel}"),
            measured,
            &format!(
                "({:.0}× faster than loading libtorch; exit {})",
                libtorch.0.as_secs_f64() / measured.0.as_secs_f64(),
                measured
                    .2
                    .map_or_else(|| "by a signal".into(), |c| c.to_string())
            ),
        );
    }
    let grpo = "examples/grpo_digits.rl";
    row(
        &format!("rlc-run check {grpo}"),
        median(RLC_RUN, &["check", "--color", "never", grpo], runs),
        "(the same check in the binary that links libtorch)",
    );
    println!(
        "goal: `rlc check` ≤ 10 ms median for every example: {} (slowest {:.1} ms)",
        if worst <= Duration::from_millis(10) {
            "met"
        } else {
            "MISSED"
        },
        ms(worst)
    );
}

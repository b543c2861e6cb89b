//! Start-up of the binaries a user puts on PATH, measured over the whole process as a shell runs
//! it (spawn, dynamic loading, the command, exit): `rlc check` of each example, `rlc --version`,
//! and `rlc-run --version`, which loads libtorch as `rlc run` does. Goal: `rlc check` of every
//! example ≤ 10 ms median from the runtime build, i.e. `rlc` never loads libtorch.
//!
//! `cargo bench --features runtime --bench startup` (release build; `RLC_STARTUP_RUNS=N` sets the
//! runs per figure, default 31). The figures are in docs/benchmarks.md ("Start-up").

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RLC: &str = env!("CARGO_BIN_EXE_rlc");
const RLC_RUN: &str = env!("CARGO_BIN_EXE_rlc-run");

/// The median wall time of `runs` runs of `program args…` (after two unmeasured ones, which fill
/// the page cache), and the exit status of the last.
fn median(program: &str, args: &[&str], runs: usize) -> (Duration, Option<i32>) {
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
    for _ in 0..runs {
        let (t, c) = run();
        times.push(t);
        code = c;
    }
    times.sort();
    (times[runs / 2], code)
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
        .unwrap_or(31);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut examples: Vec<PathBuf> = std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rl"))
        .collect();
    examples.sort();

    println!("start-up, median of {runs} runs each (the whole process, as a shell runs it)");
    let (libtorch, _) = median(RLC_RUN, &["--version"], runs);
    let (version, _) = median(RLC, &["--version"], runs);
    println!("  {:<44} {:>8.1} ms", "rlc --version", ms(version));
    println!(
        "  {:<44} {:>8.1} ms  (loads libtorch, as `rlc run` does)",
        "rlc-run --version",
        ms(libtorch)
    );
    let mut worst = Duration::ZERO;
    for example in &examples {
        let rel = example.strip_prefix(root).unwrap_or(example);
        let rel = rel.to_str().expect("a UTF-8 path");
        let (t, code) = median(RLC, &["check", "--color", "never", rel], runs);
        worst = worst.max(t);
        println!(
            "  {:<44} {:>8.1} ms  ({:.0}× faster than loading libtorch; exit {})",
            format!("rlc check {rel}"),
            ms(t),
            libtorch.as_secs_f64() / t.as_secs_f64(),
            code.map_or_else(|| "by a signal".into(), |c| c.to_string())
        );
    }
    let grpo = "examples/grpo_digits.rl";
    let (t, _) = median(RLC_RUN, &["check", "--color", "never", grpo], runs);
    println!(
        "  {:<44} {:>8.1} ms  (the same check in the binary that links libtorch)",
        format!("rlc-run check {grpo}"),
        ms(t)
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

//! `rlc-fuzz --runs N --seed S --corpus DIR… --timeout-ms T --memory-mb M --jobs J
//! --findings DIR`: runs a campaign and prints its summary; exits 1 if any input failed.
//! `rlc-fuzz --replay FILE…` runs the given inputs once each.

use rlc_fuzz::campaign::{self, Options, Outcome};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[global_allocator]
static ALLOC: rlc_fuzz::alloc::Counting = rlc_fuzz::alloc::Counting;

const USAGE: &str = "usage: rlc-fuzz [--runs N] [--seed S] [--corpus DIR]... [--timeout-ms T] \
[--memory-mb M] [--jobs J] [--findings DIR] [--progress-every SECONDS] [--replay FILE...]";

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rlc-fuzz: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<ExitCode, String> {
    let mut args = std::env::args().skip(1);
    let mut opts = Options {
        runs: 10_000,
        seed: 1,
        corpus: Vec::new(),
        timeout: Duration::from_millis(2000),
        memory_mb: 1024,
        jobs: 1,
        findings: PathBuf::from("target/fuzz-findings"),
        progress_every: 30,
        exe: std::env::current_exe().map_err(|e| e.to_string())?,
    };
    let mut worker = false;
    let mut replay: Option<Vec<PathBuf>> = None;
    let num = |v: Option<String>, name: &str| -> Result<u64, String> {
        v.ok_or_else(|| format!("{name} needs a value"))?
            .replace('_', "")
            .parse::<u64>()
            .map_err(|e| format!("{name}: {e}"))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => opts.runs = num(args.next(), "--runs")?,
            "--seed" => opts.seed = num(args.next(), "--seed")?,
            "--timeout-ms" => {
                opts.timeout = Duration::from_millis(num(args.next(), "--timeout-ms")?)
            }
            "--memory-mb" => opts.memory_mb = num(args.next(), "--memory-mb")? as usize,
            "--jobs" => opts.jobs = num(args.next(), "--jobs")?.clamp(1, 64) as usize,
            "--progress-every" => opts.progress_every = num(args.next(), "--progress-every")?,
            "--corpus" => opts
                .corpus
                .push(args.next().ok_or("--corpus needs a folder")?.into()),
            "--findings" => opts.findings = args.next().ok_or("--findings needs a folder")?.into(),
            "--worker" => worker = true,
            "--replay" => replay = Some(args.by_ref().map(PathBuf::from).collect()),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if opts.corpus.is_empty() {
        opts.corpus = ["tests/ui", "examples", "stdlib/std"]
            .map(PathBuf::from)
            .to_vec();
    }
    if worker {
        let files = campaign::load_corpus(&opts.corpus);
        rlc_fuzz::worker::serve(files, opts.memory_mb << 20).map_err(|e| e.to_string())?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(paths) = replay {
        let results = campaign::replay(&opts, &paths).map_err(|e| e.to_string())?;
        let mut failed = false;
        for (path, outcome) in results {
            let detail = match &outcome {
                Outcome::Ran { peak, .. } => format!("heap peak {} KiB", peak >> 10),
                Outcome::Panicked(m) | Outcome::Crashed(m) => m.clone(),
                _ => String::new(),
            };
            failed |= !matches!(outcome, Outcome::Ran { .. });
            println!("{}: {} {detail}", path.display(), outcome.class());
        }
        return Ok(if failed {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    let summary = campaign::run(&opts).map_err(|e| e.to_string())?;
    for (bucket, (n, file)) in &summary.findings {
        println!("finding: {bucket}: {n} inputs, e.g. {}", file.display());
    }
    println!("{}", summary.line(opts.seed));
    Ok(if summary.failures() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

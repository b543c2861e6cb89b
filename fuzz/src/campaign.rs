//! The supervisor: generates inputs from the corpus, hands them to worker processes, enforces
//! the per-input time limit, and records what failed.

use crate::alloc;
use crate::mutate::{self, Dictionary};
use crate::rng::Rng;
use crate::target::Kind;
use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Options {
    pub runs: u64,
    pub seed: u64,
    pub corpus: Vec<PathBuf>,
    pub timeout: Duration,
    pub memory_mb: usize,
    pub jobs: usize,
    pub findings: PathBuf,
    /// Seconds between progress lines (and `progress.txt` checkpoints).
    pub progress_every: u64,
    /// The worker executable (this program).
    pub exe: PathBuf,
}

/// Reads every `.rl` and `.json` file under `dirs`, keyed by its path as given (joined with
/// `/`), sorted: the programs, plans, and the modules programs import.
pub fn load_corpus(dirs: &[PathBuf]) -> BTreeMap<String, String> {
    fn walk(p: &Path, out: &mut BTreeMap<String, String>) {
        if p.is_dir() {
            let Ok(entries) = std::fs::read_dir(p) else {
                return;
            };
            let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            paths.sort();
            for path in paths {
                walk(&path, out);
            }
        } else if p.extension().is_some_and(|e| e == "rl" || e == "json")
            && let Ok(text) = std::fs::read_to_string(p)
        {
            let key = p.to_string_lossy().replace('\\', "/");
            let key = key.strip_prefix("./").unwrap_or(&key).to_string();
            out.insert(key, text);
        }
    }
    let mut out = BTreeMap::new();
    for d in dirs {
        walk(d, &mut out);
    }
    out
}

/// The outcome of one input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ran { peak: u64, signature: u64 },
    Panicked(String),
    Timeout,
    MemoryLimit,
    StackOverflow,
    Crashed(String),
}

impl Outcome {
    pub fn class(&self) -> &'static str {
        match self {
            Outcome::Ran { .. } => "ok",
            Outcome::Panicked(_) => "panic",
            Outcome::Timeout => "timeout",
            Outcome::MemoryLimit => "memory",
            Outcome::StackOverflow => "stack-overflow",
            Outcome::Crashed(_) => "crash",
        }
    }

    /// Findings with the same bucket are one bug: the class and, for a panic, where it was.
    pub fn bucket(&self) -> String {
        match self {
            Outcome::Panicked(m) => {
                let first = m.lines().next().unwrap_or("");
                let at = first
                    .strip_prefix("panicked at ")
                    .and_then(|r| r.split(": ").next())
                    .unwrap_or(first);
                format!("panic {at}")
            }
            other => other.class().to_string(),
        }
    }
}

/// One worker process and the threads that read its output.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    answers: Receiver<std::io::Result<(u8, u64, u64, String)>>,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn start(opts: &Options) -> std::io::Result<Worker> {
        let mut cmd = Command::new(&opts.exe);
        cmd.arg("--worker")
            .arg("--memory-mb")
            .arg(opts.memory_mb.to_string());
        for c in &opts.corpus {
            cmd.arg("--corpus").arg(c);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("RUST_BACKTRACE", "0")
            .spawn()?;
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let (tx, answers) = channel();
        std::thread::spawn(move || {
            loop {
                let answer = (|| {
                    let mut head = [0u8; 21];
                    stdout.read_exact(&mut head)?;
                    let status = head[0];
                    let peak = u64::from_le_bytes(head[1..9].try_into().unwrap());
                    let sig = u64::from_le_bytes(head[9..17].try_into().unwrap());
                    let len = u32::from_le_bytes(head[17..21].try_into().unwrap()) as usize;
                    let mut msg = vec![0; len];
                    stdout.read_exact(&mut msg)?;
                    Ok((
                        status,
                        peak,
                        sig,
                        String::from_utf8_lossy(&msg).into_owned(),
                    ))
                })();
                let stop = answer.is_err();
                if tx.send(answer).is_err() || stop {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let stderr_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    return;
                }
                let mut s = sink.lock().unwrap();
                s.push_str(&String::from_utf8_lossy(&buf[..n]));
                if s.len() > 16_384 {
                    let cut = s.len() - 8192;
                    let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(0);
                    s.drain(..cut);
                }
            }
        });
        Ok(Worker {
            child,
            stdin,
            answers,
            stderr,
            stderr_reader: Some(stderr_reader),
        })
    }

    fn send(&mut self, kind: Kind, path: &str, text: &str) -> std::io::Result<()> {
        let mut msg = Vec::with_capacity(9 + path.len() + text.len());
        msg.push(kind as u8);
        msg.extend_from_slice(&(path.len() as u32).to_le_bytes());
        msg.extend_from_slice(&(text.len() as u32).to_le_bytes());
        msg.extend_from_slice(path.as_bytes());
        msg.extend_from_slice(text.as_bytes());
        self.stdin.write_all(&msg)?;
        self.stdin.flush()
    }

    /// Runs one input. `None` in the second place: the worker is gone and must be restarted.
    fn run(&mut self, kind: Kind, path: &str, text: &str, timeout: Duration) -> (Outcome, bool) {
        let cpu_before = cpu_time(self.child.id());
        let sent = self.send(kind, path, text);
        let answer = if sent.is_ok() {
            // The limit is on the worker's CPU time where the system reports it (Linux), so a
            // busy machine does not turn slow-but-bounded inputs into timeouts; the wall clock
            // still ends any wait at ten times the limit.
            let started = Instant::now();
            loop {
                match self.answers.recv_timeout(timeout / 4) {
                    Err(RecvTimeoutError::Timeout) => {
                        let cpu = match (cpu_before, cpu_time(self.child.id())) {
                            (Some(a), Some(b)) => b.saturating_sub(a),
                            _ => started.elapsed(),
                        };
                        if cpu >= timeout || started.elapsed() >= timeout * 10 {
                            break Err(RecvTimeoutError::Timeout);
                        }
                    }
                    other => break other,
                }
            }
        } else {
            Err(RecvTimeoutError::Disconnected)
        };
        match answer {
            Ok(Ok((0, peak, signature, _))) => (Outcome::Ran { peak, signature }, true),
            Ok(Ok((_, _, _, msg))) => (Outcome::Panicked(msg), true),
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                (Outcome::Timeout, false)
            }
            Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait();
                if let Some(r) = self.stderr_reader.take() {
                    let _ = r.join();
                }
                let err = self.stderr.lock().unwrap().clone();
                let outcome = if err.contains(alloc::OVER_LIMIT) {
                    Outcome::MemoryLimit
                } else if err.contains("has overflowed its stack") {
                    Outcome::StackOverflow
                } else {
                    let tail: String = err.lines().rev().take(6).collect::<Vec<_>>().join("\n");
                    Outcome::Crashed(format!("{status:?}\n{tail}"))
                };
                (outcome, false)
            }
        }
    }
}

/// The CPU time (user and system) process `pid` has used, from `/proc/<pid>/stat`; `None` where
/// there is no such file.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from the third: utime is the 14th
    // field and stime the 15th, in clock ticks (100 a second on Linux).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pool of workers, one thread each, restarted when one dies.
struct Pool {
    workers: Vec<Option<Worker>>,
    opts: Options,
}

impl Pool {
    fn new(opts: &Options) -> Pool {
        Pool {
            workers: (0..opts.jobs.max(1)).map(|_| None).collect(),
            opts: opts.clone(),
        }
    }

    /// Runs `inputs`, returning each one's outcome and its wall time, in input order.
    fn run_all(&mut self, inputs: &[Input]) -> Vec<(Outcome, Duration)> {
        self.run_generated(inputs.len() as u64, &|i| inputs[i as usize].clone())
            .into_iter()
            .map(|(_, o, t)| (o, t))
            .collect()
    }

    /// Runs inputs `0..n`, each made by `make` on the worker's thread (so generating inputs
    /// runs in parallel and overlaps the workers' work); in input order.
    fn run_generated(
        &mut self,
        n: u64,
        make: &(dyn Fn(u64) -> Input + Sync),
    ) -> Vec<(Input, Outcome, Duration)> {
        let next = Mutex::new(0u64);
        let results: Mutex<Vec<Option<(Input, Outcome, Duration)>>> =
            Mutex::new(vec![None; n as usize]);
        let opts = &self.opts;
        std::thread::scope(|s| {
            for slot in self.workers.iter_mut() {
                let (next, results) = (&next, &results);
                s.spawn(move || {
                    loop {
                        let i = {
                            let mut k = next.lock().unwrap();
                            let i = *k;
                            *k += 1;
                            i
                        };
                        if i >= n {
                            return;
                        }
                        let input = make(i);
                        if slot.is_none() {
                            *slot = Some(Worker::start(opts).expect("start a worker"));
                        }
                        let start = Instant::now();
                        let (outcome, alive) = slot.as_mut().unwrap().run(
                            input.kind,
                            &input.path,
                            &input.text,
                            opts.timeout,
                        );
                        let took = start.elapsed();
                        if !alive {
                            *slot = None;
                        }
                        results.lock().unwrap()[i as usize] = Some((input, outcome, took));
                    }
                });
            }
        });
        results
            .into_inner()
            .unwrap()
            .into_iter()
            .map(Option::unwrap)
            .collect()
    }
}

#[derive(Clone, Debug)]
pub struct Input {
    pub kind: Kind,
    /// The path it is checked as (its parent's, so relative imports resolve).
    pub path: String,
    pub text: String,
}

/// What a campaign found.
#[derive(Debug, Default)]
pub struct Summary {
    pub executions: u64,
    pub seconds: f64,
    pub corpus: usize,
    pub added: usize,
    /// Bucket → (count, the saved input's file).
    pub findings: BTreeMap<String, (u64, PathBuf)>,
    pub max_peak: u64,
    pub slowest: Duration,
}

impl Summary {
    pub fn failures(&self) -> u64 {
        self.findings.values().map(|(n, _)| n).sum()
    }

    pub fn line(&self, seed: u64) -> String {
        let mut by_class: BTreeMap<&str, u64> = BTreeMap::new();
        for (bucket, (n, _)) in &self.findings {
            *by_class
                .entry(bucket.split(' ').next().unwrap_or(""))
                .or_default() += n;
        }
        let classes: Vec<String> = by_class.iter().map(|(c, n)| format!("{c} {n}")).collect();
        format!(
            "rlc-fuzz: {} executions in {:.1} s ({:.0}/s), seed {seed}, corpus {} (+{} found), \
             {} failing inputs in {} buckets{}, heap peak {:.1} MiB, slowest input {} ms",
            self.executions,
            self.seconds,
            self.executions as f64 / self.seconds.max(1e-9),
            self.corpus,
            self.added,
            self.failures(),
            self.findings.len(),
            if classes.is_empty() {
                String::new()
            } else {
                format!(" ({})", classes.join(", "))
            },
            self.max_peak as f64 / (1 << 20) as f64,
            self.slowest.as_millis()
        )
    }
}

/// Corpus entries found during the campaign are kept if no larger than this.
const MAX_ADDED_LEN: usize = 64 * 1024;
const MAX_ADDED: usize = 20_000;

pub fn run(opts: &Options) -> std::io::Result<Summary> {
    let files = load_corpus(&opts.corpus);
    let mut programs: Vec<(String, String)> = files
        .iter()
        .filter(|(k, _)| k.ends_with(".rl"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut plans: Vec<String> = files
        .iter()
        .filter(|(k, _)| k.ends_with(".json"))
        .map(|(_, v)| v.clone())
        .collect();
    plans.extend(seed_plans(&files));
    let mut streams: Vec<String> = Vec::new();
    if programs.is_empty() || plans.is_empty() {
        // Every input is a mutation of a corpus program or plan: with none there is nothing to
        // mutate (the default folders are relative to the repository root).
        return Err(std::io::Error::other(format!(
            "the corpus ({}) holds {} programs and {} plans; it needs at least one of each \
             (run from the repository root or pass --corpus DIR)",
            opts.corpus
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            programs.len(),
            plans.len()
        )));
    }
    let texts: Vec<String> = programs.iter().map(|(_, t)| t.clone()).collect();
    let dict = Dictionary::new(&texts);
    let seeds = programs.len() + plans.len();
    std::fs::create_dir_all(&opts.findings)?;
    let mut pool = Pool::new(opts);
    let mut seen: HashSet<u64> = HashSet::new();
    let mut summary = Summary::default();
    let start = Instant::now();
    let mut last_progress = Instant::now();
    let batch = 256 * opts.jobs.max(1) as u64;
    let mut index = 0u64;
    while index < opts.runs {
        let n = batch.min(opts.runs - index);
        let results = {
            let corpus = Corpus {
                programs: &programs,
                plans: &plans,
                streams: &streams,
                texts: &texts,
                dict: &dict,
            };
            pool.run_generated(n, &move |k| generate(opts.seed, index + k, &corpus))
        };
        for (input, outcome, took) in results {
            summary.slowest = summary.slowest.max(took);
            match outcome {
                Outcome::Ran { peak, signature } => {
                    summary.max_peak = summary.max_peak.max(peak);
                    if seen.insert(signature)
                        && input.text.len() <= MAX_ADDED_LEN
                        && summary.added < MAX_ADDED
                    {
                        summary.added += 1;
                        match input.kind {
                            Kind::Program => programs.push((input.path, input.text)),
                            Kind::Plan => plans.push(input.text),
                            Kind::Lsp => streams.push(input.text),
                            Kind::Probe => {}
                        }
                    }
                }
                failure => record(opts, &mut pool, &mut summary, &input, &failure)?,
            }
        }
        index += n;
        summary.executions = index;
        if last_progress.elapsed().as_secs() >= opts.progress_every || index >= opts.runs {
            last_progress = Instant::now();
            summary.seconds = start.elapsed().as_secs_f64();
            summary.corpus = seeds + summary.added;
            let line = summary.line(opts.seed);
            eprintln!("{line}");
            let _ = std::fs::write(opts.findings.join("progress.txt"), format!("{line}\n"));
        }
    }
    summary.seconds = start.elapsed().as_secs_f64();
    summary.corpus = seeds + summary.added;
    Ok(summary)
}

/// What inputs are made from.
struct Corpus<'a> {
    programs: &'a [(String, String)],
    plans: &'a [String],
    /// LSP byte streams: sessions around the corpus's programs, and inputs that were new.
    streams: &'a [String],
    texts: &'a [String],
    dict: &'a Dictionary,
}

/// Input `i` of the campaign: a mutation of a plan of the corpus (one in six), of an LSP stream
/// (one in eight of the others), or of a program.
fn generate(seed: u64, i: u64, c: &Corpus) -> Input {
    let mut rng = Rng::for_input(seed, i);
    if !c.plans.is_empty() && rng.one_in(6) {
        let parent = rng.pick(c.plans);
        return Input {
            kind: Kind::Plan,
            path: "plan.json".into(),
            text: mutate::mutate_plan(&mut rng, parent, c.dict),
        };
    }
    if rng.one_in(8) {
        // Half the time a session around a program of the corpus, else a stream already kept;
        // mutated as text (the number mutations reach `Content-Length`).
        let parent = if c.streams.is_empty() || rng.one_in(2) {
            crate::lsp_wire::session(&rng.pick(c.programs).1)
        } else {
            rng.pick(c.streams).clone()
        };
        return Input {
            kind: Kind::Lsp,
            path: "stream.lsp".into(),
            text: mutate::mutate_program(&mut rng, &parent, c.texts, c.dict),
        };
    }
    let (path, parent) = rng.pick(c.programs);
    Input {
        kind: Kind::Program,
        path: path.clone(),
        text: mutate::mutate_program(&mut rng, parent, c.texts, c.dict),
    }
}

/// The plans of the corpus's programs that build (the examples'), to mutate as plan files.
fn seed_plans(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(k, _)| k.ends_with(".rl")) {
        if !path.contains("examples/") {
            continue;
        }
        let mut all = rlc_diagnostics::Files::new();
        let checked = rlc_check::check(&crate::target::Loader(files), &mut all, path, text.clone());
        if checked.has_errors() {
            continue;
        }
        let all_cpu = checked.program.clusters.iter().all(|c| c.is_cpu);
        let params = rlc_plan::cost::CostParams::defaults(all_cpu);
        let plan = match rlc_plan::planner::plan_auto(&checked, &params) {
            Ok(Some(p)) => Some(p.plan),
            Ok(None) => rlc_plan::lower::lower(&checked).ok(),
            Err(_) => None,
        };
        if let Some(plan) = plan {
            out.push(plan.to_json());
        }
    }
    out
}

/// Saves a failing input (the first of its bucket, minimized) and counts it.
fn record(
    opts: &Options,
    pool: &mut Pool,
    summary: &mut Summary,
    input: &Input,
    outcome: &Outcome,
) -> std::io::Result<()> {
    let bucket = outcome.bucket();
    if let Some((n, _)) = summary.findings.get_mut(&bucket) {
        *n += 1;
        return Ok(());
    }
    let small = minimize(pool, input, outcome);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&bucket, &mut h);
    let name = format!("{}-{:016x}", outcome.class(), std::hash::Hasher::finish(&h));
    let file = opts
        .findings
        .join(format!("{name}.{}", input.kind.extension()));
    std::fs::write(&file, &small.text)?;
    std::fs::write(
        opts.findings
            .join(format!("{name}.original.{}", input.kind.extension())),
        &input.text,
    )?;
    let detail = match outcome {
        Outcome::Panicked(m) | Outcome::Crashed(m) => m.clone(),
        _ => String::new(),
    };
    std::fs::write(
        opts.findings.join(format!("{name}.txt")),
        format!(
            "{}\nchecked as: {}\ninput: {} bytes, minimized: {} bytes\n{detail}\n",
            bucket,
            input.path,
            input.text.len(),
            small.text.len()
        ),
    )?;
    eprintln!("rlc-fuzz: new finding {bucket}: {}", file.display());
    summary.findings.insert(bucket, (1, file));
    Ok(())
}

/// Shrinks a failing input while it fails the same way: lines, then runs of characters, then
/// single characters, with a budget of executions.
fn minimize(pool: &mut Pool, input: &Input, outcome: &Outcome) -> Input {
    let mut best = input.clone();
    // Each try of a timeout or a memory limit takes up to the limit and a worker's restart.
    let mut budget = match outcome {
        Outcome::Timeout | Outcome::MemoryLimit => 40usize,
        _ => 300,
    };
    let target = outcome.bucket();
    let fails = |pool: &mut Pool, text: String, budget: &mut usize| -> Option<Input> {
        if *budget == 0 {
            return None;
        }
        *budget -= 1;
        let candidate = Input {
            text,
            ..input.clone()
        };
        let r = pool.run_all(std::slice::from_ref(&candidate));
        (r[0].0.bucket() == target).then_some(candidate)
    };
    // Chunks of lines, halving.
    let mut chunk = best.text.lines().count().max(1) / 2;
    while chunk >= 1 && budget > 0 {
        let lines: Vec<&str> = best.text.split_inclusive('\n').collect();
        let mut i = 0;
        let mut improved = false;
        while i < lines.len() && budget > 0 {
            let text: String =
                lines[..i].concat() + &lines[(i + chunk).min(lines.len())..].concat();
            if let Some(c) = fails(pool, text, &mut budget) {
                best = c;
                improved = true;
                break;
            }
            i += chunk;
        }
        if !improved {
            chunk /= 2;
        }
    }
    // Runs of characters, halving.
    let mut chunk = best.text.len() / 2;
    while chunk >= 1 && budget > 0 {
        let chars: Vec<(usize, char)> = best.text.char_indices().collect();
        let mut improved = false;
        let mut i = 0;
        while i < chars.len() && budget > 0 {
            let from = chars[i].0;
            let to = chars.get(i + chunk).map_or(best.text.len(), |c| c.0);
            let text = format!("{}{}", &best.text[..from], &best.text[to..]);
            if let Some(c) = fails(pool, text, &mut budget) {
                best = c;
                improved = true;
                break;
            }
            i += chunk;
        }
        if !improved {
            chunk /= 2;
        }
    }
    best
}

/// Runs the given files (each a program, or a plan if it ends in `.json`) once each.
pub fn replay(opts: &Options, paths: &[PathBuf]) -> std::io::Result<Vec<(PathBuf, Outcome)>> {
    let mut pool = Pool::new(&Options {
        jobs: 1,
        ..opts.clone()
    });
    let mut out = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p)?;
        let kind = match p.extension().and_then(|e| e.to_str()) {
            Some("json") => Kind::Plan,
            Some("probe") => Kind::Probe,
            Some("lsp") => Kind::Lsp,
            _ => Kind::Program,
        };
        let input = Input {
            kind,
            path: p.to_string_lossy().replace('\\', "/"),
            text,
        };
        let r = pool.run_all(&[input]);
        out.push((p.clone(), r[0].0.clone()));
    }
    Ok(out)
}

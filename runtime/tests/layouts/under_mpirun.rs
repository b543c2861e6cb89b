//! This suite with ranks as processes: the test binary itself under `mpirun -np 2` and `-np 4`
//! on loopback (every process runs every test, one at a time, in the same order). Each process
//! must pass every test; layouts of more ranks than processes are skipped, and the skips listed;
//! every result the processes compute must be bit-identical to the one ranks as threads compute
//! (digests of both, libtorch on one thread in each process).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rlc_runtime::collectives::launched_by_mpi;
use rlc_runtime::collectives::processes::local_mpirun;

use crate::ranks::DIGEST_VARIABLE;

/// Left out of the runs it makes (by libtest's `--skip`, a substring of the test names).
const THIS_MODULE: &str = "under_mpirun::";
/// A run that takes longer is stopped and fails (4 processes share 2 cores in CI).
const TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// One run of the suite at a time: they would share the cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn this_binary() -> PathBuf {
    std::env::current_exe().expect("the test binary's path")
}

/// The tests of this suite except these drivers.
fn suite_tests() -> usize {
    let output = Command::new(this_binary())
        .args(["--list", "--skip", THIS_MODULE])
        .env_remove(DIGEST_VARIABLE)
        .output()
        .expect("listing the tests");
    assert!(output.status.success(), "listing the tests: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.ends_with(": test"))
        .count()
}

/// Output of a finished run.
struct Run {
    status: ExitStatus,
    output: String,
    seconds: f64,
}

fn tail(text: &str) -> &str {
    let mut start = text.len().saturating_sub(8000);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Runs the suite under `launcher` (one test at a time: the processes run each test together)
/// or, without one, with ranks as threads; printing digests, with its output in a file; stopped
/// (and failing) after [`TIMEOUT`].
fn run_suite(launcher: Option<Command>, what: &str) -> Run {
    let log = std::env::temp_dir().join(format!(
        "rlc-layouts-{}-{}.log",
        what.replace(' ', "-"),
        std::process::id()
    ));
    let file = File::create(&log).expect("a log file");
    let mut command = match launcher {
        Some(mut launcher) => {
            launcher
                .arg(this_binary())
                .args(["--test-threads=1", "--color", "never"]);
            launcher
        }
        None => Command::new(this_binary()),
    };
    command
        .args(["--skip", THIS_MODULE])
        .env(DIGEST_VARIABLE, "1")
        // One libtorch thread per process: 4 processes share 2 cores, and the threads' run
        // compared with them uses the same.
        .env("OMP_NUM_THREADS", "1")
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("the log file"))
        .stderr(file);
    let start = Instant::now();
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the run") {
            break status;
        }
        if start.elapsed() > TIMEOUT {
            // mpirun ends its processes on SIGTERM; SIGKILL only if it does not.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = child.kill();
            let _ = child.wait();
            let output = std::fs::read_to_string(&log).unwrap_or_default();
            panic!(
                "{what}: stopped after {} s (log {}):\n{}",
                TIMEOUT.as_secs(),
                log.display(),
                tail(&output)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let seconds = start.elapsed().as_secs_f64();
    let output = std::fs::read_to_string(&log).expect("the run's log");
    let _ = std::fs::remove_file(&log);
    Run {
        status,
        output,
        seconds,
    }
}

/// `layouts: DIGEST <test> <key>#<n> rank <r> <hash>` lines: `<test> <key>#<n> rank <r>` → hash.
fn digests<'a>(lines: impl Iterator<Item = &'a str>) -> BTreeMap<String, String> {
    lines
        .filter_map(|line| line.strip_prefix("layouts: DIGEST "))
        .filter_map(|rest| rest.trim_end().rsplit_once(' '))
        .map(|(run, hash)| (run.to_owned(), hash.to_owned()))
        .collect()
}

/// Digests of the suite with ranks as threads (one run, for both drivers).
fn threads_digests() -> &'static BTreeMap<String, String> {
    static DIGESTS: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    DIGESTS.get_or_init(|| {
        let run = run_suite(None, "threads");
        assert!(
            run.status.success(),
            "the suite with ranks as threads failed:\n{}",
            tail(&run.output)
        );
        let digests = digests(run.output.lines());
        assert!(!digests.is_empty(), "no digests:\n{}", tail(&run.output));
        digests
    })
}

/// The length of mpirun's `--tag-output` tag `[job,rank]<stream>:` at the start of `text`, the
/// rank and the stream.
fn tag(text: &str) -> Option<(usize, usize, &str)> {
    let rest = text.strip_prefix('[')?;
    let close = rest.find("]<")?;
    let (job, rank) = rest[..close].split_once(',')?;
    if job.is_empty() || !job.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let rank = rank.parse().ok()?;
    let after = &rest[close + 2..];
    let end = after.find(">:")?;
    let stream = &after[..end];
    if !stream.bytes().all(|b| b.is_ascii_lowercase()) {
        return None;
    }
    Some((1 + close + 2 + end + 2, rank, stream))
}

/// Each process's streams, reassembled from mpirun's tagged output: each piece a process wrote
/// comes after its tag, and a piece cut short is followed at once by the next tag (of any
/// process), so a process's lines can arrive in several pieces.
fn streams(output: &str) -> BTreeMap<(usize, String), String> {
    let mut streams: BTreeMap<(usize, String), String> = BTreeMap::new();
    let mut current: Option<(usize, String)> = None;
    let mut at = 0;
    while at < output.len() {
        if let Some((len, rank, stream)) = tag(&output[at..]) {
            current = Some((rank, stream.to_owned()));
            streams.entry((rank, stream.to_owned())).or_default();
            at += len;
            continue;
        }
        let next = output[at + 1..]
            .find('[')
            .map_or(output.len(), |i| at + 1 + i);
        // Untagged text (mpirun's own messages) goes with rank `usize::MAX`.
        let key = current.clone().unwrap_or((usize::MAX, "mpirun".into()));
        let piece = &output[at..next];
        streams.entry(key).or_default().push_str(piece);
        if piece.ends_with('\n') {
            current = None;
        }
        at = next;
    }
    streams
}

/// One line on stderr, outside libtest's capture.
fn report(text: &str) {
    let _ = std::io::stderr().write_all(format!("{text}\n").as_bytes());
}

fn suite_as_processes(np: usize) {
    if launched_by_mpi() {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let tests = suite_tests();
    let threads = threads_digests();
    let what = format!("mpirun -np {np}");
    let mut mpirun = local_mpirun(np);
    mpirun.arg("--tag-output");
    let run = run_suite(Some(mpirun), &what);

    let streams = streams(&run.output);
    let lines: Vec<(usize, &str)> = streams
        .iter()
        .flat_map(|((rank, _), text)| text.lines().map(move |line| (*rank, line)))
        .collect();
    let mut summaries: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for &(rank, text) in &lines {
        if text.starts_with("test result: ") {
            summaries.entry(rank).or_default().push(text.trim_end());
        }
    }
    let expected = format!("test result: ok. {tests} passed; 0 failed; 0 ignored;");
    let passed = (0..np)
        .filter(|rank| {
            summaries
                .get(rank)
                .is_some_and(|s| s.len() == 1 && s[0].starts_with(&expected))
        })
        .count();
    if !run.status.success() || passed != np {
        let failures: Vec<String> = lines
            .iter()
            .filter(|(_, text)| text.contains("FAILED") || text.contains("panicked"))
            .map(|(rank, text)| format!("[{rank}] {text}"))
            .collect();
        panic!(
            "{what}: {} ({passed} of {np} processes passed all {tests} tests); summaries \
             {summaries:?}\nfailures:\n{}\nlast output:\n{}",
            run.status,
            failures.join("\n"),
            tail(&run.output)
        );
    }

    let skipped: Vec<&str> = lines
        .iter()
        .filter_map(|(_, text)| text.strip_prefix("layouts: SKIPPED "))
        .collect();
    let ours = digests(lines.iter().map(|&(_, text)| text));
    let differing: Vec<String> = ours
        .iter()
        .filter(|(run, hash)| threads.get(*run) != Some(hash))
        .map(|(run, hash)| format!("{run}: {hash} vs threads {:?}", threads.get(run)))
        .collect();
    assert!(!ours.is_empty(), "{what}: no digests");
    assert!(
        differing.is_empty(),
        "{what}: {} of {} rank results differ from the threads' ones:\n{}",
        differing.len(),
        ours.len(),
        differing.join("\n")
    );
    report(&format!(
        "{what}: {tests} tests passed in each of {np} processes in {:.0} s; {} rank results \
         bit-identical to ranks as threads; {} runs skipped{}",
        run.seconds,
        ours.len(),
        skipped.len(),
        skipped
            .iter()
            .map(|s| format!("\n  {s}"))
            .collect::<String>()
    ));
}

#[test]
fn the_suite_passes_with_ranks_as_2_processes() {
    suite_as_processes(2);
}

#[test]
fn the_suite_passes_with_ranks_as_4_processes() {
    suite_as_processes(4);
}

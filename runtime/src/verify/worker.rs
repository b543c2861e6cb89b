//! One worker process: a long-lived child that speaks the protocol over its stdin and stdout,
//! started in a sandbox of its own (rlimits, a temporary working directory, its own process
//! group, no network where the OS allows it) and killed when it misses a deadline.
//!
//! Nothing here blocks without a bound: stdin is written by a writer thread and stdout read by
//! a reader thread, and [`Worker::call`] waits for the answer on a channel with a deadline.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rlc_plan::model::WorkerLimits;

/// The longest line a worker may write on stdout (a longer one is garbage).
pub const MAX_LINE: usize = 64 << 20;
/// Lines of a worker's stderr kept for error messages, and the longest kept line.
const STDERR_LINES: usize = 20;
const STDERR_LINE_CHARS: usize = 500;

/// How to start a worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The verifier's name (in messages and the temporary folder's name).
    pub name: String,
    /// The program and its arguments, paths already resolved.
    pub command: Vec<String>,
    pub limits: WorkerLimits,
}

/// Why a call got no answer. The worker is gone (killed, or dead): the pool starts a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault(pub String);

/// What the reader thread saw on stdout.
enum Line {
    Text(String),
    TooLong,
    Closed,
}

pub struct Worker {
    child: Child,
    /// Lines for the worker's stdin (the writer thread writes them).
    input: Option<Sender<Vec<u8>>>,
    output: Receiver<Line>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    dir: PathBuf,
    /// The network was cut off (a namespace of its own).
    isolated: bool,
}

static DIRS: AtomicU64 = AtomicU64::new(0);

impl Worker {
    /// Starts a worker. With `limits.no_network` it first tries a network namespace of its own;
    /// where the OS refuses one it starts without, and the second value says why.
    pub fn spawn(spec: &WorkerSpec) -> Result<(Worker, Option<String>), String> {
        if spec.command.is_empty() {
            return Err("the command is empty".into());
        }
        let dir = temp_dir(&spec.name)?;
        let started = if spec.limits.no_network {
            match start(spec, &dir, true) {
                Ok(w) => Ok((w, None)),
                Err(isolated) => match start(spec, &dir, false) {
                    // Without the namespace it starts: the OS refused the isolation.
                    Ok(w) => Ok((w, Some(isolated.to_string()))),
                    Err(e) => Err(e),
                },
            }
        } else {
            start(spec, &dir, false).map(|w| (w, None))
        };
        match started {
            Ok((child, refused)) => {
                let worker = Worker::wrap(child, dir, spec.limits.no_network && refused.is_none());
                Ok((worker, refused))
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(format!("cannot start `{}`: {e}", spec.command.join(" ")))
            }
        }
    }

    fn wrap(mut child: Child, dir: PathBuf, isolated: bool) -> Worker {
        let stdout = child.stdout.take().expect("piped");
        let stderr_pipe = child.stderr.take().expect("piped");
        let mut stdin = child.stdin.take().expect("piped");
        let (out_tx, output) = mpsc::channel();
        std::thread::spawn(move || {
            read_lines(stdout, MAX_LINE, |line| {
                let msg = match line {
                    Ok(bytes) => Line::Text(String::from_utf8_lossy(&bytes).into_owned()),
                    Err(_) => Line::TooLong,
                };
                let stop = matches!(msg, Line::TooLong);
                out_tx.send(msg).is_ok() && !stop
            });
            let _ = out_tx.send(Line::Closed);
        });
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&stderr);
        std::thread::spawn(move || {
            read_lines(stderr_pipe, STDERR_LINE_CHARS * 4, |line| {
                let text = match line {
                    Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    Err(bytes) => format!("{}…", String::from_utf8_lossy(&bytes)),
                };
                let text: String = text.chars().take(STDERR_LINE_CHARS).collect();
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() == STDERR_LINES {
                    tail.pop_front();
                }
                tail.push_back(text);
                true
            });
        });
        let (in_tx, in_rx) = mpsc::channel::<Vec<u8>>();
        std::thread::spawn(move || {
            for line in in_rx {
                if stdin.write_all(&line).and_then(|()| stdin.flush()).is_err() {
                    return;
                }
            }
        });
        Worker {
            child,
            input: Some(in_tx),
            output,
            stderr,
            dir,
            isolated,
        }
    }

    /// Whether the worker runs without network.
    pub fn isolated(&self) -> bool {
        self.isolated
    }

    /// The worker's temporary working directory (removed when the worker is dropped).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one request line and waits up to `timeout` for the response line. A worker that
    /// misses the deadline is killed; one that dies or writes an over-long line is a fault too.
    /// `cpu_seconds`: the CPU time this request may use (the worker's CPU limit is moved to
    /// what it has used so far plus this).
    pub fn call(
        &mut self,
        line: &str,
        timeout: Duration,
        cpu_seconds: Option<u64>,
    ) -> Result<String, Fault> {
        let deadline = Instant::now() + timeout;
        if let Some(cpu) = cpu_seconds {
            rearm_cpu(self.child.id(), cpu);
        }
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let sent = self.input.as_ref().is_some_and(|tx| tx.send(bytes).is_ok());
        if !sent {
            return Err(self.died());
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                // Blank lines (a stray `print()`) are skipped.
                Ok(Line::Text(text)) if text.trim().is_empty() => continue,
                Ok(Line::Text(text)) => return Ok(text),
                Ok(Line::TooLong) => {
                    self.kill();
                    return Err(Fault(format!(
                        "printed a line longer than {} MiB{}",
                        MAX_LINE >> 20,
                        self.stderr_tail()
                    )));
                }
                Ok(Line::Closed) | Err(RecvTimeoutError::Disconnected) => return Err(self.died()),
                Err(RecvTimeoutError::Timeout) => {
                    self.kill();
                    return Err(Fault(format!(
                        "did not answer within {}; killed{}",
                        seconds(timeout),
                        self.stderr_tail()
                    )));
                }
            }
        }
    }

    /// The fault of a worker whose stdout closed: how it ended, and its last words.
    fn died(&mut self) -> Fault {
        // Its stdout is closed: it exits now (or has); wait a little for its status.
        let until = Instant::now() + Duration::from_millis(500);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(5)),
                _ => break None,
            }
        };
        // Let the stderr reader take the last lines.
        std::thread::sleep(Duration::from_millis(20));
        self.kill();
        let how = match status {
            Some(status) => describe_exit(status),
            None => "closed its stdout".to_string(),
        };
        Fault(format!("{how}{}", self.stderr_tail()))
    }

    /// `"; its stderr ended with: …"`, or nothing when it wrote none.
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        if tail.is_empty() {
            return String::new();
        }
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        format!("; its stderr ended with:\n  {}", lines.join("\n  "))
    }

    /// Kills the worker and everything it started (its process group).
    fn kill(&mut self) {
        self.input = None;
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: signalling a process group we created; at worst the group is gone already.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `"2.5 s"`.
pub fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(libc::SIGXCPU) => "was killed for exceeding its CPU time limit (SIGXCPU)".into(),
        Some(libc::SIGXFSZ) => "was killed for exceeding its file size limit (SIGXFSZ)".into(),
        Some(libc::SIGKILL) => "was killed (SIGKILL)".into(),
        Some(libc::SIGSEGV) => "crashed (SIGSEGV)".into(),
        Some(signal) => format!("was killed by signal {signal}"),
        None => format!("ended ({status})"),
    }
}

/// A fresh folder for one worker under the system's temporary folder.
fn temp_dir(name: &str) -> Result<PathBuf, String> {
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    loop {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("rlc-verifier-{safe}-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(format!(
                    "cannot create a working folder in {}: {e}",
                    std::env::temp_dir().display()
                ));
            }
        }
    }
}

/// Starts the child with its sandbox; `netns`: in a network namespace of its own.
fn start(spec: &WorkerSpec, dir: &Path, netns: bool) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(&spec.command[0]);
    command
        .args(&spec.command[1..])
        .current_dir(dir)
        .env("RLC_VERIFIER", &spec.name)
        .env("TMPDIR", dir)
        // Python writes its stdout in blocks to a pipe; a worker that forgets to flush would
        // look hung.
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let limits = spec.limits.clone();
    let maps = IdMaps::new();
    // SAFETY: the closure runs in the forked child before exec; it calls only async-signal-safe
    // functions (setpgid, unshare, open/write/close on preformatted buffers, setrlimit, prctl)
    // and allocates nothing.
    unsafe {
        command.pre_exec(move || sandbox(&limits, netns, &maps));
    }
    command.spawn()
}

/// The uid/gid maps a user namespace needs, formatted before the fork.
struct IdMaps {
    uid: Vec<u8>,
    gid: Vec<u8>,
}

impl IdMaps {
    fn new() -> IdMaps {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        IdMaps {
            uid: format!("{uid} {uid} 1\n").into_bytes(),
            gid: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }
}

fn sandbox(limits: &WorkerLimits, netns: bool, maps: &IdMaps) -> std::io::Result<()> {
    let check = |r: libc::c_int| {
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: plain system calls in the child between fork and exec.
    unsafe {
        // Its own process group, so a kill reaches what it started.
        check(libc::setpgid(0, 0))?;
        #[cfg(target_os = "linux")]
        {
            // Dies with the run.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if netns && libc::unshare(libc::CLONE_NEWNET) != 0 {
                // Unprivileged: a user namespace of its own first (same ids inside).
                check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET))?;
                write_file(c"/proc/self/setgroups", b"deny")?;
                write_file(c"/proc/self/uid_map", &maps.uid)?;
                write_file(c"/proc/self/gid_map", &maps.gid)?;
            }
        }
        #[cfg(not(target_os = "linux"))]
        if netns {
            return Err(std::io::Error::other("no network namespaces on this OS"));
        }
        let _ = maps;
        let set = |resource, value: Option<u64>, hard: bool| -> std::io::Result<()> {
            let Some(value) = value else { return Ok(()) };
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            check(libc::getrlimit(resource, &mut limit))?;
            // Never above the hard limit the worker inherits.
            limit.rlim_cur = (value as libc::rlim_t).min(limit.rlim_max);
            if hard {
                limit.rlim_max = limit.rlim_cur;
            }
            check(libc::setrlimit(resource, &limit))
        };
        // CPU: SIGXCPU (fatal unless handled; then the timeout kills) at the soft limit. The hard
        // limit stays, so that the pool can move the soft limit before each request without
        // privileges (`rearm_cpu`): the limit counts each request alone.
        set(libc::RLIMIT_CPU, limits.cpu_seconds, false)?;
        set(libc::RLIMIT_AS, limits.memory_bytes, true)?;
        set(libc::RLIMIT_FSIZE, limits.file_bytes, true)?;
        set(libc::RLIMIT_NPROC, limits.processes, true)?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
    // SAFETY: the caller is the forked child; the buffers outlive the calls.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != bytes.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

/// Moves worker `pid`'s CPU limit to the CPU time it has used plus `cpu` seconds, so that the
/// limit counts this request alone (best effort: where it cannot, the limit stays).
fn rearm_cpu(pid: u32, cpu: u64) {
    #[cfg(target_os = "linux")]
    {
        let Some(used) = cpu_used(pid) else { return };
        let soft = used.ceil() as u64 + cpu;
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: prlimit on our own child, with valid structs.
        unsafe {
            let pid = pid as libc::pid_t;
            if libc::prlimit(pid, libc::RLIMIT_CPU, std::ptr::null(), &mut limit) != 0 {
                return;
            }
            // Only the soft limit moves: raising it needs no privilege up to the hard limit.
            limit.rlim_cur = (soft as libc::rlim_t).min(limit.rlim_max);
            libc::prlimit(pid, libc::RLIMIT_CPU, &limit, std::ptr::null_mut());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (pid, cpu);
}

/// CPU seconds (user + system) process `pid` has used, from `/proc/<pid>/stat`.
#[cfg(target_os = "linux")]
fn cpu_used(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: fields after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

/// Reads `r` line by line, calling `f` with each line (without its newline) or, for a line
/// longer than `max`, `Err` with its first `max` bytes (the rest of that line is skipped);
/// stops when `f` returns false or at the end.
fn read_lines(r: impl Read, max: usize, mut f: impl FnMut(Result<Vec<u8>, Vec<u8>>) -> bool) {
    let mut r = BufReader::new(r);
    let mut line = Vec::new();
    let mut skipping = false;
    loop {
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if available.is_empty() {
            if !line.is_empty() && !skipping {
                f(Ok(std::mem::take(&mut line)));
            }
            return;
        }
        let (chunk, end) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !skipping {
            let room = max.saturating_sub(line.len());
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if chunk.len() > room {
                skipping = true;
                if !f(Err(std::mem::take(&mut line))) {
                    return;
                }
            }
        }
        let used = end.unwrap_or(available.len());
        r.consume(used);
        if end.is_some() {
            if !skipping && !f(Ok(std::mem::take(&mut line))) {
                return;
            }
            line.clear();
            skipping = false;
        }
    }
}

//! A worker pool: `workers` long-lived workers (processes, or concurrent connections to an
//! HTTP server), requests of up to `batch` items spread over them concurrently, each response
//! matched to its request by id and checked item by item. A worker that crashed, hung or wrote
//! something that is not a response is dropped; the next request its slot serves starts a new
//! one. A verifier's pool scores ([`Pool::score`]); an environment's pool answers turns
//! ([`Pool::call`] with [`super::environment`]'s messages): the same transport, sandbox and
//! faults.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use rlc_plan::model::{Environment, Verifier, VerifierEndpoint, WorkerLimits};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::http::HttpTarget;
use super::protocol::{self, Item, ItemResult};
use super::worker::{Fault, Worker, WorkerSpec};

/// One item's score, or why it has none (the cause, for messages).
pub type Outcome = Result<Scored, String>;

/// A finite reward and the declared metrics, in declaration order.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub reward: f32,
    pub metrics: Vec<f32>,
}

enum Target {
    Program(WorkerSpec),
    Http(HttpTarget),
}

#[derive(Default)]
struct Slot {
    worker: Option<Worker>,
}

/// What a pool serves: the transport options a `verifier` and an `environment` share.
struct Served {
    /// `"verifier"` or `"environment"` (in messages).
    what: &'static str,
    name: String,
    endpoint: VerifierEndpoint,
    workers: u32,
    batch: u32,
    timeout_ms: u64,
    limits: WorkerLimits,
}

pub struct Pool {
    served: Served,
    /// The declaration of a verifier's pool (its metrics).
    verifier: Option<Verifier>,
    target: Target,
    slots: Vec<Mutex<Slot>>,
    next_id: AtomicU64,
    /// The no-network warning was given.
    warned: AtomicBool,
    /// Workers started after the first ones (after a fault).
    restarts: AtomicU64,
}

impl Pool {
    /// Starts `verifier`'s workers now (a program that cannot start is an error here, before
    /// anything is scored). Relative paths in its command start from `base_dir`.
    pub fn start(verifier: &Verifier, base_dir: &Path) -> Result<Pool, String> {
        let served = Served {
            what: "verifier",
            name: verifier.name.clone(),
            endpoint: verifier.endpoint.clone(),
            workers: verifier.workers,
            batch: verifier.batch,
            timeout_ms: verifier.timeout_ms,
            limits: verifier.limits.clone(),
        };
        Pool::start_serving(served, Some(verifier.clone()), base_dir)
    }

    /// Starts `environment`'s workers now, as [`Pool::start`] does a verifier's.
    pub fn start_environment(environment: &Environment, base_dir: &Path) -> Result<Pool, String> {
        let served = Served {
            what: "environment",
            name: environment.name.clone(),
            endpoint: environment.endpoint.clone(),
            workers: environment.workers,
            batch: environment.batch,
            timeout_ms: environment.timeout_ms,
            limits: environment.limits.clone(),
        };
        Pool::start_serving(served, None, base_dir)
    }

    fn start_serving(
        served: Served,
        verifier: Option<Verifier>,
        base_dir: &Path,
    ) -> Result<Pool, String> {
        let (what, name) = (served.what, served.name.clone());
        let fail = |e: String| format!("{what} `{name}`: {e}");
        if served.workers == 0 || served.batch == 0 || served.timeout_ms == 0 {
            return Err(fail(
                "workers, batch and timeout must be at least 1".to_string(),
            ));
        }
        let target = match &served.endpoint {
            VerifierEndpoint::Program { command } => Target::Program(WorkerSpec {
                name: served.name.clone(),
                command: resolve(command, base_dir),
                limits: served.limits.clone(),
            }),
            VerifierEndpoint::Http { url } => Target::Http(HttpTarget::parse(url).map_err(fail)?),
        };
        let workers = served.workers;
        let pool = Pool {
            served,
            verifier,
            target,
            slots: (0..workers).map(|_| Mutex::default()).collect(),
            next_id: AtomicU64::new(0),
            warned: AtomicBool::new(false),
            restarts: AtomicU64::new(0),
        };
        if let Target::Program(spec) = &pool.target {
            for slot in &pool.slots {
                let worker = pool.spawn(spec).map_err(fail)?;
                slot.lock().unwrap_or_else(|e| e.into_inner()).worker = Some(worker);
            }
        }
        Ok(pool)
    }

    /// The declaration of a verifier's pool (`None` for an environment's).
    pub fn verifier(&self) -> Option<&Verifier> {
        self.verifier.as_ref()
    }

    /// The declared name of what the pool serves.
    pub fn name(&self) -> &str {
        &self.served.name
    }

    /// Workers started again after a fault, so far.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Whether every live worker runs without network (false where the OS refused the
    /// namespace, or the declaration allows the network).
    pub fn isolated(&self) -> bool {
        self.slots.iter().all(|s| {
            let slot = s.lock().unwrap_or_else(|e| e.into_inner());
            slot.worker.as_ref().is_none_or(Worker::isolated)
        })
    }

    /// The process ids of the live workers (for tests and diagnostics).
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.slots
            .iter()
            .map(|s| {
                let slot = s.lock().unwrap_or_else(|e| e.into_inner());
                slot.worker.as_ref().map(Worker::pid)
            })
            .collect()
    }

    /// Scores `items`: one outcome per item, in order. Requests of up to `batch` items go to the
    /// workers concurrently; never blocks longer than the timeout per request a worker serves.
    pub fn score(&self, items: &[Item]) -> Vec<Outcome> {
        self.call::<Item, ItemResult>(items)
            .into_iter()
            .map(|r| r.and_then(|r| self.item(r)))
            .collect()
    }

    /// Sends `items` and reads one result of type `R` per item, in order (or why that item has
    /// none), as [`Pool::score`] does: requests of up to `batch` items on the workers
    /// concurrently, each bounded by the timeout.
    pub fn call<T, R>(&self, items: &[T]) -> Vec<Result<R, String>>
    where
        T: Serialize + Sync,
        R: DeserializeOwned + Send + ItemError,
    {
        let chunks: Vec<&[T]> = items.chunks(self.served.batch as usize).collect();
        if chunks.len() <= 1 {
            return chunks
                .first()
                .map(|c| self.request(&self.slots[0], c))
                .unwrap_or_default();
        }
        let next = AtomicUsize::new(0);
        let threads = self.slots.len().min(chunks.len());
        let mut done: Vec<(usize, Vec<Result<R, String>>)> = std::thread::scope(|s| {
            let handles: Vec<_> = self.slots[..threads]
                .iter()
                .map(|slot| {
                    let (next, chunks) = (&next, &chunks);
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(chunk) = chunks.get(i) else { break };
                            mine.push((i, self.request(slot, chunk)));
                        }
                        mine
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        done.sort_by_key(|(i, _)| *i);
        let out: Vec<Result<R, String>> = done.into_iter().flat_map(|(_, o)| o).collect();
        debug_assert_eq!(out.len(), items.len());
        out
    }

    fn spawn(&self, spec: &WorkerSpec) -> Result<Worker, String> {
        let (worker, refused) = Worker::spawn(spec)?;
        if let Some(why) = refused
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            eprintln!(
                "warning: {} `{}`: the OS does not let rlc cut its workers off the network \
                 ({why}); they run with network access",
                self.served.what, self.served.name
            );
        }
        Ok(worker)
    }

    /// One request of `items` on `slot`'s worker: an outcome per item.
    fn request<T: Serialize, R: DeserializeOwned + ItemError>(
        &self,
        slot: &Mutex<Slot>,
        items: &[T],
    ) -> Vec<Result<R, String>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = protocol::encode(id, items);
        let timeout = Duration::from_millis(self.served.timeout_ms);
        let all = |cause: String| (0..items.len()).map(|_| Err(cause.clone())).collect();
        let answer = match &self.target {
            Target::Http(target) => target.post(&line, timeout),
            Target::Program(spec) => {
                let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                if slot.worker.is_none() {
                    match self.spawn(spec) {
                        Ok(w) => {
                            self.restarts.fetch_add(1, Ordering::Relaxed);
                            slot.worker = Some(w);
                        }
                        Err(e) => return all(format!("no worker: {e}")),
                    }
                }
                let worker = slot.worker.as_mut().expect("started above");
                let cpu = self.served.limits.cpu_seconds;
                match worker.call(&line, timeout, cpu) {
                    Ok(text) => match self.check(&text, id, items.len()) {
                        Ok(outcomes) => return outcomes,
                        // Out of step with the protocol: start afresh.
                        Err((cause, restart)) => {
                            let cause = format!("worker {}{cause}", worker.pid());
                            if restart {
                                slot.worker = None;
                            }
                            return all(cause);
                        }
                    },
                    Err(Fault(cause)) => {
                        let cause = format!("worker {} {cause}", worker.pid());
                        slot.worker = None;
                        return all(cause);
                    }
                }
            }
        };
        match answer.and_then(|text| self.check(&text, id, items.len()).map_err(|(c, _)| c)) {
            Ok(outcomes) => outcomes,
            Err(cause) => all(format!("the server {}", cause.trim_start())),
        }
    }

    /// A response line → the outcome of each of `count` items, or the cause of failing them
    /// all and whether the worker must be started again.
    fn check<R: DeserializeOwned + ItemError>(
        &self,
        text: &str,
        id: u64,
        count: usize,
    ) -> Result<Vec<Result<R, String>>, (String, bool)> {
        let response = protocol::decode::<R>(text).map_err(|e| (format!(" {e}"), true))?;
        if response.id != id {
            return Err((
                format!(" answered request {} when asked request {id}", response.id),
                true,
            ));
        }
        if let Some(error) = response.error {
            return Err((format!(" answered with an error: {error}"), false));
        }
        let results = response.results.unwrap_or_default();
        if results.len() != count {
            return Err((
                format!(" returned {} results for {count} items", results.len()),
                false,
            ));
        }
        Ok(results
            .into_iter()
            .map(|mut r| match r.take_error() {
                Some(error) => Err(format!("error: {error}")),
                None => Ok(r),
            })
            .collect())
    }

    fn item(&self, r: ItemResult) -> Outcome {
        let finite = |what: &str, v: Option<f64>| -> Result<f32, String> {
            let v = v.ok_or_else(|| format!("the result has no {what}"))?;
            let f = v as f32;
            if f.is_finite() {
                Ok(f)
            } else {
                Err(format!("the {what} is not a finite f32 ({v})"))
            }
        };
        let reward = finite("reward", r.reward)?;
        let metrics = self
            .verifier
            .as_ref()
            .map_or(&[][..], |v| &v.metrics)
            .iter()
            .map(|m| {
                finite(
                    &format!("metric `{m}`"),
                    r.metrics.get(m).copied().flatten(),
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(Scored { reward, metrics })
    }
}

/// A result that may be an error of its own item (`{"error": "..."}`): that item failed, the
/// others of the request stand.
pub trait ItemError {
    fn take_error(&mut self) -> Option<String>;
}

impl ItemError for ItemResult {
    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }
}

/// The command with its relative paths made absolute from `base`: a program path with a `/`,
/// and each argument that names an existing file or folder under `base`. A bare program name is
/// looked up on `PATH`.
pub fn resolve(command: &[String], base: &Path) -> Vec<String> {
    let base: PathBuf = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
    command
        .iter()
        .enumerate()
        .map(|(i, arg)| {
            let path = Path::new(arg);
            let relative = !arg.is_empty() && path.is_relative();
            let program_path = i == 0 && arg.contains('/');
            if relative && (program_path || (i > 0 && base.join(path).exists())) {
                base.join(path).to_string_lossy().into_owned()
            } else {
                arg.clone()
            }
        })
        .collect()
}

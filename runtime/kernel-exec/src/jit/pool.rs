//! Worker threads kept between kernel runs: a run on `n` threads borrows `n − 1` idle workers
//! (starting new ones only when none is idle) instead of spawning threads each call, which
//! costs tens of microseconds — as much as a small kernel's whole work. Waking a sleeping
//! thread costs ~10 µs too, so a worker spins a little while for its next task, and the caller
//! for the workers' end, before they sleep.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a thread spins for what it waits for before it sleeps: a few kernels' fixed cost,
/// so that back-to-back runs (a step's kernels) find their workers awake, while an idle worker
/// gives its core back soon.
const SPIN: Duration = Duration::from_micros(50);

/// Spins until `ready` or [`SPIN`] has passed; whether it became ready.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if start.elapsed() > SPIN {
            return false;
        }
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
}

/// A task borrowed for one run: the caller waits until every worker is done with it.
#[derive(Clone, Copy)]
struct Task(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: the pointee is `Sync`, and `run` keeps it alive until every worker has finished.
unsafe impl Send for Task {}

#[derive(Default)]
struct Slot {
    task: Option<(Task, usize)>,
    done: bool,
    panicked: bool,
}

#[derive(Default)]
struct Worker {
    slot: Mutex<Slot>,
    cv: Condvar,
    /// Mirrors of `slot.task.is_some()` and `slot.done`, read while spinning without the lock.
    pending: AtomicBool,
    finished: AtomicBool,
}

impl Worker {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Idle workers.
static IDLE: Mutex<Vec<Arc<Worker>>> = Mutex::new(Vec::new());

fn idle() -> MutexGuard<'static, Vec<Arc<Worker>>> {
    IDLE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn start() -> Arc<Worker> {
    let w = Arc::new(Worker::default());
    let mine = Arc::clone(&w);
    std::thread::Builder::new()
        .name("rlc-kernel".into())
        .spawn(move || {
            loop {
                spin_until(|| mine.pending.load(Ordering::Acquire));
                let (task, index) = {
                    let mut s = mine.lock();
                    loop {
                        if let Some(t) = s.task.take() {
                            mine.pending.store(false, Ordering::Relaxed);
                            break t;
                        }
                        s = mine.cv.wait(s).unwrap_or_else(PoisonError::into_inner);
                    }
                };
                // SAFETY: `run` waits for `done` before the task goes out of scope. A panic
                // is caught so that `done` is always set; the caller raises it.
                let ok = catch_unwind(AssertUnwindSafe(|| unsafe { (*task.0)(index) })).is_ok();
                let mut s = mine.lock();
                s.done = true;
                s.panicked = !ok;
                mine.finished.store(true, Ordering::Release);
                mine.cv.notify_all();
            }
        })
        .expect("starting a kernel worker thread");
    w
}

/// Runs `f(0)` on this thread and `f(1)`, …, `f(n − 1)` on pooled workers at the same time;
/// returns when every call has returned. A panic of any call is raised then.
pub fn run(n: usize, f: &(dyn Fn(usize) + Sync)) {
    if n <= 1 {
        f(0);
        return;
    }
    let workers: Vec<Arc<Worker>> = {
        let mut idle = idle();
        let keep = idle.len().saturating_sub(n - 1);
        let mut taken = idle.split_off(keep);
        drop(idle);
        while taken.len() < n - 1 {
            taken.push(start());
        }
        taken
    };
    // SAFETY: only the lifetime is erased; every worker is done with the task (below) before
    // `f` can go out of scope, even when `f(0)` panics.
    let task = Task(unsafe {
        std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync)>(f)
    });
    for (i, w) in workers.iter().enumerate() {
        let mut s = w.lock();
        s.done = false;
        s.task = Some((task, i + 1));
        w.finished.store(false, Ordering::Relaxed);
        w.pending.store(true, Ordering::Release);
        w.cv.notify_all();
    }
    let result = catch_unwind(AssertUnwindSafe(|| f(0)));
    let mut worker_panicked = false;
    for w in &workers {
        spin_until(|| w.finished.load(Ordering::Acquire));
        let mut s = w.lock();
        while !s.done {
            s = w.cv.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        worker_panicked |= std::mem::take(&mut s.panicked);
    }
    idle().extend(workers);
    if let Err(p) = result {
        resume_unwind(p);
    }
    assert!(!worker_panicked, "a kernel worker's task panicked");
}

/// A barrier for the threads of one run, which meet around each pass whose barriers the host
/// finishes: like [`std::sync::Barrier`], but a waiter spins for [`SPIN`] before it sleeps
/// (passes end within microseconds of each other; a sleeping waiter costs a wake-up).
pub struct Meet {
    n: usize,
    /// Threads arrived in this generation, and the generation.
    state: Mutex<(usize, u64)>,
    cv: Condvar,
    /// Mirror of the generation, read while spinning without the lock.
    generation: AtomicU64,
}

impl Meet {
    pub fn new(n: usize) -> Self {
        Meet {
            n,
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
            generation: AtomicU64::new(0),
        }
    }

    /// Returns when all `n` threads have called it (once each per generation).
    pub fn wait(&self) {
        let lock = || self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut s = lock();
        let generation = s.1;
        s.0 += 1;
        if s.0 == self.n {
            s.0 = 0;
            s.1 += 1;
            self.generation.store(s.1, Ordering::Release);
            self.cv.notify_all();
            return;
        }
        drop(s);
        if spin_until(|| self.generation.load(Ordering::Acquire) != generation) {
            return;
        }
        let mut s = lock();
        while s.1 == generation {
            s = self.cv.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_index_runs_once_and_workers_are_reused() {
        for n in [1, 2, 3, 5, 2] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            run(n, &|i| {
                hits[i].fetch_add(1, Ordering::SeqCst);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1));
        }
        // No thread passes a meeting before every thread has reached it.
        let meet = Meet::new(3);
        let arrived = AtomicUsize::new(0);
        run(3, &|_| {
            for round in 1..=50 {
                arrived.fetch_add(1, Ordering::SeqCst);
                meet.wait();
                assert!(arrived.load(Ordering::SeqCst) >= 3 * round);
                meet.wait();
            }
        });
        // Runs from several threads at once each get their own workers.
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    let sum = AtomicUsize::new(0);
                    let meet = std::sync::Barrier::new(3);
                    run(3, &|i| {
                        meet.wait();
                        sum.fetch_add(i, Ordering::SeqCst);
                    });
                    assert_eq!(sum.load(Ordering::SeqCst), 3);
                });
            }
        });
    }
}

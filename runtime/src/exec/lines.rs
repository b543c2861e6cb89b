//! The run's metrics line of each step, from every rank of the process: the `log` op runs on
//! the driver's first rank, generation counts its tokens on its own ranks, and each rank times
//! its own ops, so no one rank has the whole line. Each rank hands its step's output over and
//! runs on (a generator may be steps ahead of training); the line of a step is written once
//! every rank has handed its part over. A rank about to write a step's checkpoints first waits
//! for that step's line, so that a checkpoint of step S still implies the lines before it.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex};

use super::rank::StepOutput;
use crate::report::StepRecord;

/// One rank's output of one step.
pub(super) struct Part {
    pub rank: u32,
    pub step: u64,
    pub out: StepOutput,
    pub seconds: f64,
}

/// The parts received so far of the steps not yet complete.
pub(super) struct Gather {
    ranks: usize,
    pending: BTreeMap<u64, Vec<Part>>,
}

impl Gather {
    pub fn new(ranks: usize) -> Self {
        Gather {
            ranks: ranks.max(1),
            pending: BTreeMap::new(),
        }
    }

    /// Adds `part`; the line of its step once every rank's part is in.
    pub fn add(&mut self, part: Part) -> Option<StepRecord> {
        let step = part.step;
        let parts = self.pending.entry(step).or_default();
        parts.push(part);
        if parts.len() < self.ranks {
            return None;
        }
        let mut parts = self.pending.remove(&step)?;
        parts.sort_by_key(|p| p.rank);
        Some(merge(step, parts))
    }
}

/// The line of a step: each metric from the lowest rank that has it (the `log` fields come from
/// the rank that ran the `log` op, in its order; each rank's `time/…` entries are its own, the
/// lowest rank's kept as before), the tokens of the ranks that generated (each counts its
/// instance's, all-reduced: the largest), and the slowest rank's time.
fn merge(step: u64, parts: Vec<Part>) -> StepRecord {
    let mut metrics: Vec<(String, f64)> = Vec::new();
    // The `log` fields first, as the one rank that logs wrote them.
    let logging = parts.iter().position(|p| p.out.logged > 0);
    if let Some(i) = logging {
        let p = &parts[i];
        metrics.extend(p.out.metrics[..p.out.logged].iter().cloned());
    }
    for (i, p) in parts.iter().enumerate() {
        let skip = if Some(i) == logging { p.out.logged } else { 0 };
        for (name, value) in &p.out.metrics[skip..] {
            if !metrics.iter().any(|(n, _)| n == name) {
                metrics.push((name.clone(), *value));
            }
        }
    }
    StepRecord {
        step,
        metrics,
        tokens: parts.iter().map(|p| p.out.tokens).max().unwrap_or(0),
        seconds: parts.iter().map(|p| p.seconds).fold(0.0, f64::max),
    }
}

/// Tells the writer that a rank ended before its last step (an error, a panic): the steps it
/// did not finish never complete, and no rank may wait for their lines. Disarmed when the rank
/// ran every step.
pub(super) struct EndsEarly<'a> {
    parts: Option<&'a std::sync::mpsc::Sender<Option<Part>>>,
}

impl<'a> EndsEarly<'a> {
    pub fn new(parts: &'a std::sync::mpsc::Sender<Option<Part>>) -> Self {
        EndsEarly { parts: Some(parts) }
    }

    pub fn disarm(mut self) {
        self.parts = None;
    }
}

impl Drop for EndsEarly<'_> {
    fn drop(&mut self) {
        if let Some(parts) = self.parts {
            let _ = parts.send(None);
        }
    }
}

/// The next step whose line is not yet written; `u64::MAX` once the writer has stopped.
#[derive(Default)]
pub(super) struct Written {
    next: Mutex<u64>,
    changed: Condvar,
}

impl Written {
    pub fn starting_at(step: u64) -> Self {
        Written {
            next: Mutex::new(step),
            changed: Condvar::new(),
        }
    }

    pub fn set(&self, next: u64) {
        *self.next.lock().unwrap_or_else(|p| p.into_inner()) = next;
        self.changed.notify_all();
    }

    /// Waits until the line of `step` is written (or the writer stopped).
    pub fn wait_for(&self, step: u64) {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        while *next <= step {
            next = self.changed.wait(next).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(rank: u32, step: u64, metrics: &[(&str, f64)], logged: usize, tokens: u64) -> Part {
        Part {
            rank,
            step,
            out: StepOutput {
                metrics: metrics.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
                logged,
                tokens,
            },
            seconds: 0.1 * f64::from(rank + 1),
        }
    }

    #[test]
    fn a_line_waits_for_every_rank_and_takes_the_log_from_the_rank_that_logged() {
        let mut g = Gather::new(2);
        // The generator (rank 0) is a step ahead: its parts of steps 0 and 1 come first.
        assert!(
            g.add(part(0, 0, &[("time/generate", 1.0)], 0, 40))
                .is_none()
        );
        assert!(
            g.add(part(0, 1, &[("time/generate", 2.0)], 0, 41))
                .is_none()
        );
        let line = g
            .add(part(
                1,
                0,
                &[("reward", 0.5), ("kl", 0.1), ("time/update", 3.0)],
                2,
                0,
            ))
            .expect("step 0 is complete");
        assert_eq!(line.step, 0);
        let names: Vec<&str> = line.metrics.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["reward", "kl", "time/generate", "time/update"]);
        assert_eq!(line.tokens, 40);
        assert!((line.seconds - 0.2).abs() < 1e-12);
        assert!(g.add(part(1, 1, &[("reward", 0.6)], 1, 0)).is_some());
    }
}

//! The search's objective: the step time of an assignment (a device range and a layout for
//! every unit), by list-scheduling the step's calls in pipeline order. A call starts when the
//! calls of earlier stages have finished and its devices are free; on devices that several
//! units share, a call first moves the previous unit's state out and its own in (offload and
//! onload over the host link). After the updates, each trained role's weights go to its other
//! units (weight sync). Kernels, transfers and sampling are left out: they are the same under
//! every placement to first order, and the simulation of the chosen plan counts them.
//!
//! Start times are max-plus expressions of the durations, so the step time never falls when a
//! duration grows: a layout slower on every call can be dropped (the Pareto filter), and lower
//! bounds built from the fastest layouts are valid.

use super::options::Choice;
use super::units::Job;
use crate::cost::{CostParams, Hardware};

/// One unit's devices (in its cluster) and layout.
#[derive(Clone, Copy, Debug)]
pub struct Assigned<'a> {
    pub start: u64,
    pub end: u64,
    pub choice: &'a Choice,
}

/// A scheduled assignment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    pub seconds: f64,
    /// The call that ran longest (the step's main cost) and its seconds.
    pub longest_call: usize,
    pub longest_seconds: f64,
}

fn overlaps(a: (usize, u64, u64), b: (usize, u64, u64)) -> bool {
    a.0 == b.0 && a.1 < b.2 && b.1 < a.2
}

/// The step time of `assign` (indexed like `job.units`).
pub fn evaluate(
    job: &Job,
    hardware: &[Hardware],
    assign: &[Assigned<'_>],
    params: &CostParams,
) -> Evaluation {
    let units = &job.units;
    let range = |u: usize| (units[u].cluster, assign[u].start, assign[u].end);
    let shared: Vec<bool> = (0..units.len())
        .map(|u| (0..units.len()).any(|v| v != u && overlaps(range(u), range(v))))
        .collect();
    // Elementary segments: every range cut at every other range's ends.
    let mut cuts: Vec<(usize, u64)> = Vec::with_capacity(2 * units.len());
    for u in 0..units.len() {
        cuts.push((units[u].cluster, assign[u].start));
        cuts.push((units[u].cluster, assign[u].end));
    }
    cuts.sort_unstable();
    cuts.dedup();
    let segments: Vec<(usize, u64, u64)> = cuts
        .windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .map(|w| (w[0].0, w[0].1, w[1].1))
        .collect();
    let segs_of: Vec<Vec<usize>> = (0..units.len())
        .map(|u| {
            (0..segments.len())
                .filter(|&s| overlaps(segments[s], range(u)))
                .collect()
        })
        .collect();
    let mut free = vec![0.0f64; segments.len()];
    let mut last: Vec<Option<usize>> = vec![None; segments.len()];
    let mut finish = vec![0.0f64; job.calls.len()];
    let mut call_no = vec![0usize; units.len()];
    let mut stage_done = [0.0f64; 3];
    let mut best = Evaluation {
        seconds: 0.0,
        longest_call: 0,
        longest_seconds: 0.0,
    };
    for (i, call) in job.calls.iter().enumerate() {
        let u = call.unit;
        let deps = before(&stage_done, call.stage);
        let a = &assign[u];
        let mut start = deps;
        let mut switch = false;
        for &s in &segs_of[u] {
            start = start.max(free[s]);
            switch |= shared[u] && last[s].is_some_and(|v| v != u);
        }
        let own = a.choice.seconds[call_no[u]];
        call_no[u] += 1;
        let moving = if switch {
            2.0 * a.choice.state_bytes / params.host_bandwidth
        } else {
            0.0
        };
        let end = start + moving + own;
        for &s in &segs_of[u] {
            free[s] = end;
            last[s] = Some(u);
        }
        finish[i] = end;
        let st = usize::from(call.stage);
        stage_done[st] = stage_done[st].max(end);
        if own > best.longest_seconds {
            best.longest_seconds = own;
            best.longest_call = i;
        }
    }
    let mut step = finish.iter().copied().fold(0.0, f64::max);
    // Weight syncs: from a trained unit to the role's other units.
    for (i, call) in job.calls.iter().enumerate() {
        if call.stage != 2 || !units[call.unit].shape.trainable {
            continue;
        }
        let src = call.unit;
        for dst in 0..units.len() {
            if dst == src || units[dst].model != units[src].model {
                continue;
            }
            let hw = &hardware[units[src].cluster];
            let n_src = (assign[src].end - assign[src].start).max(1) as f64;
            let together = overlaps(range(src), range(dst));
            let inter = !together
                && (units[src].cluster != units[dst].cluster
                    || assign[src].start / hw.devices_per_node
                        != (assign[dst].end - 1) / hw.devices_per_node
                    || assign[dst].start / hw.devices_per_node
                        != (assign[src].end - 1) / hw.devices_per_node);
            let link = hw.link(inter, params);
            let t = link.latency + units[src].shape.weight_bytes() / (n_src * link.bandwidth);
            let mut start = finish[i];
            for &s in segs_of[src].iter().chain(&segs_of[dst]) {
                start = start.max(free[s]);
            }
            let end = start + t;
            for &s in segs_of[src].iter().chain(&segs_of[dst]) {
                free[s] = end;
            }
            step = step.max(end);
        }
    }
    best.seconds = step;
    best
}

/// When the calls so far of stages before `stage` have all finished.
fn before(stage_done: &[f64; 3], stage: u8) -> f64 {
    stage_done[..usize::from(stage)]
        .iter()
        .copied()
        .fold(0.0, f64::max)
}

/// A lower bound on the step time when each call takes at least `min_seconds[call]`: the
/// longest chain of dependent calls, devices ignored.
pub fn critical_path(job: &Job, min_seconds: &[f64]) -> f64 {
    let mut stage_done = [0.0f64; 3];
    let mut longest: f64 = 0.0;
    for (i, call) in job.calls.iter().enumerate() {
        let end = before(&stage_done, call.stage) + min_seconds[i];
        let st = usize::from(call.stage);
        stage_done[st] = stage_done[st].max(end);
        longest = longest.max(end);
    }
    longest
}

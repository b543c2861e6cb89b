//! The planner's report as text: the chosen placement, its predicted step time, the runners-up
//! and what limits each, and why layouts were refused.

use super::apply::Planned;
use super::search::Candidate;
use super::units::{Job, UnitKind};
use crate::model::Layout;
use crate::simulate::gantt::seconds_text;
use std::fmt::Write as _;

/// `fsdp(8), tp(8), micro(1)`: the factors that are not 1, as a `place` item writes them.
pub fn layout_text(l: &Layout) -> String {
    let mut parts = Vec::new();
    for (name, v) in [
        ("dp", l.dp),
        ("fsdp", l.fsdp),
        ("tp", l.tp),
        ("pp", l.pp),
        ("sp", l.sp),
    ] {
        if v > 1 {
            parts.push(format!("{name}({v})"));
        }
    }
    if parts.is_empty() {
        parts.push("dp(1)".into());
    }
    if let Some(m) = l.micro {
        parts.push(format!("micro({m})"));
    }
    parts.join(", ")
}

fn gib(bytes: f64) -> String {
    format!("{:.1} GiB", bytes / 1024f64.powi(3))
}

fn limit(job: &Job, c: &Candidate) -> String {
    let call = &job.calls[c.eval.longest_call];
    let unit = &job.units[call.unit];
    let (a, b) = c.ranges[call.unit];
    let role = unit.name.split('.').next().unwrap_or(&unit.name);
    format!(
        "{role}.{} on {} devices ({})",
        call.phase.as_str(),
        b - a,
        seconds_text(c.eval.longest_seconds)
    )
}

fn differences(job: &Job, best: &Candidate, other: &Candidate) -> String {
    let mut out = Vec::new();
    for (u, unit) in job.units.iter().enumerate() {
        if matches!(unit.kind, UnitKind::Manual { .. }) {
            continue;
        }
        let (ra, rb) = (best.ranges[u], other.ranges[u]);
        let (la, lb) = (&best.choices[u].layout, &other.choices[u].layout);
        if ra != rb || la != lb {
            out.push(format!(
                "{} on {}..{} with {}",
                unit.name,
                rb.0,
                rb.1,
                layout_text(lb)
            ));
        }
    }
    if out.is_empty() {
        "the same devices and layouts".into()
    } else {
        out.join("; ")
    }
}

/// The report `rlc plan` prints for a program with `auto` placements.
pub fn describe(planned: &Planned) -> String {
    let job = &planned.job;
    let r = &planned.result;
    let best = &r.candidates[planned.chosen];
    let mut s = String::new();
    let _ = writeln!(
        s,
        "placement chosen by the planner ({} placements evaluated):",
        r.evaluated
    );
    let width = job.units.iter().map(|u| u.name.len()).max().unwrap_or(0);
    for (u, unit) in job.units.iter().enumerate() {
        let how = match unit.kind {
            UnitKind::Manual { .. } => "by hand",
            UnitKind::AutoLayout { .. } => "auto layout",
            UnitKind::Free => "auto",
        };
        let (a, b) = best.ranges[u];
        let c = &best.choices[u];
        let _ = writeln!(
            s,
            "  {:width$}  devices {a}..{b}  {}  ({}, {} per device)",
            unit.name,
            layout_text(&c.layout),
            how,
            gib(c.peak_bytes)
        );
    }
    let simulated = |i: usize| {
        planned.simulated[i].map_or_else(
            || "refused by the checker".to_string(),
            |t| format!("simulated {}", seconds_text(t)),
        )
    };
    let _ = writeln!(
        s,
        "  search objective: {} per step ({}); the longest call: {}",
        seconds_text(best.eval.seconds),
        simulated(planned.chosen),
        limit(job, best)
    );
    if r.exact {
        let _ = writeln!(
            s,
            "  optimal among node-aligned pools (blocks of {} device{})",
            r.block,
            if r.block == 1 { "" } else { "s" }
        );
    } else {
        let gap = if r.bound > 0.0 {
            (best.eval.seconds / r.bound - 1.0) * 100.0
        } else {
            0.0
        };
        let _ = writeln!(
            s,
            "  pools searched in blocks of {} devices: within {gap:.1} % of a lower bound over every node-aligned split ({})",
            r.block,
            seconds_text(r.bound)
        );
    }
    let others: Vec<(usize, &Candidate)> = r
        .candidates
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != planned.chosen)
        .collect();
    if !others.is_empty() {
        let _ = writeln!(s, "next best:");
        for (k, (i, c)) in others.iter().enumerate() {
            let more = (c.eval.seconds / best.eval.seconds - 1.0) * 100.0;
            let _ = writeln!(
                s,
                "  {}. {} ({more:+.1} %, {}): {}; limited by {}",
                k + 2,
                seconds_text(c.eval.seconds),
                simulated(*i),
                differences(job, best, c),
                limit(job, c)
            );
        }
    }
    for (u, unit) in job.units.iter().enumerate() {
        let rej = &r.rejections[u];
        if rej.memory == 0 && rej.arithmetic == 0 {
            continue;
        }
        let mut why = Vec::new();
        if rej.memory > 0 {
            why.push(format!(
                "{} over device memory{}",
                rej.memory,
                rej.least_memory
                    .map_or_else(String::new, |m| format!(" (the lightest needs {})", gib(m)))
            ));
        }
        if rej.arithmetic > 0 {
            why.push(format!("{} by batch or shape arithmetic", rej.arithmetic));
        }
        let _ = writeln!(s, "  layouts refused for {}: {}", unit.name, why.join(", "));
    }
    s
}

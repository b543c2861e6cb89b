//! Warnings for plans that are legal but wasteful: devices nothing runs on, placements for
//! phases the pipeline never runs, and a phase on fewer devices than its colocated partners.

use super::placement::phase_name;
use crate::program::*;
use rlc_diagnostics::{Code, Diagnostic};
use std::collections::BTreeSet;
use std::ops::Range;

pub fn check(program: &Program, diags: &mut Vec<Diagnostic>) {
    let Some(pipeline) = &program.pipeline else {
        return;
    };
    if program.auto_place.is_some() {
        return;
    }
    let ran: BTreeSet<(usize, Phase)> = pipeline
        .calls
        .iter()
        .map(|c| (c.model, c.op.phase()))
        .collect();
    // Which placements serve a phase that runs.
    let mut used = vec![false; program.placements.len()];
    for &(model, phase) in &ran {
        if let Some(index) = program.placement_index_for(model, phase) {
            used[index] = true;
        }
    }
    for (p, used) in program.placements.iter().zip(&used) {
        if !used {
            let model = &program.models[p.model];
            diags.push(
                Diagnostic::new(
                    Code::UnusedPlacement,
                    format!(
                        "{} is placed but the pipeline never runs it",
                        phase_name(model, p.phase)
                    ),
                    p.origin.file,
                    p.origin.span,
                )
                .primary_label("never used")
                .help("remove the placement, or use the phase in the pipeline"),
            );
        }
    }
    for (c, cluster) in program.clusters.iter().enumerate() {
        // The devices in use as sorted ranges, so that the work and memory are those of the
        // placements, not of the cluster's size.
        let total = cluster.device_count();
        let mut busy: Vec<Range<u64>> = program
            .placements
            .iter()
            .zip(&used)
            .filter(|(p, u)| **u && p.cluster == c)
            .map(|(p, _)| p.devices.start.min(total)..p.devices.end.min(total))
            .collect();
        if busy.is_empty() {
            continue;
        }
        busy.retain(|r| r.start < r.end);
        busy.sort_unstable_by_key(|r| r.start);
        let idle = gaps(&busy, total);
        if !idle.is_empty() {
            let count: u64 = idle.iter().map(|r| r.end - r.start).sum();
            diags.push(
                Diagnostic::new(Code::IdleDevices, format!("{count} of the {total} devices of `{}` run nothing: {}", cluster.name, ranges(&idle)), cluster.origin.file, cluster.origin.span)
                    .primary_label("idle devices")
                    .help("give the idle devices to a phase (more data parallelism), or shrink the cluster"),
            );
        }
    }
    uneven_colocation(program, &used, diags);
}

fn uneven_colocation(program: &Program, used: &[bool], diags: &mut Vec<Diagnostic>) {
    let active: Vec<&Placement> = program
        .placements
        .iter()
        .zip(used)
        .filter(|(_, u)| **u)
        .map(|(p, _)| p)
        .collect();
    for p in &active {
        let n = p.devices.end - p.devices.start;
        let partner = active
            .iter()
            .filter(|q| {
                q.cluster == p.cluster
                    && q.devices.start < p.devices.end
                    && p.devices.start < q.devices.end
            })
            .max_by_key(|q| q.devices.end - q.devices.start);
        // "One device while its partners use eight": flag a phase on a quarter or less of the
        // devices its largest colocated partner spreads over.
        if let Some(q) = partner
            && n.saturating_mul(4) <= q.devices.end - q.devices.start
        {
            let (pm, qm) = (&program.models[p.model], &program.models[q.model]);
            diags.push(
                Diagnostic::new(
                    Code::UnevenColocation,
                    format!(
                        "{} runs on {n} device{} while {} uses {} devices it shares",
                        phase_name(pm, p.phase),
                        if n == 1 { "" } else { "s" },
                        phase_name(qm, q.phase),
                        q.devices.end - q.devices.start
                    ),
                    p.origin.file,
                    p.origin.span,
                )
                .primary_label(format!("{n} of the shared devices"))
                .label(q.origin.file, q.origin.span, "its colocated partner")
                .help("spread the phase over the shared devices; the others idle while it runs"),
            );
        }
    }
}

/// The parts of `0..total` that no range of `busy` (sorted by start) covers.
fn gaps(busy: &[Range<u64>], total: u64) -> Vec<Range<u64>> {
    let mut idle = Vec::new();
    let mut covered = 0;
    for r in busy {
        if r.start > covered {
            idle.push(covered..r.start);
        }
        covered = covered.max(r.end);
    }
    if covered < total {
        idle.push(covered..total);
    }
    idle
}

/// `0..4, 6, 9..12`: a range of one device as its number.
fn ranges(ids: &[Range<u64>]) -> String {
    ids.iter()
        .map(|r| {
            if r.end == r.start + 1 {
                r.start.to_string()
            } else {
                format!("{}..{}", r.start, r.end)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One range in a `Vec` (clippy reads `vec![a..b]` as a mistake for the range's elements).
    fn one(r: Range<u64>) -> Vec<Range<u64>> {
        std::iter::once(r).collect()
    }

    #[test]
    fn gaps_are_the_uncovered_ranges() {
        assert_eq!(gaps(&[0..4, 2..6, 9..12], 16), vec![6..9, 12..16]);
        assert_eq!(gaps(&one(3..8), 8), one(0..3));
        assert!(gaps(&[0..8, 0..8], 8).is_empty());
        assert_eq!(ranges(&[0..1, 6..9, 12..13]), "0, 6..9, 12");
    }

    #[test]
    fn gaps_of_a_huge_cluster_cost_what_its_placements_do() {
        let total = u64::MAX / 2;
        assert_eq!(gaps(&one(0..8), total), one(8..total));
        assert_eq!(ranges(&gaps(&one(0..8), total)), format!("8..{total}"));
    }
}

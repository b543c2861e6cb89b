//! Warnings for plans that are legal but wasteful: devices nothing runs on, placements for
//! phases the pipeline never runs, and a phase on fewer devices than its colocated partners.

use super::placement::phase_name;
use crate::program::*;
use rlc_diagnostics::{Code, Diagnostic};
use std::collections::BTreeSet;

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
        if let Some(p) = program.placement_for(model, phase) {
            used[program
                .placements
                .iter()
                .position(|q| std::ptr::eq(q, p))
                .unwrap()] = true;
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
        let mut busy = vec![false; cluster.device_count() as usize];
        let mut any = false;
        for (p, _) in program
            .placements
            .iter()
            .zip(&used)
            .filter(|(p, u)| **u && p.cluster == c)
        {
            any = true;
            for d in p.devices.clone() {
                if let Some(b) = busy.get_mut(d as usize) {
                    *b = true;
                }
            }
        }
        let idle: Vec<usize> = (0..busy.len()).filter(|&d| !busy[d]).collect();
        if any && !idle.is_empty() {
            diags.push(
                Diagnostic::new(Code::IdleDevices, format!("{} of the {} devices of `{}` run nothing: {}", idle.len(), busy.len(), cluster.name, ranges(&idle)), cluster.origin.file, cluster.origin.span)
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
            && n * 4 <= q.devices.end - q.devices.start
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

fn ranges(ids: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i];
        while i + 1 < ids.len() && ids[i + 1] == ids[i] + 1 {
            i += 1;
        }
        out.push(if ids[i] == start {
            start.to_string()
        } else {
            format!("{start}..{}", ids[i] + 1)
        });
        i += 1;
    }
    out.join(", ")
}

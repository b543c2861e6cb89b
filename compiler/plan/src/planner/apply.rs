//! From a search result to a plan: each of the best placements that the checker's rules accept
//! is written into a copy of the program (`auto` placements get their layout, free units new
//! placements), lowered and simulated; the shortest simulated step is the plan.

use super::options::check_layout;
use super::search::{self, Candidate, Infeasible, SearchResult, Space};
use super::units::{self, Job, UnitKind};
use crate::cost::{CostParams, Hardware, PlanCosts};
use crate::lower;
use crate::model::Plan;
use crate::simulate;
use rlc_check::Checked;
use rlc_check::checks;
use rlc_check::checks::memory::format_bytes;
use rlc_check::program::{Placement, Program};
use rlc_diagnostics::{Code, Diagnostic};

/// A program whose `auto` placements the planner decided.
#[derive(Clone, Debug)]
pub struct Planned {
    pub job: Job,
    pub result: SearchResult,
    /// The candidate lowered: of those the checker accepts, the shortest simulated step.
    pub chosen: usize,
    /// The simulated step of each candidate (`None`: refused by the checker or lowering).
    pub simulated: Vec<Option<f64>>,
    pub program: Program,
    pub plan: Plan,
}

/// Why the planner gave no plan.
#[derive(Clone, Debug)]
pub enum PlanFailure {
    /// No layout fits (E0901), or a computation no kernel expresses (E0314).
    Diagnostics(Vec<Diagnostic>),
    /// The program cannot be costed or lowered.
    Messages(Vec<String>),
}

/// The hardware of the program's clusters, for the cost model.
pub fn hardware(program: &Program) -> Vec<Hardware> {
    program
        .clusters
        .iter()
        .map(|c| Hardware {
            flops: c.device.flops.max(1.0),
            memory_bandwidth: c.device.bandwidth.max(1.0),
            memory: c.device.memory,
            intra_bandwidth: c.intra_bandwidth.max(1.0),
            inter_bandwidth: c.inter_bandwidth.max(1.0),
            devices_per_node: c.devices_per_node.value.max(1),
        })
        .collect()
}

fn infeasible(program: &Program, job: &Job, why: &Infeasible) -> Diagnostic {
    let unit = &job.units[why.unit];
    let origin = match unit.kind {
        UnitKind::AutoLayout { placement } | UnitKind::Manual { placement, .. } => {
            program.placements[placement].origin
        }
        UnitKind::Free => program.auto_place.unwrap_or_default(),
    };
    let r = &why.rejections;
    let capacity = program
        .clusters
        .get(unit.cluster)
        .map_or(0.0, |c| c.device.memory);
    let mut message = format!(
        "no layout of `{}` on {} devices fits",
        unit.name, why.devices
    );
    if r.memory > 0 {
        message.push_str(&format!(
            ": {} layouts exceed the {} of a device",
            r.memory,
            format_bytes(capacity)
        ));
    }
    let mut d = Diagnostic::new(Code::NoFeasibleLayout, message, origin.file, origin.span)
        .primary_label("the planner searched every layout here");
    if let Some(least) = r.least_memory {
        d = d.note(format!(
            "the lightest layout needs {} per device",
            format_bytes(least)
        ));
    }
    if r.arithmetic > 0 {
        d = d.note(format!(
            "{} layouts break the batch or shape arithmetic (a batch that does not split, \
             heads or layers that do not divide)",
            r.arithmetic
        ));
    }
    d.help("give the role more devices, or lighten it: `precision = bf16`, `recompute = true`, a smaller batch")
}

/// Writes candidate `c` into a copy of `program`.
pub fn apply(program: &Program, job: &Job, c: &Candidate) -> Program {
    let mut out = program.clone();
    let origin = program.auto_place.unwrap_or_default();
    for (u, unit) in job.units.iter().enumerate() {
        let layout = check_layout(&c.choices[u].layout);
        match unit.kind {
            UnitKind::Manual { .. } => {}
            UnitKind::AutoLayout { placement } => {
                out.placements[placement].layout = layout;
                out.placements[placement].auto = false;
            }
            UnitKind::Free => out.placements.push(Placement {
                model: unit.model,
                phase: unit.phase,
                cluster: unit.cluster,
                devices: c.ranges[u].0..c.ranges[u].1,
                devices_origin: origin,
                auto: false,
                layout,
                origin,
            }),
        }
    }
    out
}

/// Searches the placements a program leaves to the planner and lowers the best one. `None`
/// when nothing is `auto`.
pub fn plan_auto(checked: &Checked, params: &CostParams) -> Result<Option<Planned>, PlanFailure> {
    let program = &checked.program;
    let no_auto = program.auto_place.is_none() && !program.placements.iter().any(|p| p.auto);
    if no_auto {
        return Ok(None);
    }
    let job = units::job(program).map_err(|m| PlanFailure::Messages(vec![m]))?;
    let space = Space::new(&job, program, hardware(program), params, false)
        .map_err(|why| PlanFailure::Diagnostics(vec![infeasible(program, &job, &why)]))?;
    let result = search::search(&space);
    let mut problems = Vec::new();
    let planned_ids: Vec<String> = job
        .units
        .iter()
        .filter(|u| !matches!(u.kind, UnitKind::Manual { .. }))
        .map(|u| u.name.clone())
        .collect();
    // Every runner-up the checker accepts is lowered and simulated; the one with the shortest
    // simulated step wins (the simulation also counts kernels and transfers, which the search's
    // objective leaves out).
    let mut simulated = vec![None; result.candidates.len()];
    let mut best: Option<(f64, usize, Program, Plan)> = None;
    for (i, c) in result.candidates.iter().enumerate() {
        let chosen = apply(program, &job, c);
        let mut diags = Vec::new();
        checks::run(&chosen, &mut diags);
        if let Some(d) = diags.iter().find(|d| d.is_error()) {
            problems.push(format!("candidate {}: {}", i + 1, d.message));
            continue;
        }
        match lower::lower_program(checked, &chosen) {
            Ok(mut plan) => {
                for inst in &mut plan.instances {
                    inst.auto = planned_ids.contains(&inst.id);
                }
                let step = PlanCosts::new(&plan, params).and_then(|costs| {
                    simulate::simulate_step(&plan, &costs, &|_| false).map(|t| t.step_seconds)
                });
                match step {
                    Ok(step) => {
                        simulated[i] = Some(step);
                        if best.as_ref().is_none_or(|b| step < b.0) {
                            best = Some((step, i, chosen, plan));
                        }
                    }
                    Err(e) => problems.push(format!("candidate {}: {e}", i + 1)),
                }
            }
            // A computation no kernel expresses fails every candidate alike: say it once, coded.
            Err(errors) if errors.iter().any(|e| e.kernel_at.is_some()) => {
                return Err(lower::failure(errors));
            }
            Err(errors) => problems.extend(
                errors
                    .into_iter()
                    .map(|e| format!("candidate {}: {e}", i + 1)),
            ),
        }
    }
    if let Some((_, chosen, program, plan)) = best {
        return Ok(Some(Planned {
            job: job.clone(),
            result: result.clone(),
            chosen,
            simulated,
            program,
            plan,
        }));
    }
    if result.candidates.is_empty() {
        problems.push("no placement of the `auto` roles fits the cluster".into());
    }
    Err(PlanFailure::Messages(problems))
}

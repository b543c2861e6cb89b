//! Calibration on real plans: the time of each kind of op on rank 0, as the cost model and the
//! simulation give it under known parameters, is fitted back from the parameters the fit starts
//! from — every knob the kinds depend on recovered, every kind predicted, to rounding.

use rlc_diagnostics::Files;
use rlc_plan::Plan;
use rlc_plan::cost::calibrate::{Knob, KnobStatus, Scales, fit_ops, fit_speed};
use rlc_plan::cost::{CostParams, PlanCosts};
use rlc_plan::simulate::{BarKind, simulate_step};
use std::collections::BTreeMap;

struct NoImports;

impl rlc_check::SourceLoader for NoImports {
    fn read(&self, path: &str) -> Result<String, String> {
        Err(format!("no module `{path}` in this test"))
    }
}

/// An example of the repository, lowered as written.
fn example(name: &str) -> Plan {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut files = Files::new();
    let checked = rlc_check::check(&NoImports, &mut files, name, text);
    assert!(
        checked.diagnostics.iter().all(|d| !d.is_error()),
        "{name} does not check"
    );
    rlc_plan::lower::lower(&checked).unwrap_or_else(|_| panic!("{name} does not lower"))
}

/// Seconds of each kind of op on rank 0's lane, waits included (what `rlc run` measures).
fn rank0(plan: &Plan, params: &CostParams) -> Result<BTreeMap<BarKind, f64>, String> {
    let costs = PlanCosts::new(plan, params)?;
    Ok(simulate_step(plan, &costs, &|_| false)?.lane_seconds_by_kind(0))
}

/// Fits per-kind times made under `truth` from `base` and checks what comes back: every kind
/// predicted; each fitted knob the truth's, or — where the kinds do not depend on it near the
/// fit (a roofline's other side, a wait another path decides) — a value the times cannot tell
/// from the truth's; the others at the prior. Returns the names of the fitted knobs.
fn recovers(plan: &Plan, base: &CostParams, truth: Scales) -> Vec<&'static str> {
    let measured = rank0(plan, &truth.apply(base)).unwrap();
    assert!(measured.len() >= 4, "{measured:?}");
    // The prior as `rlc plan --calibrate` takes it: the one speed factor that fits the total.
    let total: f64 = measured.values().sum();
    let (_, k) = fit_speed(base, total, false, |p| {
        rank0(plan, p).unwrap().values().sum()
    })
    .unwrap();
    let prior = Scales::uniform(k, false);
    let fit = fit_ops(base, &measured, prior, |p| rank0(plan, p)).unwrap();
    let close = |a: f64, b: f64, tolerance: f64| (a / b - 1.0).abs() < tolerance;
    for k in &fit.kinds {
        assert!(
            close(k.predicted, k.measured, 1e-6),
            "{}: {k:?} ({:?}, {:?})",
            k.kind.label(),
            fit.scales,
            fit.status
        );
    }
    for knob in Knob::ALL {
        let got = fit.scales.get(knob);
        match fit.status[knob as usize] {
            KnobStatus::Fitted if !close(got, truth.get(knob), 1e-5) => {
                let mut swapped = fit.scales;
                swapped.0[knob as usize] = truth.get(knob);
                let there = rank0(plan, &swapped.apply(base)).unwrap();
                for k in &fit.kinds {
                    assert!(
                        close(there[&k.kind], k.predicted, 1e-9),
                        "{}: {got}, not {} ({:?})",
                        knob.name(),
                        truth.get(knob),
                        fit.status
                    );
                }
            }
            KnobStatus::Fitted => {}
            _ => assert_eq!(got, prior.get(knob), "{}", knob.name()),
        }
    }
    Knob::ALL
        .into_iter()
        .filter(|k| fit.status[*k as usize] == KnobStatus::Fitted)
        .map(Knob::name)
        .collect()
}

#[test]
fn a_cpu_example_gives_back_the_knobs_its_ops_depend_on() {
    // PPO on two CPU devices: generation, forward passes, two updates, kernels and transfers
    // on rank 0.
    let plan = example("ppo_critic.rl");
    let fitted = recovers(&plan, &CostParams::cpu(), Scales([0.3, 1.5, 0.9, 0.2, 3.0]));
    assert_eq!(
        fitted,
        ["compute", "memory", "per layer", "per op", "links"]
    );
}

#[test]
fn gpu_examples_give_back_the_knobs_their_ops_depend_on() {
    // A 200 µs op overhead is under a thousandth of every kind of these steps: the fit leaves
    // it at the prior, and so does the truth.
    let truth = Scales([1.6, 1.3, 2.5, 2.0, 3.0]);
    for (name, knobs) in [
        // Rank 0 trains the policy under fsdp(8) × tp(8): its passes wait for the weights'
        // all-gathers (links), not for compute; the generation pool is elsewhere.
        (
            "ppo_70b_split.rl",
            vec!["compute", "memory", "per layer", "per op", "links"],
        ),
        (
            "rlhf_ppo.rl",
            vec!["compute", "memory", "per layer", "per op", "links"],
        ),
        // Not `colocated_grpo.rl`: from the single speed factor its decode is compute-bound
        // and the truth's is memory-bound, and the fit stops in a minimum of the other piece
        // (generation 6 % off). The report's table shows such a misfit.
    ] {
        let plan = example(name);
        let fitted = recovers(&plan, &CostParams::default(), truth);
        assert_eq!(fitted, knobs, "{name}");
    }
}

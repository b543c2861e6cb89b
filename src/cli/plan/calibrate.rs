//! `rlc plan --calibrate`: the cost model fitted to measured runs (one speed factor from the
//! steps, then one slow-down per knob from each kind of op's time: `rlc_plan::cost::calibrate`)
//! and the report of the fit.

use super::{PlanArgs, plan_of, refused};
use crate::cli::sources;
use rlc_plan::Plan;
use rlc_plan::cost::calibrate::{
    Knob, KnobStatus, MeasuredRun, OpsFit, SMALL_KIND, Scales, fit_runs, fit_speed,
};
use rlc_plan::cost::{CostParams, PlanCosts};
use rlc_plan::simulate::{self, BarKind, gantt::seconds_text};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

/// The simulated step of `plan` under `params`: its time, and the seconds of each kind of op on
/// rank 0 (the rank whose times `rlc run` writes), waits for other ranks included.
fn simulated(plan: &Plan, params: &CostParams) -> Result<(f64, BTreeMap<BarKind, f64>), String> {
    let costs = PlanCosts::new(plan, params)?;
    let timeline = simulate::simulate_step(plan, &costs, &|_| false)?;
    Ok((timeline.step_seconds, timeline.lane_seconds_by_kind(0)))
}

/// `x` to four significant digits.
fn number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let decimals = (3 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.decimals$}")
}

/// One measured run: its program's plan (the one `rlc plan` was given, or another's), where it
/// came from and what it measured.
struct Run<'a> {
    program: &'a Path,
    metrics: &'a Path,
    plan: Cow<'a, Plan>,
    measured: MeasuredRun,
}

/// The times a per-op fit compares for one run: the measured step, and the predicted step and
/// per-kind times under the parameters the fit started from.
struct Before {
    measured_step: f64,
    step: f64,
    ops: BTreeMap<BarKind, f64>,
}

/// Fits `params` to `--calibrate`'s run of `plan` and to each `--calibrate-with` run, writing
/// the report to `out`: the fitted parameters, or the exit code of a refusal (already printed).
pub(super) fn calibrate(
    args: &PlanArgs,
    plan: &Plan,
    params: CostParams,
    out: &mut String,
) -> Result<Result<CostParams, ExitCode>, String> {
    let fail = |m: String| Ok(Err(refused(args, &m)));
    let Some(metrics) = &args.calibrate else {
        return Ok(Ok(params));
    };
    let given = std::iter::once((args.path.as_path(), metrics.as_path()));
    let others = args
        .calibrate_with
        .chunks(2)
        .map(|pair| (pair[0].as_path(), pair[1].as_path()));
    let mut runs = Vec::new();
    for (program, metrics) in given.chain(others) {
        let plan = if runs.is_empty() {
            Cow::Borrowed(plan)
        } else {
            match plan_of(program, args, &mut String::new())? {
                Ok((other, _)) => Cow::Owned(other),
                Err(code) => return Ok(Err(code)),
            }
        };
        let measured = match MeasuredRun::parse(&sources::read(metrics)?) {
            Ok(r) => r,
            Err(e) => {
                return fail(format!(
                    "`{}` is not a run's metrics: {e}",
                    metrics.display()
                ));
            }
        };
        runs.push(Run {
            program,
            metrics,
            plan,
            measured,
        });
    }
    // Thread (or process) ranks on CPUs: their messages run at the machine's speed.
    let cpus = plan.clusters.iter().all(|c| c.is_cpu);
    if let Some(run) = runs
        .iter()
        .find(|r| r.plan.clusters.iter().all(|c| c.is_cpu) != cpus)
    {
        return fail(format!(
            "cannot calibrate on `{}` with `{}`: one runs on CPUs only, the other on GPUs, and \
             one set of parameters cannot describe both",
            args.path.display(),
            run.program.display()
        ));
    }
    let measured: f64 = runs.iter().map(|r| r.measured.typical_step()).sum();
    let (single, factor) = match fit_speed(&params, measured, cpus, |p| {
        runs.iter()
            .map(|r| simulated(&r.plan, p).map_or(f64::NAN, |(step, _)| step))
            .sum()
    }) {
        Ok(fitted) => fitted,
        Err(e) => return fail(format!("cannot calibrate: {e}")),
    };
    if let [run] = &runs[..] {
        let _ = writeln!(
            out,
            "calibrated on {}: a measured step of {} (median of {} steps); from the step alone the device runs at {:.3}× the model's speed",
            run.metrics.display(),
            seconds_text(run.measured.typical_step()),
            run.measured.typical_steps(),
            1.0 / factor
        );
    } else {
        for run in &runs {
            let _ = writeln!(
                out,
                "calibrated on {} (a run of {}): a measured step of {} (median of {} steps)",
                run.metrics.display(),
                run.program.display(),
                seconds_text(run.measured.typical_step()),
                run.measured.typical_steps(),
            );
        }
        let _ = writeln!(
            out,
            "from the steps alone the device runs at {:.3}× the model's speed",
            1.0 / factor
        );
    }
    let ops: Option<Vec<BTreeMap<BarKind, f64>>> =
        runs.iter().map(|r| r.measured.typical_ops()).collect();
    let Some(ops) = ops else {
        if runs.len() > 1 {
            return fail(
                "cannot calibrate on several runs without their `time/…` keys (a run from \
                 before they were written): only one run's step can be fitted"
                    .into(),
            );
        }
        let _ = writeln!(
            out,
            "  (no `time/…` keys in the file, a run from before they were written: one speed factor fitted)"
        );
        return Ok(Ok(single));
    };
    let mut befores = Vec::new();
    for run in &runs {
        match simulated(&run.plan, &params) {
            Ok((step, ops)) => befores.push(Before {
                measured_step: run.measured.typical_step(),
                step,
                ops,
            }),
            Err(e) => return fail(e),
        }
    }
    let prior = Scales::uniform(factor, cpus);
    let fit = match fit_runs(&params, &ops, prior, |p| {
        runs.iter()
            .map(|r| simulated(&r.plan, p).map(|(_, ops)| ops))
            .collect()
    }) {
        Ok(fit) => fit,
        Err(e) => return fail(format!("cannot calibrate: {e}")),
    };
    let mut fitted_steps = Vec::new();
    for run in &runs {
        match simulated(&run.plan, &fit.params) {
            Ok((step, _)) => fitted_steps.push(step),
            Err(e) => return fail(e),
        }
    }
    if let [run] = &runs[..] {
        let _ = writeln!(
            out,
            "fitted to the time of each kind of op on rank 0 (median of {} steps; slow-down relative to the parameters it started from):",
            run.measured.typical_steps()
        );
    } else {
        let _ = writeln!(
            out,
            "fitted to the time of each kind of op on rank 0 of every run (medians; slow-down relative to the parameters it started from):"
        );
    }
    let names: Vec<Option<&Path>> = if runs.len() == 1 {
        vec![None]
    } else {
        runs.iter().map(|r| Some(r.program)).collect()
    };
    out.push_str(&fit_report(&fit, &prior, &names, &befores, &fitted_steps));
    Ok(Ok(fit.params))
}

/// The calibration report of a per-op fit: each knob's slow-down and parameters, then per run
/// (headed by its program's name where `names` gives one) each kind's measured time, its
/// prediction before and after the fit and the fitted one's error, their sums, and the step.
fn fit_report(
    fit: &OpsFit,
    prior: &Scales,
    names: &[Option<&Path>],
    befores: &[Before],
    fitted_steps: &[f64],
) -> String {
    let p = &fit.params;
    let mut out = String::from("  knob       slow-down  parameters\n");
    for knob in Knob::ALL {
        let params = match knob {
            Knob::Compute => format!("compute_efficiency {}", number(p.compute_efficiency)),
            Knob::Memory => format!("bandwidth_efficiency {}", number(p.bandwidth_efficiency)),
            Knob::Layer => format!("layer_overhead {}", seconds_text(p.layer_overhead)),
            Knob::Op => format!("op_overhead {}", seconds_text(p.op_overhead)),
            Knob::Link => format!(
                "link_efficiency {}, intra_latency {}, inter_latency {}",
                number(p.link_efficiency),
                seconds_text(p.intra_latency),
                seconds_text(p.inter_latency)
            ),
        };
        // The prior leaves a knob at its start (1) or at the step's speed factor.
        let (kept, start) = if prior.get(knob) == 1.0 {
            ("kept", "its start")
        } else {
            ("the step's factor", "the step's factor")
        };
        let note = match fit.status[knob as usize] {
            KnobStatus::Fitted => String::new(),
            KnobStatus::Unused => format!(" ({kept}: the timed ops hardly depend on it)"),
            KnobStatus::AtFloor => {
                format!(" (a hundredth of {start}: the fit would take it lower)")
            }
        };
        let _ = writeln!(
            out,
            "  {:<9}  {:>9}  {params}{note}",
            knob.name(),
            number(fit.scales.get(knob))
        );
    }
    let row = |out: &mut String, name: &str, measured: f64, start: f64, fitted: f64| {
        let error = (fitted / measured - 1.0) * 100.0;
        // An error that rounds to zero reads `+0.0 %` whichever side of it the fit landed.
        let error = if error.abs() < 0.05 { 0.0 } else { error };
        let _ = writeln!(
            out,
            "  {name:<9} {:>10} {:>10} {:>10} {error:>+7.1} %",
            seconds_text(measured),
            seconds_text(start),
            seconds_text(fitted),
        );
    };
    let mut small = false;
    for (run, ((name, before), fitted_step)) in
        names.iter().zip(befores).zip(fitted_steps).enumerate()
    {
        if let Some(name) = name {
            let _ = writeln!(out, "  {}:", name.display());
        }
        let _ = writeln!(out, "  op kind     measured      start     fitted    error");
        let kinds: Vec<_> = fit.kinds.iter().filter(|k| k.run == run).collect();
        let (mut measured, mut start, mut fitted) = (0.0, 0.0, 0.0);
        for k in &kinds {
            let s = before.ops.get(&k.kind).copied().unwrap_or(0.0);
            row(&mut out, k.kind.label(), k.measured, s, k.predicted);
            measured += k.measured;
            start += s;
            fitted += k.predicted;
        }
        row(&mut out, "all ops", measured, start, fitted);
        row(
            &mut out,
            "step",
            before.measured_step,
            before.step,
            *fitted_step,
        );
        small |= kinds.iter().any(|k| k.measured < SMALL_KIND * measured);
    }
    if small {
        let _ = writeln!(
            out,
            "  (a kind under {:.0} % of all ops' time weighs in the fit as if it took that much: its own error counts little)",
            SMALL_KIND * 100.0
        );
    }
    out
}

//! `rlc plan`: the planner and the cost model. Decides `place … auto` placements, predicts the
//! step time, simulates a step (`--simulate`: a Gantt chart, utilisation per device,
//! device-hours) and fits the cost model to a measured run (`--calibrate`).

use super::{OutputArgs, build, graph, output, sources};
use rlc_plan::Plan;
use rlc_plan::cost::calibrate::{
    Knob, KnobStatus, MeasuredRun, OpsFit, SMALL_KIND, Scales, fit_ops, fit_speed,
};
use rlc_plan::cost::{CostParams, PlanCosts};
use rlc_plan::planner::apply::PlanFailure;
use rlc_plan::simulate::{self, BarKind, gantt::seconds_text};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// A program (`.rl`) or a plan file (`.json`).
    #[arg(value_name = "FILE")]
    pub path: PathBuf,
    /// Simulate a step: a timeline per device (`<name>.timeline.svg` and `.png`), utilisation,
    /// the longest ops, and time and device-hours for `--steps`.
    #[arg(long)]
    pub simulate: bool,
    /// Steps to forecast (default: the pipeline's `steps`).
    #[arg(long, value_name = "N")]
    pub steps: Option<u64>,
    /// Fit the cost model to a run of this program (its `metrics.jsonl`).
    #[arg(long, value_name = "METRICS")]
    pub calibrate: Option<PathBuf>,
    /// Cost-model parameters to use (JSON, as `--save-cost` writes them). Default: the GPU
    /// defaults, or the CPU ones when every cluster is a CPU (`docs/planner.md`).
    #[arg(long, value_name = "PARAMS")]
    pub cost: Option<PathBuf>,
    /// Where to write the cost-model parameters used (after `--calibrate`, the fitted ones).
    #[arg(long, value_name = "PARAMS")]
    pub save_cost: Option<PathBuf>,
    /// Folder for the timeline picture (default: next to FILE).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also write the plan (with the planner's layouts) to this file.
    #[arg(long, value_name = "PLAN")]
    pub emit_plan: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The plan of `path`: a plan file as it is, a program lowered after the planner decided its
/// `auto` placements (whose report is appended to `report`).
/// The cost-model parameters also come back: `--cost`'s, else the defaults for the hardware.
fn plan_of(
    path: &Path,
    args: &PlanArgs,
    report: &mut String,
) -> Result<Result<(Plan, CostParams), ExitCode>, String> {
    let given = match &args.cost {
        Some(p) => Some(read_params(p)?),
        None => None,
    };
    if path.extension().is_some_and(|e| e == "json") {
        return Ok(graph::load(path)?.map(|plan| {
            let all_cpu = plan.clusters.iter().all(|c| c.is_cpu);
            (plan, given.unwrap_or_else(|| CostParams::defaults(all_cpu)))
        }));
    }
    let (checked, files) = match build::check_file(path, &args.output)? {
        Ok(c) => c,
        Err(code) => return Ok(Err(code)),
    };
    let all_cpu = checked.program.clusters.iter().all(|c| c.is_cpu);
    let params = given.unwrap_or_else(|| CostParams::defaults(all_cpu));
    match build::plan_checked(&checked, &params) {
        Ok((plan, planned_report)) => {
            report.push_str(planned_report.as_deref().unwrap_or(""));
            Ok(Ok((plan, params)))
        }
        Err(PlanFailure::Diagnostics(mut diags)) => {
            Ok(Err(output::emit(&mut diags, &files, &args.output)))
        }
        Err(PlanFailure::Messages(messages)) => {
            for m in messages {
                eprintln!("error: `{}` cannot be planned: {m}", path.display());
            }
            Ok(Err(ExitCode::from(1)))
        }
    }
}

fn read_params(path: &Path) -> Result<CostParams, String> {
    let text = sources::read(path)?;
    CostParams::from_json(&text)
        .map_err(|e| format!("`{}` is not cost-model parameters: {e}", path.display()))
}

/// The simulated step time of `plan` under `params`.
fn step_time(plan: &Plan, params: &CostParams) -> Result<f64, String> {
    let costs = PlanCosts::new(plan, params)?;
    Ok(simulate::simulate_step(plan, &costs, &|_| false)?.step_seconds)
}

/// The simulated seconds of each kind of op on rank 0 (the rank whose times `rlc run`
/// writes), waits for other ranks included.
fn rank0_op_times(plan: &Plan, params: &CostParams) -> Result<BTreeMap<BarKind, f64>, String> {
    let costs = PlanCosts::new(plan, params)?;
    Ok(simulate::simulate_step(plan, &costs, &|_| false)?.lane_seconds_by_kind(0))
}

/// `x` to four significant digits.
fn number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let decimals = (3 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.decimals$}")
}

/// The times a per-op fit compares: the measured step, and the predicted step and per-kind
/// times under the parameters the fit started from.
struct Before {
    measured_step: f64,
    step: f64,
    ops: BTreeMap<BarKind, f64>,
}

/// The calibration report of a per-op fit: each knob's slow-down and parameters, then each
/// kind's measured time, its prediction before and after the fit and the fitted one's error,
/// their sums, and the step.
fn fit_report(fit: &OpsFit, prior: &Scales, before: &Before, predicted_step: f64) -> String {
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
    let _ = writeln!(out, "  op kind     measured      start     fitted    error");
    let row = |out: &mut String, name: &str, measured: f64, start: f64, fitted: f64| {
        let _ = writeln!(
            out,
            "  {name:<9} {:>10} {:>10} {:>10} {:>+7.1} %",
            seconds_text(measured),
            seconds_text(start),
            seconds_text(fitted),
            (fitted / measured - 1.0) * 100.0
        );
    };
    let (mut measured, mut start, mut fitted) = (0.0, 0.0, 0.0);
    for k in &fit.kinds {
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
        predicted_step,
    );
    let small = fit.kinds.iter().any(|k| k.measured < SMALL_KIND * measured);
    if small {
        let _ = writeln!(
            out,
            "  (a kind under {:.0} % of all ops' time weighs in the fit as if it took that much: its own error counts little)",
            SMALL_KIND * 100.0
        );
    }
    out
}

/// A lane's ranks for the table: long rank lists are cut, with their count.
fn lane_name(ranks: &rlc_plan::model::RankSet) -> String {
    let text = ranks.to_string();
    if text.chars().count() <= 40 {
        return text;
    }
    let cut: String = text.chars().take(32).collect();
    format!("{cut}… ({} ranks)", ranks.len())
}

pub fn run(args: &PlanArgs) -> Result<ExitCode, String> {
    let mut report = String::new();
    let (plan, mut params) = match plan_of(&args.path, args, &mut report)? {
        Ok(found) => found,
        Err(code) => return Ok(code),
    };
    let fail = |m: String| {
        eprintln!("error: `{}`: {m}", args.path.display());
        Ok(ExitCode::from(1))
    };
    if let Some(path) = &args.emit_plan {
        build::write_atomically(path, plan.to_json().as_bytes())?;
    }
    let mut out = format!(
        "plan `{}`: {} devices in {} cluster{}\n",
        plan.pipeline,
        plan.world_size,
        plan.clusters.len(),
        if plan.clusters.len() == 1 { "" } else { "s" }
    );
    out.push_str(&report);
    if let Some(metrics) = &args.calibrate {
        let text = sources::read(metrics)?;
        let run = match MeasuredRun::parse(&text) {
            Ok(r) => r,
            Err(e) => {
                return fail(format!(
                    "`{}` is not a run's metrics: {e}",
                    metrics.display()
                ));
            }
        };
        let measured = run.typical_step();
        let steps = run.typical_steps();
        // Thread (or process) ranks on CPUs: their messages run at the machine's speed.
        let cpus = plan.clusters.iter().all(|c| c.is_cpu);
        let (single, factor) = match fit_speed(&params, measured, cpus, |p| {
            step_time(&plan, p).unwrap_or(f64::NAN)
        }) {
            Ok(fitted) => fitted,
            Err(e) => return fail(format!("cannot calibrate: {e}")),
        };
        let _ = writeln!(
            out,
            "calibrated on {}: a measured step of {} (median of {steps} steps); from the step alone the device runs at {:.3}× the model's speed",
            metrics.display(),
            seconds_text(measured),
            1.0 / factor
        );
        match run.typical_ops() {
            None => {
                let _ = writeln!(
                    out,
                    "  (no `time/…` keys in the file, a run from before they were written: one speed factor fitted)"
                );
                params = single;
            }
            Some(ops) => {
                let before = match rank0_op_times(&plan, &params)
                    .and_then(|ops| Ok((ops, step_time(&plan, &params)?)))
                {
                    Ok((ops, step)) => Before {
                        measured_step: measured,
                        step,
                        ops,
                    },
                    Err(e) => return fail(e),
                };
                let prior = Scales::uniform(factor, cpus);
                let fit = match fit_ops(&params, &ops, prior, |p| rank0_op_times(&plan, p)) {
                    Ok(fit) => fit,
                    Err(e) => return fail(format!("cannot calibrate: {e}")),
                };
                let predicted_step = match step_time(&plan, &fit.params) {
                    Ok(t) => t,
                    Err(e) => return fail(e),
                };
                let _ = writeln!(
                    out,
                    "fitted to the time of each kind of op on rank 0 (median of {steps} steps; slow-down relative to the parameters it started from):"
                );
                out.push_str(&fit_report(&fit, &prior, &before, predicted_step));
                params = fit.params;
            }
        }
    }
    if let Some(path) = &args.save_cost {
        build::write_atomically(path, params.to_json().as_bytes())?;
    }
    let costs = match PlanCosts::new(&plan, &params) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let timeline = match simulate::simulate_step(&plan, &costs, &|_| false) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let bound = if timeline.lower_bound {
        " (at least: a batch, prompt length or value size the program does not fix counts as 0)"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "predicted step: {}{bound}",
        seconds_text(timeline.step_seconds)
    );
    if args.simulate {
        let names: Vec<String> = timeline.lanes.iter().map(|l| lane_name(&l.ranks)).collect();
        let width = names
            .iter()
            .map(|n| n.chars().count())
            .max()
            .unwrap_or(5)
            .max(5);
        let _ = writeln!(out, "  {:width$}  busy", "ranks");
        for (name, u) in names.iter().zip(timeline.utilisation()) {
            let _ = writeln!(out, "  {name:width$}  {:>3.0} %", u * 100.0);
        }
        let _ = writeln!(
            out,
            "  all devices: {:.0} % busy",
            timeline.mean_utilisation() * 100.0
        );
        let mut longest: Vec<(f64, &str)> = plan
            .ops
            .iter()
            .map(|o| (costs.op_seconds[o.id as usize], o.label.as_str()))
            .collect();
        longest.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        let _ = writeln!(out, "  longest ops:");
        for (t, label) in longest.iter().take(5) {
            let _ = writeln!(out, "    {:>10}  {label}", seconds_text(*t));
        }
        let steps = args.steps.or(plan.steps).unwrap_or(1);
        match simulate::forecast(&plan, &costs, steps) {
            Ok(f) => {
                let _ = writeln!(
                    out,
                    "{} steps: {}, {:.1} device-hours",
                    f.steps,
                    seconds_text(f.seconds),
                    f.device_hours
                );
            }
            Err(e) => return fail(e),
        }
        let stem = args
            .path
            .file_stem()
            .map_or_else(|| "plan".into(), |s| s.to_string_lossy().into_owned());
        let dir = match &args.out {
            Some(d) => d.clone(),
            None => args
                .path
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
        let title = format!(
            "{}: one step, {} ({} devices)",
            plan.pipeline,
            seconds_text(timeline.step_seconds),
            plan.world_size
        );
        let svg_path = dir.join(format!("{stem}.timeline.svg"));
        build::write_atomically(
            &svg_path,
            simulate::gantt::svg(&timeline, &title).as_bytes(),
        )?;
        let png_path = dir.join(format!("{stem}.timeline.png"));
        let png = simulate::gantt::png(&timeline, &title)
            .map_err(|e| format!("cannot draw the timeline: {e}"))?;
        build::write_atomically(&png_path, &png)?;
        let _ = writeln!(
            out,
            "timeline: {} and {}",
            svg_path.display(),
            png_path.display()
        );
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

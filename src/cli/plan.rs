//! `rlc plan`: the planner and the cost model. Decides `place … auto` placements, predicts the
//! step time, simulates a step (`--simulate`: a Gantt chart, utilisation per device,
//! device-hours) and fits the cost model to a measured run (`--calibrate`).

mod calibrate;

use super::{OutputArgs, build, graph, output, sources};
use rlc_plan::Plan;
use rlc_plan::cost::{CostParams, PlanCosts};
use rlc_plan::planner::apply::PlanFailure;
use rlc_plan::simulate::{self, gantt::seconds_text};
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
    /// With `--calibrate`, fit to a run of another program too (repeatable): one set of
    /// parameters for all the runs, each run's step held. Runs of other shapes pin what one
    /// run cannot tell apart (compute from per-layer overhead, links from training).
    #[arg(
        long,
        num_args = 2,
        value_names = ["PROGRAM", "METRICS"],
        requires = "calibrate",
        action = clap::ArgAction::Append
    )]
    pub calibrate_with: Vec<PathBuf>,
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

/// Prints why `rlc plan` on `args.path` stops: exit code 1.
fn refused(args: &PlanArgs, message: &str) -> ExitCode {
    eprintln!("error: `{}`: {message}", args.path.display());
    ExitCode::from(1)
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
    let fail = |m: String| Ok(refused(args, &m));
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
    if args.calibrate.is_some() {
        params = match calibrate::calibrate(args, &plan, params, &mut out)? {
            Ok(fitted) => fitted,
            Err(code) => return Ok(code),
        };
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

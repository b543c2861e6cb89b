//! `rlc build`: check a program and, when it has no errors, lower it to a plan file.

use super::{OutputArgs, output, sources};
use rlc_diagnostics::Files;
use rlc_plan::Plan;
use rlc_plan::cost::CostParams;
use rlc_plan::model::OpKind;
use rlc_plan::planner::apply::PlanFailure;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Checks and lowers `path`. `Ok(Err(code))`: diagnostics (or lowering errors) were printed and
/// the command exits with `code`; `Err`: an I/O error.
pub(super) fn compile(path: &Path, args: &OutputArgs) -> Result<Result<Plan, ExitCode>, String> {
    Ok(compile_checked(path, args)?.map(|(plan, _)| plan))
}

/// Checks `path`; diagnostics are printed, and with errors `Ok(Err(code))` is the exit code.
pub(crate) fn check_file(
    path: &Path,
    args: &OutputArgs,
) -> Result<Result<(rlc_check::Checked, Files), ExitCode>, String> {
    let text = sources::read(path)?;
    let mut files = Files::new();
    let checked = rlc_check::check(
        &sources::FileLoader,
        &mut files,
        &sources::display_name(path),
        text,
    );
    let mut diagnostics = checked.diagnostics.clone();
    if checked.has_errors() {
        return Ok(Err(output::emit(&mut diagnostics, &files, args)));
    }
    if !diagnostics.is_empty() {
        // Warnings: shown, and the work goes on.
        output::emit(&mut diagnostics, &files, args);
    }
    Ok(Ok((checked, files)))
}

/// [`compile`], also returning the checked program (the runtime evaluates its `fn`s).
pub(crate) fn compile_checked(
    path: &Path,
    args: &OutputArgs,
) -> Result<Result<(Plan, rlc_check::Checked), ExitCode>, String> {
    let (checked, files) = match check_file(path, args)? {
        Ok(checked) => checked,
        Err(code) => return Ok(Err(code)),
    };
    let all_cpu = checked.program.clusters.iter().all(|c| c.is_cpu);
    match plan_checked(&checked, &CostParams::defaults(all_cpu)) {
        Err(PlanFailure::Diagnostics(mut diags)) => Ok(Err(output::emit(&mut diags, &files, args))),
        Err(PlanFailure::Messages(errors)) => {
            for e in errors {
                eprintln!("error: `{}` cannot be lowered: {e}", path.display());
            }
            Ok(Err(ExitCode::from(1)))
        }
        Ok((mut plan, _)) => {
            plan.sources = Some(embedded_sources(&checked, &files));
            let problems = rlc_plan::validate(&plan);
            if let Some(first) = problems.first() {
                return Err(format!(
                    "internal error: the plan of `{}` is not valid: {first}",
                    path.display()
                ));
            }
            Ok(Ok((plan, checked)))
        }
    }
}

/// The plan of a checked program: its `place … auto` placements decided by the planner under
/// the cost model `params` (`rlc build` and `rlc run` take the defaults for the program's
/// hardware), the others lowered as written. With auto placements, also the planner's report.
pub(super) fn plan_checked(
    checked: &rlc_check::Checked,
    params: &CostParams,
) -> Result<(Plan, Option<String>), PlanFailure> {
    match rlc_plan::planner::plan_auto(checked, params)? {
        Some(planned) => {
            let report = rlc_plan::planner::report::describe(&planned);
            Ok((planned.plan, Some(report)))
        }
        None => rlc_plan::lower::lower(checked)
            .map(|plan| (plan, None))
            .map_err(rlc_plan::lower::failure),
    }
}

/// The program's own files (not std, which every `rlc` carries), for `rlc run plan.json`.
fn embedded_sources(checked: &rlc_check::Checked, files: &Files) -> rlc_plan::model::Sources {
    let user = || checked.modules.modules.iter().filter(|m| !m.is_std);
    rlc_plan::model::Sources {
        root: user()
            .next()
            .map_or_else(String::new, |m| files.get(m.file).name.clone()),
        files: user()
            .map(|m| {
                let file = files.get(m.file);
                (file.name.clone(), file.text.clone())
            })
            .collect(),
    }
}

/// The default plan path: next to the source, `pipeline.rl` → `pipeline.plan.json`.
fn default_output(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(|| "plan".into(), |s| s.to_string_lossy().into_owned());
    path.with_file_name(format!("{stem}.plan.json"))
}

pub fn run(
    path: &Path,
    out: Option<&Path>,
    forward_logprobs: bool,
    args: &OutputArgs,
) -> Result<ExitCode, String> {
    let mut plan = match compile(path, args)? {
        Ok(plan) => plan,
        Err(code) => return Ok(code),
    };
    if forward_logprobs {
        rlc_plan::lower::forward_logprobs(&mut plan);
    }
    let json = plan.to_json();
    let target = out.map_or_else(|| default_output(path), Path::to_path_buf);
    if target.as_os_str() == "-" {
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(json.as_bytes())
            .map_err(|e| format!("cannot write the plan: {e}"))?;
        return Ok(ExitCode::SUCCESS);
    }
    write_atomically(&target, json.as_bytes())?;
    let transfers = plan
        .ops
        .iter()
        .filter(|o| matches!(o.kind, OpKind::Transfer { .. }))
        .count();
    let syncs = plan
        .ops
        .iter()
        .filter(|o| matches!(o.kind, OpKind::WeightSync { .. }))
        .count();
    eprintln!(
        "wrote {}: {} ranks, {} role instances, {} ops ({} transfers, {} weight syncs)",
        target.display(),
        plan.world_size,
        plan.instances.len(),
        plan.ops.len(),
        transfers,
        syncs
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to a temporary file beside `target`, then renames it over `target`: a reader
/// sees the old file or the new one, never half of one.
pub(super) fn write_atomically(target: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .map_or_else(|| "plan".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, target)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write `{}`: {e}", target.display())
    })
}

//! Every explain page's examples do what the page says: the `## Wrong` program produces the
//! page's code and the `## Fixed` program produces no error. Examples that are also UI cases
//! (`tests/ui/**`, compared without their `//~` annotations) are checked through their
//! annotations, which `tests/ui.rs` verifies; the others are checked here, in memory. A package
//! manifest example (`rl.toml` of a case in `tests/ui/packages/`) stands for its case's folder:
//! the annotations of its program and manifest (`#~ E0207`).

use rlc_diagnostics::{CODES, Files, Severity};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The text without `//~` (or, in a manifest, `#~`) annotations and trailing white space, for
/// comparison.
fn normalize(src: &str) -> String {
    src.lines()
        .map(|l| marker(l).map_or(l, |(i, _)| &l[..i]).trim_end())
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

fn ui_cases() -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut BTreeMap<String, PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rl") || path.ends_with("rl.toml") {
                out.insert(normalize(&std::fs::read_to_string(&path).unwrap()), path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&root().join("tests/ui"), &mut out);
    out
}

/// Where a line's annotation starts, and its marker's length.
fn marker(line: &str) -> Option<(usize, usize)> {
    line.find("//~")
        .map(|i| (i, 3))
        .or_else(|| line.find("#~").map(|i| (i, 2)))
}

/// Codes a UI case's annotations expect; for a manifest, those of its folder's program and
/// manifest.
fn annotated(path: &Path) -> Vec<String> {
    if path.ends_with("rl.toml") {
        let dir = path.parent().unwrap();
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_file() && (p.ends_with("rl.toml") || p.extension().is_some_and(|e| e == "rl"))
            })
            .collect();
        files.sort();
        return files.iter().flat_map(|f| annotations(f)).collect();
    }
    annotations(path)
}

fn annotations(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| marker(l).map(|(i, n)| l[i + n..].trim_start_matches('^').to_string()))
        .flat_map(|rest| {
            rest.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Serves imports relative to `tests/ui/check`, where the multi-file examples' modules live.
struct Disk;

impl rlc_check::SourceLoader for Disk {
    fn read(&self, path: &str) -> Result<String, String> {
        std::fs::read_to_string(root().join(path)).map_err(|e| e.to_string())
    }
}

/// `(code, severity)` of every diagnostic of `src`, checked as `tests/ui/check/explain.rl`.
fn check(src: &str) -> Vec<(String, Severity)> {
    let mut files = Files::new();
    let checked = rlc_check::check(
        &Disk,
        &mut files,
        "tests/ui/check/explain.rl",
        src.to_string(),
    );
    let mut out: Vec<(String, Severity)> = checked
        .diagnostics
        .iter()
        .map(|d| (d.code.as_str().to_string(), d.severity))
        .collect();
    // The planner's codes (E09xx) and lowering's (E0314) come from `rlc plan` and `rlc build`,
    // after a clean check.
    if !checked.has_errors() {
        let failure = match rlc_plan::planner::plan_auto(&checked, &Default::default()) {
            Err(failure) => Some(failure),
            Ok(Some(_)) => None,
            Ok(None) => rlc_plan::lower::lower(&checked)
                .err()
                .map(rlc_plan::lower::failure),
        };
        if let Some(rlc_plan::planner::apply::PlanFailure::Diagnostics(diags)) = failure {
            out.extend(
                diags
                    .iter()
                    .map(|d| (d.code.as_str().to_string(), d.severity)),
            );
        }
    }
    out
}

#[test]
fn wrong_examples_produce_their_code_and_fixed_examples_are_clean() {
    let cases = ui_cases();
    let mut failures = Vec::new();
    for info in CODES {
        let (Some(wrong), Some(fixed)) = (info.wrong_example(), info.fixed_example()) else {
            failures.push(format!(
                "{}: page lacks a Wrong or a Fixed example",
                info.id
            ));
            continue;
        };
        let wrong_codes = match cases.get(&normalize(wrong)) {
            Some(path) => annotated(path),
            None => check(wrong).into_iter().map(|(c, _)| c).collect(),
        };
        if !wrong_codes.iter().any(|c| c == info.id) {
            failures.push(format!(
                "{}: the Wrong example gives {wrong_codes:?}",
                info.id
            ));
        }
        let fixed_errors: Vec<String> = match cases.get(&normalize(fixed)) {
            Some(path) => annotated(path)
                .into_iter()
                .filter(|c| c.starts_with('E'))
                .collect(),
            None => check(fixed)
                .into_iter()
                .filter(|(_, s)| *s == Severity::Error)
                .map(|(c, _)| c)
                .collect(),
        };
        if !fixed_errors.is_empty() {
            failures.push(format!(
                "{}: the Fixed example gives errors {fixed_errors:?}",
                info.id
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

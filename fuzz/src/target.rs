//! What one input exercises, as the CLI would: a program is parsed, formatted (and the result
//! formatted again), checked with everything it imports, its diagnostics rendered (human and
//! JSON), and a clean program lowered to a plan (the planner decides `auto` placements), which
//! is written and loaded back. A plan file is loaded (deserialised and validated) and, when
//! valid, costed and simulated as `rlc plan` does. An LSP stream is read frame by frame by
//! `rlc lsp`'s own reader.
//!
//! Every function here returns an outcome; a panic is caught by the caller.

use rlc_diagnostics::{Diagnostic, FileId, Files, render};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

/// Which target an input is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Program = 0,
    Plan = 1,
    /// Fails on purpose as its text says (`panic`, `hang`, `memory`, `stack`): the harness's
    /// own test that each kind of failure is caught and classified.
    Probe = 2,
    /// A byte stream a client sends `rlc lsp`, read by the server's wire reader.
    Lsp = 3,
}

impl Kind {
    pub fn from_u8(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Program),
            1 => Some(Kind::Plan),
            2 => Some(Kind::Probe),
            3 => Some(Kind::Lsp),
            _ => None,
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Kind::Program => "rl",
            Kind::Plan => "json",
            Kind::Probe => "probe",
            Kind::Lsp => "lsp",
        }
    }
}

/// Serves the corpus's files to `import "./…"`, from memory (no IO while fuzzing).
pub struct Loader<'a>(pub &'a BTreeMap<String, String>);

impl rlc_check::SourceLoader for Loader<'_> {
    fn read(&self, path: &str) -> Result<String, String> {
        self.0
            .get(path)
            .cloned()
            .ok_or_else(|| "not found".to_string())
    }
}

/// How far an input got and which codes it produced: inputs with an outcome not seen before
/// join the corpus (a cheap stand-in for coverage).
pub fn run(kind: Kind, path: &str, text: &str, files: &BTreeMap<String, String>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match kind {
        Kind::Program => program(path, text, files, &mut h),
        Kind::Plan => plan(text, &mut h),
        Kind::Probe => probe(text.trim()),
        Kind::Lsp => crate::lsp_wire::read_all(text.as_bytes(), &mut h),
    }
    h.finish()
}

fn program(path: &str, text: &str, files: &BTreeMap<String, String>, h: &mut impl Hasher) {
    // fmt
    match rlc_syntax::format::format_source(FileId(0), text) {
        Ok(formatted) => {
            "formatted".hash(h);
            // The formatter's output is a program it leaves as it is.
            if let Ok(again) = rlc_syntax::format::format_source(FileId(0), &formatted) {
                (again == formatted).hash(h);
            } else {
                "formatted output does not parse".hash(h);
            }
        }
        Err(diags) => codes(&diags, h),
    }
    // check
    let mut all = Files::new();
    let checked = rlc_check::check(&Loader(files), &mut all, path, text.to_string());
    codes(&checked.diagnostics, h);
    let mut diags = checked.diagnostics.clone();
    diags.sort_by_key(Diagnostic::sort_key);
    let human = render::human(
        &diags,
        &all,
        &render::HumanOptions {
            color: false,
            width: 100,
        },
    );
    let _ = render::summary(&diags);
    let json = render::json(&diags, &all);
    (human.is_empty(), json.is_empty()).hash(h);
    if checked.has_errors() {
        return;
    }
    // build
    let all_cpu = checked.program.clusters.iter().all(|c| c.is_cpu);
    let params = rlc_plan::cost::CostParams::defaults(all_cpu);
    let plan = match rlc_plan::planner::plan_auto(&checked, &params) {
        Ok(Some(planned)) => {
            let _ = rlc_plan::planner::report::describe(&planned);
            planned.plan
        }
        Ok(None) => match rlc_plan::lower::lower(&checked) {
            Ok(plan) => plan,
            Err(errors) => {
                ("lower error", errors.len()).hash(h);
                return;
            }
        },
        Err(rlc_plan::planner::apply::PlanFailure::Diagnostics(d)) => {
            codes(&d, h);
            let _ = render::json(&d, &all);
            return;
        }
        Err(rlc_plan::planner::apply::PlanFailure::Messages(m)) => {
            ("plan messages", m.len()).hash(h);
            return;
        }
    };
    "built".hash(h);
    // What `rlc build` writes, `rlc run plan.json` loads: a built plan must load.
    let json = plan.to_json();
    if let Err(errors) = rlc_plan::load(&json) {
        panic!(
            "a plan built from a checked program does not load: {}",
            errors.first().map(ToString::to_string).unwrap_or_default()
        );
    }
    plan_costs(&plan, h);
}

fn plan(text: &str, h: &mut impl Hasher) {
    match rlc_plan::load(text) {
        Ok(plan) => {
            "loaded".hash(h);
            let _ = plan.to_json();
            plan_costs(&plan, h);
        }
        Err(errors) => {
            for e in errors.iter().take(4) {
                e.code.as_str().hash(h);
                let _ = e.to_string();
            }
        }
    }
}

/// `rlc plan` on a plan: its costs, one simulated step and a forecast.
fn plan_costs(plan: &rlc_plan::Plan, h: &mut impl Hasher) {
    let all_cpu = plan.clusters.iter().all(|c| c.is_cpu);
    let params = rlc_plan::cost::CostParams::defaults(all_cpu);
    let Ok(costs) = rlc_plan::cost::PlanCosts::new(plan, &params) else {
        "not costed".hash(h);
        return;
    };
    match rlc_plan::simulate::simulate_step(plan, &costs, &|_| false) {
        Ok(t) => {
            let _ = t.utilisation();
            let _ = rlc_plan::simulate::forecast(plan, &costs, plan.steps.unwrap_or(1));
            "simulated".hash(h);
        }
        Err(_) => "not simulated".hash(h),
    }
}

fn codes(diags: &[Diagnostic], h: &mut impl Hasher) {
    let mut c: Vec<&str> = diags.iter().map(|d| d.code.as_str()).collect();
    c.sort_unstable();
    c.dedup();
    c.hash(h);
}

fn probe(what: &str) {
    match what {
        "panic" => panic!("probe: a panic"),
        "hang" => {
            let mut n = 0u64;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        "memory" => {
            let mut held: Vec<Vec<u8>> = Vec::new();
            loop {
                held.push(vec![1; 1 << 24]);
                std::hint::black_box(&held);
            }
        }
        "stack" => {
            // Unbounded on purpose: the probe of a stack overflow.
            fn down(n: u64) -> u64 {
                let pad = std::hint::black_box([n; 64]);
                if std::hint::black_box(n) == u64::MAX {
                    return 0;
                }
                down(n + 1) + pad[3]
            }
            std::hint::black_box(down(0));
        }
        _ => {}
    }
}

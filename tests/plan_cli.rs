//! `rlc plan` through the binary: a simulation writes its timeline (the same bytes twice), the
//! planner's report for `place auto`, E0901 with exit 1, calibration on one run and on several,
//! and bad inputs refused without a panic.

mod common;

use common::{predicted_step, refused, rlc, rlc_stdout, scratch};
use std::path::PathBuf;

#[test]
fn simulate_writes_the_same_timeline_twice() {
    let dir = scratch("simulate");
    let mut pictures = Vec::new();
    for run in ["one", "two"] {
        let out_dir = dir.join(run);
        let stdout = rlc_stdout(&[
            "plan",
            "examples/ppo_70b_split.rl",
            "--simulate",
            "--steps",
            "200",
            "--out",
            out_dir.to_str().unwrap(),
        ]);
        assert!(stdout.contains("predicted step: "), "{stdout}");
        assert!(stdout.contains("200 steps: "), "{stdout}");
        assert!(stdout.contains("device-hours"), "{stdout}");
        let svg = std::fs::read(out_dir.join("ppo_70b_split.timeline.svg")).unwrap();
        let png = std::fs::read(out_dir.join("ppo_70b_split.timeline.png")).unwrap();
        assert!(svg.starts_with(b"<svg"));
        assert!(png.starts_with(b"\x89PNG"));
        let report: Vec<String> = stdout
            .lines()
            .filter(|l| !l.starts_with("timeline: "))
            .map(str::to_string)
            .collect();
        pictures.push((svg, png, report));
    }
    assert!(pictures[0].0 == pictures[1].0, "the SVGs differ");
    assert!(pictures[0].1 == pictures[1].1, "the PNGs differ");
    assert_eq!(pictures[0].2, pictures[1].2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn place_auto_reports_the_chosen_placement() {
    let dir = scratch("auto");
    let text_in = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/colocated_grpo.rl"),
    )
    .unwrap();
    let auto: String = text_in
        .lines()
        .filter(|l| !l.starts_with("place "))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("fn correct", "place auto\n\nfn correct");
    let path = dir.join("auto.rl");
    std::fs::write(&path, auto).unwrap();
    let plan_path = dir.join("auto.plan.json");
    let stdout = rlc_stdout(&[
        "plan",
        path.to_str().unwrap(),
        "--emit-plan",
        plan_path.to_str().unwrap(),
    ]);
    assert!(
        stdout.contains("placement chosen by the planner"),
        "{stdout}"
    );
    assert!(stdout.contains("actor.train"), "{stdout}");
    assert!(
        stdout.contains("optimal among node-aligned pools"),
        "{stdout}"
    );
    // The emitted plan is a valid plan file that simulates as it is.
    rlc_stdout(&["plan", plan_path.to_str().unwrap()]);
    // `rlc build` plans the same way: the same instances, with the planner's layouts.
    let built_path = dir.join("auto.built.json");
    rlc_stdout(&[
        "build",
        path.to_str().unwrap(),
        "-o",
        built_path.to_str().unwrap(),
    ]);
    let instances = |p: &PathBuf| {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        v["instances"].clone()
    };
    let planned = instances(&plan_path);
    assert_eq!(instances(&built_path), planned);
    // Not the `dp` over every device that lowering alone would give an auto placement.
    let sharded = |i: &serde_json::Value| {
        ["fsdp", "tp", "pp"]
            .iter()
            .any(|axis| i["layout"][axis].as_u64().unwrap_or(1) > 1)
    };
    assert!(planned.as_array().unwrap().iter().any(sharded), "{planned}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_feasible_layout_is_e0901_and_exit_1() {
    let page = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("compiler/diagnostics/explain/E0901.md"),
    )
    .unwrap();
    let wrong = page
        .split("## Wrong")
        .nth(1)
        .and_then(|s| s.split("```rl\n").nth(1))
        .and_then(|s| s.split("```").next())
        .unwrap();
    let dir = scratch("e0901");
    let path = dir.join("wrong.rl");
    std::fs::write(&path, wrong).unwrap();
    let out = rlc(&["plan", path.to_str().unwrap(), "--color", "never"]);
    let said = refused(&out, 1);
    assert!(said.contains("E0901"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `metrics.jsonl` of five steps: a slow first step, then `seconds` each,
/// with the `time/…` fields of `ops` when there are any.
fn metrics_file(path: &std::path::Path, seconds: f64, ops: &[(&str, f64)]) {
    let mut text = String::new();
    for step in 0..5 {
        let mut line = format!(
            "{{\"step\":{step},\"reward\":0.1,\"tokens\":900,\"seconds\":{}",
            if step == 0 { 3.0 * seconds } else { seconds }
        );
        for (kind, t) in ops {
            line.push_str(&format!(",\"time/{kind}\":{t}"));
        }
        text.push_str(&line);
        text.push_str("}\n");
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn calibration_fits_per_op_times_and_still_reads_step_times_alone() {
    let dir = scratch("calibrate");
    // A file from before the per-op times: one speed factor, which gives the measured step.
    let old = dir.join("old.jsonl");
    metrics_file(&old, 0.2, &[]);
    let stdout = rlc_stdout(&[
        "plan",
        "examples/grpo_digits.rl",
        "--calibrate",
        old.to_str().unwrap(),
    ]);
    assert!(stdout.contains("one speed factor fitted"), "{stdout}");
    assert!(stdout.contains("predicted step: 200.00 ms"), "{stdout}");
    assert!(!stdout.contains("op kind"), "{stdout}");
    // With them: each knob and each kind measured, before and after the fit; the kinds' total
    // as measured; the same text twice.
    let new = dir.join("new.jsonl");
    let ops = [
        ("generate", 0.03),
        ("forward", 0.05),
        ("train", 0.1),
        ("kernel", 0.015),
        ("transfer", 0.00001),
        ("other", 0.0001),
    ];
    metrics_file(&new, 0.2, &ops);
    let mut reports = Vec::new();
    for _ in 0..2 {
        reports.push(rlc_stdout(&[
            "plan",
            "examples/grpo_digits.rl",
            "--calibrate",
            new.to_str().unwrap(),
        ]));
    }
    assert_eq!(reports[0], reports[1]);
    let report = &reports[0];
    for line in [
        "fitted to the time of each kind of op on rank 0 (median of 4 steps",
        "  knob       slow-down  parameters",
        "  op kind     measured      start     fitted    error",
    ] {
        assert!(report.contains(line), "{line:?} in {report}");
    }
    for (kind, _) in ops {
        assert!(
            report.lines().any(|l| l.starts_with(&format!("  {kind} "))),
            "{kind} in {report}"
        );
    }
    let all_ops = report
        .lines()
        .find(|l| l.starts_with("  all ops"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(all_ops.starts_with("  all ops    195.11 ms"), "{all_ops}");
    assert!(all_ops.ends_with("195.11 ms    +0.0 %"), "{all_ops}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn calibration_on_several_runs_fits_one_model_and_holds_each_step() {
    let dir = scratch("calibrate-with");
    let (grpo, ppo) = ("examples/grpo_digits.rl", "examples/ppo_critic.rl");
    let grpo_metrics = dir.join("grpo.jsonl");
    metrics_file(
        &grpo_metrics,
        0.2,
        &[
            ("generate", 0.03),
            ("forward", 0.05),
            ("train", 0.1),
            ("kernel", 0.015),
            ("other", 0.0001),
        ],
    );
    let ppo_metrics = dir.join("ppo.jsonl");
    metrics_file(
        &ppo_metrics,
        0.15,
        &[
            ("generate", 0.02),
            ("forward", 0.012),
            ("train", 0.11),
            ("kernel", 0.003),
            ("transfer", 0.002),
            ("other", 0.0001),
        ],
    );
    let cost = dir.join("joint.json");
    let joint = [
        "plan",
        grpo,
        "--calibrate",
        grpo_metrics.to_str().unwrap(),
        "--calibrate-with",
        ppo,
        ppo_metrics.to_str().unwrap(),
        "--save-cost",
        cost.to_str().unwrap(),
    ];
    let reports: Vec<String> = (0..2).map(|_| rlc_stdout(&joint)).collect();
    assert_eq!(reports[0], reports[1]);
    let report = &reports[0];
    for line in [
        format!("(a run of {ppo}): a measured step of 150.00 ms (median of 4 steps)"),
        "fitted to the time of each kind of op on rank 0 of every run".to_string(),
        format!("  {grpo}:\n  op kind     measured      start     fitted    error\n"),
        format!("  {ppo}:\n  op kind     measured      start     fitted    error\n"),
    ] {
        assert!(report.contains(&line), "{line:?} in {report}");
    }
    // Each run's kinds together as measured, and each program's step under the saved
    // parameters as the report's fitted step.
    let totals: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("  all ops"))
        .collect();
    assert_eq!(totals.len(), 2, "{report}");
    assert!(
        totals
            .iter()
            .all(|l| l.ends_with(" +0.0 %") || l.ends_with(" -0.0 %")),
        "{report}"
    );
    let fitted_steps: Vec<String> = report
        .lines()
        .filter(|l| l.starts_with("  step "))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            format!("{} {}", words[5], words[6])
        })
        .collect();
    for (program, fitted) in [grpo, ppo].into_iter().zip(&fitted_steps) {
        let stdout = rlc_stdout(&["plan", program, "--cost", cost.to_str().unwrap()]);
        assert_eq!(predicted_step(&stdout), fitted, "{program}");
    }
    assert_eq!(predicted_step(report), fitted_steps[0]);

    // Refused: another run without per-op times, a GPU program beside a CPU one, and
    // `--calibrate-with` alone.
    let old = dir.join("old.jsonl");
    metrics_file(&old, 0.15, &[]);
    let out = rlc(&[
        "plan",
        grpo,
        "--calibrate",
        grpo_metrics.to_str().unwrap(),
        "--calibrate-with",
        ppo,
        old.to_str().unwrap(),
    ]);
    let said = refused(&out, 1);
    assert!(said.contains("without their `time/…` keys"), "{said}");
    let out = rlc(&[
        "plan",
        grpo,
        "--calibrate",
        grpo_metrics.to_str().unwrap(),
        "--calibrate-with",
        "examples/ppo_70b_split.rl",
        ppo_metrics.to_str().unwrap(),
    ]);
    let said = refused(&out, 1);
    assert!(said.contains("one runs on CPUs only"), "{said}");
    let out = rlc(&["plan", grpo, "--calibrate-with", ppo, old.to_str().unwrap()]);
    refused(&out, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_inputs_are_refused_without_a_panic() {
    let dir = scratch("bad");
    let cost = dir.join("cost.json");
    std::fs::write(&cost, "{\"compute_efficiency\": -1}").unwrap();
    let out = rlc(&[
        "plan",
        "examples/grpo_digits.rl",
        "--cost",
        cost.to_str().unwrap(),
    ]);
    refused(&out, 2);
    let metrics = dir.join("metrics.jsonl");
    std::fs::write(&metrics, "not json\n").unwrap();
    let out = rlc(&[
        "plan",
        "examples/grpo_digits.rl",
        "--calibrate",
        metrics.to_str().unwrap(),
    ]);
    let said = refused(&out, 1);
    assert!(said.contains("not a run's metrics"), "{said}");
    let out = rlc(&["plan", "no/such/file.rl"]);
    refused(&out, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A hand-edited plan file whose fields would change or void the job is refused by the loader
/// `rlc plan`, `rlc graph` and `rlc run` share: exit 1, the code, the field, the path.
#[test]
fn hand_edited_plans_are_refused_with_the_field() {
    let dir = scratch("edited");
    let built = dir.join("grpo.plan.json");
    rlc_stdout(&[
        "build",
        "examples/grpo_digits.rl",
        "-o",
        built.to_str().unwrap(),
    ]);
    // The plan as built loads.
    rlc_stdout(&["plan", built.to_str().unwrap()]);
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&built).unwrap()).unwrap();
    let update = plan["ops"]
        .as_array()
        .unwrap()
        .iter()
        .position(|o| o["kind"]["op"] == "update")
        .unwrap();
    // (file name, JSON pointer of the field, its new value, the code, what the error says)
    let epochs = format!("/ops/{update}/kind/epochs");
    let cases = [
        (
            "epochs",
            epochs.as_str(),
            0.into(),
            "P0007",
            "`epochs` is 0",
        ),
        ("count", "/ops/0/kind/count", 8.into(), "P0008", "`count` 8"),
        (
            "edges",
            "/edges",
            serde_json::json!([]),
            "P0009",
            "`edges` has no edge",
        ),
        (
            "layers",
            "/roles/0/arch/layers",
            1_000_000_000u64.into(),
            "P0010",
            "`layers` 1000000000",
        ),
        (
            "hidden",
            "/roles/0/arch/hidden",
            (1u64 << 62).into(),
            "P0010",
            "`hidden` 4611686018427387904",
        ),
    ];
    for (name, field, value, code, said) in cases {
        let mut json = plan.clone();
        *json.pointer_mut(field).expect("the field exists") = value;
        let path = dir.join(format!("{name}.plan.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
        for command in ["plan", "graph"] {
            let out = rlc(&[command, path.to_str().unwrap()]);
            let text = refused(&out, 1);
            assert!(
                text.contains(&format!("error[{code}]")) && text.contains(said),
                "rlc {command} on `{name}`: {text}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The plan codes of meaning have their `rlc explain` page and are listed.
#[test]
fn plan_meaning_codes_explain_themselves() {
    let list = rlc_stdout(&["explain", "--list"]);
    for (code, title) in [
        ("P0007", "plan setting out of range"),
        ("P0008", "plan sizes that disagree"),
        ("P0009", "missing data edge in a plan"),
        ("P0010", "plan too large for its cluster"),
    ] {
        assert!(list.contains(code) && list.contains(title), "{list}");
        let page = rlc_stdout(&["explain", &code.to_ascii_lowercase()]);
        assert!(
            page.starts_with(&format!("# {code}: {title}\n\n")),
            "{page}"
        );
        assert!(page.contains("rlc build"), "{page}");
    }
}

/// `place auto` for a job that generates a step ahead: the candidates that colocate generation
/// and training are refused (E0511), and the planner takes the split the overlap makes fastest.
#[test]
fn place_auto_splits_a_job_that_generates_ahead() {
    let dir = scratch("auto-async");
    let text = std::fs::read_to_string("examples/grpo_async.rl").unwrap();
    let placed = "place policy.generate on local[0..1] with dp(1)\n\
                  place reference       on local[0..1] with dp(1)\n\
                  place policy.train    on local[1..2] with dp(1)\n";
    assert!(text.contains(placed));
    let source = dir.join("auto.rl");
    std::fs::write(&source, text.replace(placed, "place auto on local\n")).unwrap();
    let stdout = rlc_stdout(&["plan", source.to_str().unwrap()]);
    let line = |phase: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(phase))
            .unwrap_or_else(|| panic!("no {phase}: {stdout}"))
            .to_string()
    };
    let (generate, train) = (line("policy.generate "), line("policy.train "));
    assert!(generate.contains("devices 0..1"), "{stdout}");
    assert!(train.contains("devices 1..2"), "{stdout}");
    assert!(stdout.contains("refused by the checker"), "{stdout}");
}

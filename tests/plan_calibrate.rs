//! Calibration end to end: the two CPU examples run with `rlc run`, `rlc plan --calibrate`
//! fits the cost model to the time of each kind of op half of a run's `metrics.jsonl` holds, and
//! the fitted model predicts
//! - the run's other steps: the step within 25 %, the share of each kind of op that takes a fifth
//!   of the step within 40 % (a twentieth of it: within a factor of four);
//! - the other example's step, relative to the first's measured in alternated runs: calibrated on
//!   `grpo_digits.rl`, `ppo_critic.rl`'s within a factor of two (the model's shape, not only a
//!   fitted speed, decides this, and `grpo_digits.rl`'s run hardly tells its links from its
//!   training: see the test); the other way round within a factor of three (`ppo_critic.rl`'s
//!   run hardly tells compute from per-layer overhead);
//! - fitted to both runs at once (`--calibrate-with`), each example's other steps within 25 %;
//! - a variant of the GRPO example with a larger policy within a factor of two, step and shares,
//!   under GRPO's fit, and its step under the joint one (relative to the GRPO example's, again
//!   in alternated runs).
//!
//! Every step compared across programs is a ratio of steps measured in alternated runs, the
//! median of three rounds: a shared machine's speed moves by more than the bounds within
//! minutes, and a load spike within seconds (see [`side_by_side`]).

#![cfg(feature = "runtime")]

mod common;

use common::{predicted_step, rlc_stdout, scratch};
use std::path::{Path, PathBuf};

/// Runs `example` for `steps` steps into `dir`; the run's `metrics.jsonl` lines.
fn run(example: &str, dir: &Path, steps: u64) -> Vec<String> {
    rlc_stdout(&[
        "run",
        example,
        "--out",
        dir.to_str().unwrap(),
        "--stop-after",
        &steps.to_string(),
    ]);
    let metrics = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let lines: Vec<String> = metrics.lines().map(str::to_string).collect();
    assert_eq!(lines.len() as u64, steps, "{metrics}");
    lines
}

/// The median `seconds` of metrics lines, as `--calibrate` takes it (without the first line
/// when `warm_up`).
fn median(lines: &[String], warm_up: bool) -> f64 {
    median_of(lines, "seconds", warm_up)
}

/// The median of field `key` of metrics lines (0 where a line lacks it, as `--calibrate` counts
/// a kind of op a step did not run).
fn median_of(lines: &[String], key: &str, warm_up: bool) -> f64 {
    let mut seconds: Vec<f64> = lines
        .iter()
        .skip(usize::from(warm_up))
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v[key].as_f64().unwrap_or(0.0)
        })
        .collect();
    seconds.sort_by(f64::total_cmp);
    let n = seconds.len();
    if n % 2 == 1 {
        seconds[n / 2]
    } else {
        (seconds[n / 2 - 1] + seconds[n / 2]) / 2.0
    }
}

/// A time as `rlc plan` writes it (`12.34 ms`), in seconds, from its number and unit words.
fn seconds(words: &mut std::str::SplitWhitespace) -> f64 {
    let value: f64 = words.next().unwrap().parse().unwrap();
    match words.next().unwrap() {
        "s" => value,
        "ms" => value / 1e3,
        "µs" => value / 1e6,
        "h" => value * 3600.0,
        unit => panic!("unit {unit}"),
    }
}

/// The `predicted step:` line of `rlc plan`, in seconds.
fn predicted(stdout: &str) -> f64 {
    seconds(&mut predicted_step(stdout).split_whitespace())
}

/// The kinds of op of `--calibrate`'s table: (kind, [measured, start, fitted] seconds), the
/// `all ops` and `step` rows left out.
fn kinds(stdout: &str) -> Vec<(String, [f64; 3])> {
    let rows = stdout
        .lines()
        .skip_while(|l| !l.starts_with("  op kind"))
        .skip(1)
        .take_while(|l| !l.starts_with("  all ops"));
    let kinds: Vec<(String, [f64; 3])> = rows
        .map(|row| {
            let mut words = row.split_whitespace();
            let kind = words.next().unwrap().to_string();
            let times = [(); 3].map(|()| seconds(&mut words));
            (kind, times)
        })
        .collect();
    assert!(!kinds.is_empty(), "no table of op kinds in {stdout}");
    kinds
}

/// The example with a policy twice as deep and twice as wide, and half the prompts per step:
/// another balance of compute and fixed costs than the run the model is calibrated on.
fn wider_variant(dir: &Path) -> PathBuf {
    // The main job with its loop written out, where the prompts per step are written.
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/grpo_digits_by_hand.rl"),
    )
    .unwrap();
    let mut variant = text.clone();
    for (from, to) in [
        ("layers: 2, hidden: 64", "layers: 4, hidden: 128"),
        ("prompts_per_step = 16", "prompts_per_step = 8"),
    ] {
        let edited = variant.replace(from, to);
        assert_ne!(
            edited, variant,
            "the example changed: update the variant ({from})"
        );
        variant = edited;
    }
    let path = dir.join("wider.rl");
    std::fs::write(&path, variant).unwrap();
    path
}

/// `rlc plan PROGRAM --cost COST`'s predicted step, in seconds.
fn predict(program: &str, cost: &Path) -> f64 {
    predicted(&rlc_stdout(&[
        "plan",
        program,
        "--cost",
        cost.to_str().unwrap(),
    ]))
}

/// Prints and returns the relative error of a prediction, in `unit` (`s`, or `x` for a ratio).
fn report(program: &str, predicted: f64, measured: f64, unit: &str) -> f64 {
    let error = predicted / measured - 1.0;
    println!(
        "{program}: predicted {predicted:.4} {unit}, measured {measured:.4} {unit} ({:+.1} %)",
        error * 100.0
    );
    error
}

/// Checks the split of the step between kinds of op: each kind's share of the kinds' total,
/// predicted against measured (the median of `lines`), for every kind that takes at least
/// `checked_from` of the `step`, with a ratio of the shares that `fits` given the kind's fraction
/// of the step; those kinds must make 80 % of the step, so the check covers it. Shares rather than seconds: the machine's speed drifts
/// between steps as a whole (the step's own check bounds that), the split is what the per-kind
/// fit decides. Smaller kinds are printed, not checked: on the CPU a few sampling and logging
/// ops take microseconds, far below any per-op overhead that a model shared with kernels and
/// forward passes predicts.
fn check_kinds(
    program: &str,
    predicted: &[(String, f64)],
    lines: &[String],
    step: f64,
    checked_from: f64,
    fits: fn(f64, f64) -> bool,
) {
    let measured: Vec<f64> = predicted
        .iter()
        .map(|(kind, _)| median_of(lines, &format!("time/{kind}"), false))
        .collect();
    let total_predicted: f64 = predicted.iter().map(|(_, p)| p).sum();
    let total_measured: f64 = measured.iter().sum();
    let mut covered = 0.0;
    let mut failures = Vec::new();
    for ((kind, predicted), measured) in predicted.iter().zip(measured) {
        let share = (predicted / total_predicted) / (measured / total_measured);
        let checked = measured >= checked_from * step;
        println!(
            "  {kind:<9} predicted {predicted:.4} s, measured {measured:.4} s ({:+.1} %; share \
             of the ops {:.1} % for {:.1} %: {:+.1} %){}",
            (predicted / measured - 1.0) * 100.0,
            predicted / total_predicted * 100.0,
            measured / total_measured * 100.0,
            (share - 1.0) * 100.0,
            if checked {
                ""
            } else {
                " (not checked: a small part of the step)"
            }
        );
        if checked {
            covered += measured;
            if !fits(share, measured / step) {
                failures.push(format!("{kind}'s share {:+.1} %", (share - 1.0) * 100.0));
            }
        }
    }
    assert!(failures.is_empty(), "{program}: {}", failures.join(", "));
    assert!(
        covered >= 0.8 * step,
        "{program}: the checked kinds take {covered:.4} s of a {step:.4} s step"
    );
}

/// A kind of op's predicted share of the step against its measured share: within 40 % for a
/// kind that takes a fifth of the step or more, within a factor of four for a smaller one (a
/// tenth of the step is where the per-kind fit's errors show: on the CI machine the GRPO
/// example's generation, 10.4 % of the step, came out +45 %, with the fit itself +40 % on it;
/// its kernels, 10–13 % of the step in a run on the CI machine's kind, −64 % and −72 % with
/// the fit −50 % on them, while the other runs put them under a tenth). The whole step is held
/// to 25 % above; a kind the model left out or mistook by a factor of four still fails.
fn share_fits(ratio: f64, fraction_of_step: f64) -> bool {
    if fraction_of_step >= 0.2 {
        (ratio - 1.0).abs() < 0.4
    } else {
        (0.25..4.0).contains(&ratio)
    }
}

/// Steps of each run: step 0 (warm-up, left out by `--calibrate`), then 12 to fit and 12 to
/// check, interleaved. The median of 12 steps of ~0.1 s holds still where one of 6 moved by a
/// fifth on a loaded machine.
const STEPS: u64 = 25;

/// A calibrated run of `example`: the fitted cost model's file and the median step the model
/// has not seen.
struct Calibrated {
    cost: PathBuf,
    /// The half of the run the model was fitted to.
    metrics: PathBuf,
    step: f64,
}

/// One run of `example`: the model is fitted to half its steps and predicts the other half
/// (separate runs minutes apart differ by tens of percent on a shared machine): the step within
/// 25 %, the kinds' shares as [`share_fits`].
fn calibrated_within_a_run(example: &str, dir: &Path) -> Calibrated {
    let lines = run(example, &dir.join("run"), STEPS);
    // Fitted to steps 1, 3, …, 23 (after step 0, which `--calibrate` leaves out as warm-up),
    // checked on steps 2, 4, …, 24: the machine's load, which other work on it moves within
    // seconds, then shifts both alike. (Fitted to steps 1–6 and checked on 7–12, one run came
    // out 50 % off with the fit itself within 3 %: the later steps ran 35 % faster.)
    let fit: Vec<String> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || i % 2 == 1)
        .map(|(_, l)| l.clone())
        .collect();
    let others: Vec<String> = lines.iter().skip(2).step_by(2).cloned().collect();
    let metrics = dir.join("fit.jsonl");
    std::fs::write(&metrics, fit.join("\n") + "\n").unwrap();
    let cost = dir.join("cost.json");
    let out = rlc_stdout(&[
        "plan",
        example,
        "--calibrate",
        metrics.to_str().unwrap(),
        "--save-cost",
        cost.to_str().unwrap(),
    ]);
    print!("{out}");
    let step = median(&others, false);
    let error = report(example, predict(example, &cost), step, "s");
    assert!(error.abs() < 0.25, "{example}: {:+.1} %", error * 100.0);
    let fitted: Vec<(String, f64)> = kinds(&out)
        .into_iter()
        .map(|(kind, [_, _, fitted])| (kind, fitted))
        .collect();
    // Kinds from a twentieth of the step: at a tenth, a CI run of `ppo_critic.rl` failed on
    // coverage alone (its forward passes, 8.5 % of the step since they compute only the
    // positions read, fell out; generation and training made 79.9 %).
    check_kinds(example, &fitted, &others, step, 0.05, share_fits);
    Calibrated {
        cost,
        metrics,
        step,
    }
}

/// Short runs alternated with the program's runs in [`side_by_side`]: step 0 (warm-up, left
/// out) and 6 steps whose median is the round's step.
const ROUND_STEPS: u64 = 7;

/// `program`'s step per `reference`'s, measured side by side: three rounds of a short run of
/// each, one after the other, the median of the rounds' ratios. What a fit carries to another
/// program is the ratio of their costs; measured at one time, the ratio does not move with the
/// machine's speed, which drifts by tens of percent within minutes on a shared machine and
/// spikes within seconds. The ratio of runs made a minute apart failed about one CI run in ten
/// (a 2.4× slower GRPO run, bracketing the variant, once); a spike now has to hit two of three
/// rounds, each a few seconds long, to move the median. Returns the ratio and `program`'s
/// metrics lines (warm-up steps left out).
fn side_by_side(program: &str, reference: &str, dir: &Path) -> (f64, Vec<String>) {
    let mut ratios = Vec::new();
    let mut lines = Vec::new();
    for round in 0..3 {
        let reference_lines = run(
            reference,
            &dir.join(format!("reference-{round}")),
            ROUND_STEPS,
        );
        let program_lines = run(program, &dir.join(format!("program-{round}")), ROUND_STEPS);
        let ratio = median(&program_lines, true) / median(&reference_lines, true);
        println!("{program} per step of {reference}, round {round}: {ratio:.3}");
        ratios.push(ratio);
        lines.extend(program_lines.into_iter().skip(1));
    }
    ratios.sort_by(f64::total_cmp);
    (ratios[1], lines)
}

#[test]
fn calibrated_on_a_cpu_run_the_model_predicts_its_steps_within_25_percent_and_the_other_example() {
    let dir = scratch("examples");
    let (grpo, ppo) = ("examples/grpo_digits.rl", "examples/ppo_critic.rl");
    // Each fitted to its own run; one example's step is then predicted relative to the
    // other's, measured side by side.
    let grpo_run = calibrated_within_a_run(grpo, &dir.join("grpo"));
    let ppo_run = calibrated_within_a_run(ppo, &dir.join("ppo"));
    let (ppo_per_grpo, _) = side_by_side(ppo, grpo, &dir.join("ppo-per-grpo"));
    // `program`'s step per `reference`'s under the fit in `cost`, against that ratio as
    // measured with the two run side by side: the prediction's error.
    let relative = |program: &str, reference: &str, fit: &str, cost: &Path, measured: f64| {
        report(
            &format!("{program} per step of {reference} (calibrated on {fit})"),
            predict(program, cost) / predict(reference, cost),
            measured,
            "x",
        )
    };
    // The other example under the model calibrated on the main one: GRPO has a policy and a
    // frozen reference, PPO adds a critic, a reward model and transfers between pools. Within
    // 50 %, not the 25 % of a run's own steps: GRPO's run times its links only inside training
    // (each optimizer step all-reduces ~20 gradient tensors one by one), so its fit trades
    // a message's latency against training's compute, while PPO's four optimizer steps on 8-row
    // minibatches are mostly those messages. On CI's machine GRPO's fit put a message at
    // 216 µs, PPO's own fit at 97 µs: PPO's training came out +49 %, its step +33 %. Measured
    // over two days: −23 % to +10 % (GRPO steps of 52 to 121 ms), +33 % and +35 % on the two
    // fastest machines (49 and 52 ms), +57 % on a loaded one (a background job at nice 19 beside
    // the test). A bound of ±50 % failed about one idle CI run in ten, so the bound is a factor
    // of two either way: the spread seen is within it with room, and a model that mistook the
    // kind of work (a factor of three and more) still fails. (Those figures were the step's
    // own, from before the check was made relative to GRPO's step measured beside it.)
    let error = relative(ppo, grpo, grpo, &grpo_run.cost, ppo_per_grpo);
    assert!(
        (0.5..2.0).contains(&(1.0 + error)),
        "{ppo} under {grpo}'s fit: {:+.1} %",
        error * 100.0
    );
    // And the other way round, within a factor of three: every forward pass of `ppo_critic.rl`
    // has the same 16 rows, so its run cannot tell compute from per-layer overhead (both grow
    // with the calls alike), and its fit may put the step's time in either; `grpo_digits.rl`
    // then runs 128- and 256-row passes, where the split decides. Here, in a CI run with
    // builds beside it, the fit put `compute_efficiency` at 6× what `grpo_digits.rl`'s run
    // gives: −54 % (−16 % to +3 % on a quiet machine).
    let error = relative(grpo, ppo, ppo, &ppo_run.cost, 1.0 / ppo_per_grpo);
    assert!(
        (1.0 / 3.0..3.0).contains(&(1.0 + error)),
        "{grpo} under {ppo}'s fit: {:+.1} %",
        error * 100.0
    );
    // Both runs at once (`--calibrate-with`): one model for the two examples, each run's step
    // held, so each example's other steps within 25 % as under its own fit.
    let joint = dir.join("joint.json");
    let out = rlc_stdout(&[
        "plan",
        grpo,
        "--calibrate",
        grpo_run.metrics.to_str().unwrap(),
        "--calibrate-with",
        ppo,
        ppo_run.metrics.to_str().unwrap(),
        "--save-cost",
        joint.to_str().unwrap(),
    ]);
    print!("{out}");
    for (program, calibrated) in [(grpo, &grpo_run), (ppo, &ppo_run)] {
        let error = report(
            &format!("{program} (calibrated on both)"),
            predict(program, &joint),
            calibrated.step,
            "s",
        );
        assert!(
            error.abs() < 0.25,
            "{program} under the joint fit: {:+.1} %",
            error * 100.0
        );
    }
    // A larger policy, under GRPO's fit and under the joint one.
    let cost = &grpo_run.cost;
    let wider = wider_variant(&dir);
    let wider = wider.to_str().unwrap();
    let wider_dir = dir.join("wider");
    let (wider_per_grpo, wider_lines) = side_by_side(wider, grpo, &wider_dir);
    let wider_time = median(&wider_lines, false);
    for (fit, cost) in [(grpo, cost), ("both", &joint)] {
        let error = relative(wider, grpo, fit, cost, wider_per_grpo);
        assert!(
            (0.5..2.0).contains(&(1.0 + error)),
            "the wider variant under {fit}'s fit: {:+.1} %",
            error * 100.0
        );
    }
    // Its kinds of op under the fitted model: the `start` column of a calibration on its runs
    // that starts from that model.
    let wider_metrics = wider_dir.join("metrics.jsonl");
    std::fs::write(&wider_metrics, wider_lines.join("\n") + "\n").unwrap();
    let out = rlc_stdout(&[
        "plan",
        wider,
        "--cost",
        cost.to_str().unwrap(),
        "--calibrate",
        wider_metrics.to_str().unwrap(),
    ]);
    let start: Vec<(String, f64)> = kinds(&out)
        .into_iter()
        .map(|(kind, [_, start, _])| (kind, start))
        .collect();
    check_kinds(wider, &start, &wider_lines, wider_time, 0.1, |ratio, _| {
        (0.5..2.0).contains(&ratio)
    });
    let _ = std::fs::remove_dir_all(&dir);
}

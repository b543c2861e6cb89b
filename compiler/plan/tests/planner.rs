//! The planner's search against brute force on small clusters, and its plans end to end.

use rlc_diagnostics::Files;
use rlc_plan::cost::CostParams;
use rlc_plan::planner::apply::{PlanFailure, hardware};
use rlc_plan::planner::search::{Space, brute_force, search};
use rlc_plan::planner::units;

struct NoImports;

impl rlc_check::SourceLoader for NoImports {
    fn read(&self, path: &str) -> Result<String, String> {
        Err(format!("no module `{path}` in this test"))
    }
}

fn check(text: &str) -> rlc_check::Checked {
    let mut files = Files::new();
    let checked = rlc_check::check(&NoImports, &mut files, "test.rl", text.to_string());
    let errors: Vec<_> = checked
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.message.clone())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    checked
}

/// GRPO with a reference on `nodes × per_node` GPUs; `places` are the program's `place` lines.
fn grpo(nodes: u64, per_node: u64, device: &str, places: &str) -> String {
    format!(
        r#"import std.algo {{ grpo_advantage, ppo_clip, kl_k3, token_mean }}
import std.hardware {{ {device} }}
import std.models {{ qwen2_7b }}
import std.task.digits {{ reverse }}
cluster node {{ nodes = {nodes}  devices_per_node = {per_node}  device = {device} }}
model actor: CausalLM {{ arch = qwen2_7b  optim = adamw(lr: 1e-6)  precision = bf16  recompute = true }}
model reference: CausalLM = frozen(actor)
{places}
pipeline train(steps = 10) {{
  loop step in 0..steps {{
    let rollout = actor.generate(reverse.sample(16), n: 4, max_new: 256)
    let adv = grpo_advantage(reverse.score(rollout), rollout.group, rollout.mask)
    let old = actor.logprobs(rollout)
    let ref = reference.logprobs(rollout)
    actor.update(rollout, epochs: 1, minibatch: 32) {{ logp -> token_mean(ppo_clip(logp, old, adv) + 0.01 * kl_k3(logp, ref), rollout.mask) }}
  }}
}}
"#
    )
}

fn assert_search_is_exact(text: &str) {
    let checked = check(text);
    let program = &checked.program;
    let job = units::job(program).expect("a job");
    let params = CostParams::default();
    let pruned = Space::new(&job, program, hardware(program), &params, false).expect("feasible");
    let result = search(&pruned);
    let best = result.candidates[0].eval.seconds;
    let every = Space::new(&job, program, hardware(program), &params, true).expect("feasible");
    let (brute, placements) = brute_force(&every).expect("some placement");
    println!(
        "{placements} placements, {} evaluated by the search",
        result.evaluated
    );
    assert!(
        placements >= 10,
        "a space of {placements} placements tests little"
    );
    assert!(
        (best - brute).abs() <= 1e-12 * brute.max(1.0),
        "branch and bound {best} ≠ brute force {brute}"
    );
    assert!(result.exact);
    assert!(result.bound <= best + 1e-12);
    // The runners-up are in order and no better than the best.
    for pair in result.candidates.windows(2) {
        assert!(pair[0].eval.seconds <= pair[1].eval.seconds);
    }
}

#[test]
fn search_equals_brute_force_on_one_node_of_four() {
    assert_search_is_exact(&grpo(1, 4, "h100_80g", "place auto"));
}

#[test]
fn search_equals_brute_force_on_two_nodes_of_two() {
    assert_search_is_exact(&grpo(2, 2, "a100_40g", "place auto on node"));
}

#[test]
fn search_equals_brute_force_with_hand_placed_and_auto_layout_roles() {
    let places = "place actor.generate on node[0..2] with tp(2)\nplace reference on node[2..4] auto\nplace auto";
    assert_search_is_exact(&grpo(1, 4, "h100_80g", places));
}

#[test]
fn the_chosen_plan_lowers_validates_and_simulates() {
    let checked = check(&grpo(2, 8, "h100_80g", "place auto"));
    let params = CostParams::default();
    let planned = rlc_plan::planner::plan_auto(&checked, &params)
        .unwrap_or_else(|_| panic!("a plan"))
        .expect("auto placements");
    assert!(rlc_plan::validate(&planned.plan).is_empty());
    assert!(planned.plan.instances.iter().all(|i| i.auto));
    let costs = rlc_plan::cost::PlanCosts::new(&planned.plan, &params).unwrap();
    let step = rlc_plan::simulate::simulate_step(&planned.plan, &costs, &|_| false).unwrap();
    assert!(step.step_seconds > 0.0);
    // Every device some unit uses is in the chart, and no lane is busier than the step.
    let ranks: u32 = step.lanes.iter().map(|l| l.ranks.len()).sum();
    assert_eq!(ranks, 16);
    assert!(step.utilisation().iter().all(|&u| u <= 1.0 + 1e-9));
    let text = rlc_plan::planner::report::describe(&planned);
    assert!(text.contains("actor.train"), "{text}");
}

#[test]
fn no_layout_that_fits_is_e0901() {
    // A 7B model with AdamW in f32 on one 40 GB device: 16 bytes per parameter.
    let text =
        grpo(1, 1, "a100_40g", "place auto").replace("precision = bf16  recompute = true", "");
    let checked = check(&text);
    match rlc_plan::planner::plan_auto(&checked, &CostParams::default()) {
        Err(PlanFailure::Diagnostics(d)) => {
            assert_eq!(d[0].code.as_str(), "E0901");
            assert!(d[0].message.contains("actor"), "{}", d[0].message);
        }
        Err(PlanFailure::Messages(m)) => panic!("expected E0901, got {m:?}"),
        Ok(_) => panic!("expected E0901, got a plan"),
    }
}

/// Every example, as written and with its `place` items replaced by `place auto`, plans (or
/// reports E0901) and simulates without a panic.
#[test]
fn every_example_plans_and_simulates_as_written_and_under_place_auto() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let auto: String = text
            .lines()
            .map(|l| if l.starts_with("place ") { "" } else { l })
            .chain(["place auto"])
            .collect::<Vec<_>>()
            .join("\n");
        for program in [text, auto] {
            let checked = check(&program);
            let params = CostParams::default();
            let plan = match rlc_plan::planner::plan_auto(&checked, &params) {
                Ok(Some(planned)) => planned.plan,
                Ok(None) => rlc_plan::lower::lower(&checked).expect("lowers"),
                Err(PlanFailure::Diagnostics(d)) => {
                    assert_eq!(d[0].code.as_str(), "E0901", "{}", path.display());
                    continue;
                }
                Err(PlanFailure::Messages(m)) => panic!("{}: {m:?}", path.display()),
            };
            let costs = rlc_plan::cost::PlanCosts::new(&plan, &params).unwrap();
            let full = rlc_plan::simulate::simulate_step(&plan, &costs, &|_| true).unwrap();
            let regular = rlc_plan::simulate::simulate_step(&plan, &costs, &|_| false).unwrap();
            assert!(regular.step_seconds.is_finite() && regular.step_seconds > 0.0);
            // 1000 steps lie between 1000 regular steps and 1000 with every periodic op.
            let forecast = rlc_plan::simulate::forecast(&plan, &costs, 1000).unwrap();
            assert!(forecast.seconds >= 1000.0 * regular.step_seconds * (1.0 - 1e-9));
            assert!(forecast.seconds <= 1000.0 * full.step_seconds * (1.0 + 1e-9));
            seen += 1;
        }
    }
    assert!(seen >= 6, "{seen} programs planned");
}

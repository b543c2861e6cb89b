//! The planner at scale: PPO with a 70B-class policy, critic, reference and reward model under
//! `place auto` on 128 and on 1024 H100s. Each figure is the whole of `rlc plan`'s work after
//! checking: the search over pools, splits and layouts, lowering the chosen placement, and
//! simulating a step. Prints the figures and the chosen step time; goals: < 1 s on 128 GPUs,
//! < 10 s on 1024.
//!
//! `cargo bench --bench plan`

mod common;

use criterion::{Criterion, black_box};
use rlc_plan::cost::{CostParams, PlanCosts};
use std::time::Instant;

/// PPO on `nodes` nodes of 8 H100s, every role left to the planner.
fn program(nodes: u64) -> String {
    common::ppo_70b(nodes, "place auto on big")
}

/// Search, lower, simulate: the predicted step time.
fn plan(checked: &rlc_check::Checked, params: &CostParams) -> (f64, u64) {
    let planned = match rlc_plan::planner::plan_auto(checked, params) {
        Ok(Some(p)) => p,
        _ => panic!("the generated program plans"),
    };
    let costs = PlanCosts::new(&planned.plan, params).expect("costs");
    let step = rlc_plan::simulate::simulate_step(&planned.plan, &costs, &|_| false)
        .expect("simulates")
        .step_seconds;
    (step, planned.result.evaluated)
}

fn main() {
    let mut criterion = Criterion::default().sample_size(10).configure_from_args();
    let params = CostParams::default();
    println!("planning figures (one run each, after a warm-up):");
    for (gpus, nodes) in [(128u64, 16u64), (1024, 128)] {
        let checked = common::check(&program(nodes));
        let _ = plan(&checked, &params);
        let t = Instant::now();
        let (step, evaluated) = plan(&checked, &params);
        let elapsed = t.elapsed();
        println!(
            "  {gpus:>5} GPUs: plan {elapsed:>10.2?}  ({evaluated} placements evaluated, predicted step {step:.1} s)"
        );
        criterion.bench_function(&format!("plan auto {gpus} GPUs"), |b| {
            b.iter(|| plan(black_box(&checked), &params))
        });
    }
    criterion.final_summary();
}

//! Lowering at scale: a PPO job with split pools on 128 and on 1024 GPUs (programs generated from
//! a string template), checked once and lowered to a plan under criterion. Prints the figures;
//! asserts nothing about time (the goal is well under a second each).
//!
//! `cargo bench --bench lower`

mod common;

use criterion::{Criterion, black_box};
use std::time::Instant;

/// PPO on `nodes` nodes of 8 H100s: training on the first half of the devices, generation on the
/// next quarter, reference and reward model on a sixteenth each, the critic on the last eighth.
fn program(nodes: u64) -> String {
    let w = nodes * 8;
    let (train_end, gen_end, ref_end, score_end) = (w / 2, w * 3 / 4, w * 13 / 16, w * 7 / 8);
    let placement = format!(
        r#"place policy.train    on big[0..{train_end}]    with fsdp({train_fsdp}), tp(8), micro(1)
place policy.generate on big[{train_end}..{gen_end}] with dp({gen_dp}), tp(8)
place reference       on big[{gen_end}..{ref_end}] with dp({ref_dp}), tp(8), micro(16)
place scorer          on big[{ref_end}..{score_end}] with dp({ref_dp}), tp(8), micro(16)
place critic.train    on big[{score_end}..{w}] with fsdp({critic_dp}), tp(8), micro(1)
place critic.values   on big[{score_end}..{w}] with dp({critic_dp}), tp(8), micro(16)
"#,
        train_fsdp = train_end / 8,
        gen_dp = (gen_end - train_end) / 8,
        ref_dp = (ref_end - gen_end) / 8,
        critic_dp = (w - score_end) / 8,
    );
    common::ppo_70b(nodes, placement.trim_end())
}

fn main() {
    let mut criterion = Criterion::default().sample_size(10).configure_from_args();
    println!("lowering figures (one run each, after a warm-up):");
    for (gpus, nodes) in [(128u64, 16u64), (1024, 128)] {
        let text = program(nodes);
        let t = Instant::now();
        let checked = common::check(&text);
        let check_time = t.elapsed();
        let _ = rlc_plan::lower::lower(&checked).expect("lowers");
        let t = Instant::now();
        let plan = rlc_plan::lower::lower(&checked).expect("lowers");
        let lower_time = t.elapsed();
        let t = Instant::now();
        let json = plan.to_json();
        let json_time = t.elapsed();
        let t = Instant::now();
        let loaded = rlc_plan::load(&json).expect("the plan validates");
        let load_time = t.elapsed();
        assert_eq!(loaded.world_size as u64, gpus);
        let moves: usize = plan
            .ops
            .iter()
            .map(|o| match &o.kind {
                rlc_plan::model::OpKind::WeightSync { moves, .. } => moves.len(),
                _ => 0,
            })
            .sum();
        println!(
            "  {gpus:>5} GPUs: check {check_time:>10.2?}  lower {lower_time:>10.2?}  to_json {json_time:>10.2?}  load+validate {load_time:>10.2?}  \
             ({} ops, {} rank programs, {moves} shard moves, {} KiB of JSON)",
            plan.ops.len(),
            plan.programs.len(),
            json.len() / 1024
        );
        criterion.bench_function(&format!("lower {gpus} GPUs"), |b| {
            b.iter(|| rlc_plan::lower::lower(black_box(&checked)).expect("lowers"))
        });
        criterion.bench_function(&format!("load+validate {gpus} GPUs"), |b| {
            b.iter(|| rlc_plan::load(black_box(&json)).expect("valid"))
        });
    }
    criterion.final_summary();
}

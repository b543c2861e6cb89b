use std::thread;

use rlc_plan::model::{Layout, RankSet};
use tch::{Device, nn};

use super::*;
use crate::collectives::Group;
use crate::model::{Heads, Transformer};

fn config() -> ModelConfig {
    ModelConfig {
        layers: 4,
        hidden: 32,
        heads: 4,
        kv_heads: 2,
        ffn: 48,
        vocab: 40,
        max_len: 16,
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        tie_embeddings: false,
        qkv_bias: true,
        positions: Default::default(),
    }
}

fn instance(ranks: std::ops::Range<u32>, dp: u32, fsdp: u32, tp: u32, pp: u32) -> Instance {
    Instance {
        id: format!("dp{dp}·fsdp{fsdp}·tp{tp}·pp{pp}"),
        role: "policy".into(),
        cluster: "local".into(),
        phases: Vec::new(),
        ranks: RankSet::range(ranks.start, ranks.end),
        layout: Layout::new(dp, fsdp, tp, pp),
        auto: false,
        memory: Default::default(),
    }
}

fn full_weights(config: &ModelConfig) -> BTreeMap<String, Tensor> {
    let vs = nn::VarStore::new(Device::Cpu);
    Transformer::new(&vs.root(), config, Heads::POLICY, 3).unwrap();
    vs.variables()
        .into_iter()
        .map(|(n, t)| (n, t.detach().copy()))
        .collect()
}

/// Re-shards the whole model from `src` to `dst` on thread ranks (the plan's moves, `world`
/// spanning both instances) and checks every destination shard element for element. Returns
/// each rank's stats.
fn run(
    src: &Instance,
    dst: &Instance,
    moves: &[ShardMove],
) -> Vec<Result<ReshardStats, ReshardError>> {
    let config = config();
    let world = src.ranks.union(&dst.ranks).len() as usize;
    thread::scope(|scope| {
        let handles: Vec<_> = Group::new(world)
            .into_iter()
            .map(|comm| {
                let config = &config;
                scope.spawn(move || {
                    let full = full_weights(config);
                    let shapes: BTreeMap<String, Vec<i64>> =
                        full.iter().map(|(n, t)| (n.clone(), t.size())).collect();
                    let rank = comm.rank() as u32;
                    let local: BTreeMap<String, Tensor> = full
                        .iter()
                        .filter_map(|(n, t)| {
                            holding_of(src, rank, n, &t.size(), config)
                                .map(|h| (n.clone(), h.take(t)))
                        })
                        .collect();
                    let (out, stats) = reshard(src, dst, moves, &shapes, config, &comm, &local)?;
                    for (name, t) in &full {
                        match holding_of(dst, rank, name, &t.size(), config) {
                            Some(h) => assert!(
                                out[name].equal(&h.take(t)),
                                "rank {rank}: `{name}` is not the destination shard"
                            ),
                            None => {
                                assert!(!out.contains_key(name), "rank {rank}: `{name}` not held")
                            }
                        }
                    }
                    Ok(stats)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn numel(config: &ModelConfig) -> i64 {
    full_weights(config)
        .values()
        .map(|t| t.numel() as i64)
        .sum()
}

#[test]
fn fsdp_training_to_tensor_parallel_replicas_on_the_same_ranks() {
    // FSDP(4) train → TP(2) × 2 replicas generate on ranks 0..4 (colocated, as HybridEngine).
    let (src, dst) = (instance(0..4, 1, 4, 1, 1), instance(0..4, 2, 1, 2, 1));
    let moves = rlc_plan::reshard::moves(&src, &dst, 4);
    let stats: Vec<ReshardStats> = run(&src, &dst, &moves)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let total = numel(&config());
    for (rank, s) in stats.iter().enumerate() {
        // Each rank assembles its half of the model (plus the replicated norms) and no more:
        // no full copy per rank; a quarter of what it needs it already holds.
        let need = s.received + s.local;
        assert!(
            need < total * 6 / 10,
            "rank {rank} assembled {need} of {total}"
        );
        assert!(s.local > 0, "rank {rank} sent itself nothing locally");
    }
}

#[test]
fn pipeline_and_tensor_shards_to_wider_tensor_parallelism_on_other_ranks() {
    let (src, dst) = (instance(0..4, 1, 1, 2, 2), instance(4..8, 1, 1, 4, 1));
    let moves = rlc_plan::reshard::moves(&src, &dst, 4);
    let stats: Vec<ReshardStats> = run(&src, &dst, &moves)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(
        stats.iter().all(|s| s.local == 0),
        "disjoint pools copy nothing locally"
    );
    assert!(
        stats[..4].iter().all(|s| s.received == 0),
        "sources receive nothing"
    );
    // The destination ranks together receive the model once, plus the norms each TP rank repeats.
    let received: i64 = stats[4..].iter().map(|s| s.received).sum();
    let total = numel(&config());
    assert!(
        received >= total && received < total * 11 / 10,
        "received {received} of {total}"
    );
}

#[test]
fn an_unchanged_layout_moves_nothing_between_ranks() {
    let (src, dst) = (instance(0..4, 1, 1, 2, 2), instance(0..4, 1, 1, 2, 2));
    let moves = rlc_plan::reshard::moves(&src, &dst, 4);
    for s in run(&src, &dst, &moves).into_iter().map(Result::unwrap) {
        assert_eq!(s.received, 0);
    }
}

#[test]
fn moves_that_leave_a_shard_without_source_are_an_error_on_every_rank() {
    let (src, dst) = (instance(0..2, 1, 2, 1, 1), instance(0..2, 1, 1, 2, 1));
    let mut moves = rlc_plan::reshard::moves(&src, &dst, 4);
    // Without the moves from rank 1, nobody sends the second FSDP half: both ranks find out
    // before anything is sent (each computes every destination's claims the same way).
    moves.retain(|m| m.from != 1);
    for result in run(&src, &dst, &moves) {
        match result {
            Err(ReshardError::Uncovered { missing, .. }) => assert!(missing > 0),
            other => panic!("expected an uncovered shard, got {other:?}"),
        }
    }
}

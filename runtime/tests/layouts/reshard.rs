//! Weight sync end to end: FSDP(4) trains, its shards are re-sharded with the plan's moves to
//! `dp(2) tp(2)` on the same four ranks, and each tensor-parallel replica built from the received
//! shards alone computes what one rank computes after the same training.

use std::collections::BTreeMap;

use rlc_plan::model::{Instance, Layout, RankSet, ShardMove};
use rlc_runtime::collectives::{CollectiveError, Communicator};
use rlc_runtime::generate::generate;
use rlc_runtime::model::{Heads, ModelConfig, Transformer};
use rlc_runtime::parallel::fsdp::Fsdp;
use rlc_runtime::parallel::reshard::{ReshardError, ReshardStats, reshard};
use rlc_runtime::parallel::shards::{Coord, holding};
use rlc_runtime::parallel::tp::TpTransformer;
use rlc_runtime::parallel::{RankGroups, Tape, process_groups};
use tch::{Device, Tensor, nn};

use crate::fixture;
use crate::ranks::{RankResult, run_on, world_communicators};

const TRAIN: Layout = Layout::new(1, 4, 1, 1);
const GENERATE: Layout = Layout::new(2, 1, 2, 1);

/// The role's instance with `layout` on ranks `0..4` (training and generation colocated).
fn instance(layout: Layout) -> Instance {
    Instance {
        id: format!("{layout:?}"),
        role: "policy".into(),
        cluster: "local".into(),
        phases: Vec::new(),
        ranks: RankSet::range(0, layout.devices()),
        layout,
        auto: false,
        memory: Default::default(),
    }
}

fn coord(groups: &RankGroups) -> Coord {
    Coord {
        pp: groups.pp_rank as i64,
        dp: groups.dp_rank as i64,
        fsdp: groups.fsdp_rank as i64,
        tp: groups.tp_rank as i64,
    }
}

fn configs() -> [(&'static str, ModelConfig); 2] {
    [
        ("untied", fixture::config()),
        ("tied", fixture::tied_config()),
    ]
}

/// Runs `body` on four ranks, each with the world communicator (rank `r` is global rank `r`)
/// and its groups under the training and the generation layout (ask [`fits`] first).
fn run_world<T: RankResult + Send>(
    body: impl Fn(Communicator, RankGroups, RankGroups) -> T + Sync,
) -> Vec<T> {
    let here = || {
        world_communicators(4)
            .into_iter()
            .zip(process_groups(TRAIN))
            .zip(process_groups(GENERATE))
            .collect::<Vec<_>>()
    };
    run_on(4, "world of 4", here, |((world, train), serve)| {
        body(world, train, serve)
    })
}

/// Whether the four ranks of the training and generation layouts run here.
fn fits() -> bool {
    fixture::fits_ranks(4, "FSDP(4) -> dp(2) tp(2) re-sharding")
}

#[test]
fn tp_shards_and_fsdp_shards_are_what_the_holdings_say() {
    for (what, config) in configs() {
        for tp in [2, 4] {
            let layout = fixture::layout(1, 1, tp, 1);
            if !fixture::fits(layout) {
                continue;
            }
            fixture::run_ranks(layout, |groups| {
                let full = fixture::named_weights(&fixture::model(&config).0);
                let vs = nn::VarStore::new(Device::Cpu);
                let model =
                    TpTransformer::new(&vs.root(), &full, &config, Heads::POLICY, &groups.tp)
                        .unwrap();
                let mut local = BTreeMap::new();
                for p in model.params() {
                    let full = &full[&p.name];
                    let held = holding(&p.name, &full.size(), &config, &layout, coord(&groups))
                        .expect("a TP rank holds every parameter");
                    let shard = held.take(full);
                    assert!(
                        p.tensor.reshape([-1]).equal(&shard),
                        "{what} tp{tp} rank {}: `{}` is not its holding",
                        groups.rank,
                        p.name
                    );
                    local.insert(p.name.clone(), shard);
                }
                // Built from those flat shards alone, the model holds the same tensors.
                let vs = nn::VarStore::new(Device::Cpu);
                let rebuilt = TpTransformer::from_shards(
                    &vs.root(),
                    &local,
                    &config,
                    Heads::POLICY,
                    &groups.tp,
                )
                .unwrap();
                for (a, b) in model.params().iter().zip(rebuilt.params()) {
                    assert!(
                        a.name == b.name && a.tensor.equal(&b.tensor),
                        "`{}`",
                        a.name
                    );
                }
            });
        }
        if !fixture::fits(TRAIN) {
            continue;
        }
        fixture::run_ranks(TRAIN, |groups| {
            let full = full_copy(&config);
            let model = Fsdp::for_rank(&full, &config, &groups, fixture::adamw_config()).unwrap();
            let local = model.local_shards();
            assert_eq!(local.len(), full.len());
            for (name, shard) in &local {
                let held = holding(name, &full[name].size(), &config, &TRAIN, coord(&groups))
                    .expect("an FSDP rank holds a piece of every parameter");
                assert!(
                    shard.equal(&held.take(&full[name])),
                    "{what} fsdp4 rank {}: `{name}`",
                    groups.rank
                );
            }
        });
    }
}

fn full_copy(config: &ModelConfig) -> BTreeMap<String, Tensor> {
    fixture::named_weights(&fixture::model(config).0)
}

/// One rank after training, re-sharding and building its TP model.
struct Served {
    logits: Tensor,
    tokens: Tensor,
    stats: ReshardStats,
}

crate::ranks::rank_result_struct!(Served {
    logits,
    tokens,
    stats
});

fn train_reshard_serve(config: &ModelConfig, moves: &[ShardMove]) -> Vec<Served> {
    let (src, dst) = (instance(TRAIN), instance(GENERATE));
    run_world(|world, train, serve| {
        let mut fsdp = Fsdp::for_rank(&full_copy(config), config, &train, fixture::adamw_config())
            .expect("sharded model");
        let (ids, mask) = fixture::batch();
        let n = fixture::BATCH / i64::from(TRAIN.data_ranks());
        let first = train.data_rank() as i64 * n;
        let (ids, mask) = (ids.narrow(0, first, n), mask.narrow(0, first, n));
        for _ in 0..fixture::STEPS {
            let loss = |lp: &Tensor| fixture::sft_loss(lp, &mask, fixture::batch_tokens());
            fsdp.train_step(&ids, &mask, loss, Some(fixture::CLIP), fixture::LR)
                .expect("training step");
        }
        let (shards, stats) = reshard(
            &src,
            &dst,
            moves,
            &fsdp.shapes(),
            config,
            &world,
            &fsdp.local_shards(),
        )
        .expect("re-shard");
        drop(fsdp);
        let vs = nn::VarStore::new(Device::Cpu);
        let model =
            TpTransformer::from_shards(&vs.root(), &shards, config, Heads::POLICY, &serve.tp)
                .expect("TP model from its shards");
        drop(shards);

        let (ids, mask) = fixture::batch();
        let logits = tch::no_grad(|| model.logits(&Tape::new(), &ids, &mask)).expect("logits");
        // The two replicas split the prompts; the ranks of a TP group decode the same rows.
        let (prompt_ids, prompt_mask, generation) =
            fixture::replica_prompts(GENERATE.dp, serve.dp_rank);
        let tokens = generate(&model, &prompt_ids, &prompt_mask, &generation)
            .expect("generation")
            .response_ids;
        Served {
            logits,
            tokens,
            stats,
        }
    })
}

/// The single-rank model after the fixture's training.
fn trained_reference(config: &ModelConfig) -> (nn::VarStore, Transformer) {
    let trained = fixture::reference_training(config);
    let (vs, model) = fixture::model(config);
    tch::no_grad(|| {
        for (name, mut var) in vs.variables() {
            var.copy_(&trained[&name]);
        }
    });
    (vs, model)
}

#[test]
fn fsdp_training_re_sharded_to_tp_replicas_serves_the_trained_model() {
    if !fits() {
        return;
    }
    let (src, dst) = (instance(TRAIN), instance(GENERATE));
    let moves = rlc_plan::reshard::moves(&src, &dst, fixture::config().layers as u64);
    for (what, config) in configs() {
        let (vs, reference) = trained_reference(&config);
        let total: i64 = vs.variables().values().map(|t| t.numel() as i64).sum();
        let (ids, mask) = fixture::batch();
        let logits = tch::no_grad(|| reference.logits(&ids, &mask));
        let (prompt_ids, prompt_mask) = fixture::prompts();
        let tokens = generate(
            &reference,
            &prompt_ids,
            &prompt_mask,
            &fixture::generate_config(),
        )
        .expect("generation")
        .response_ids;
        let served = train_reshard_serve(&config, &moves);
        let rows = tokens.size()[0] / i64::from(GENERATE.dp);
        let mut worst = 0.0f64;
        for ((rank, s), groups) in served.iter().enumerate().zip(fixture::all_groups(GENERATE)) {
            let diff = fixture::max_diff(&s.logits, &logits);
            worst = worst.max(diff);
            assert!(diff < 1e-4, "{what} rank {rank}: logits differ by {diff:e}");
            let expected = tokens.narrow(0, groups.dp_rank as i64 * rows, rows);
            assert!(
                s.tokens.equal(&expected),
                "{what} rank {rank}: tokens {:?} vs {:?}",
                Vec::<i64>::try_from(s.tokens.view([-1])).unwrap(),
                Vec::<i64>::try_from(expected.view([-1])).unwrap(),
            );
            // Half of the model (its TP shard) plus the replicated norms, never a full copy; a
            // quarter of that it already held as its FSDP shard and copied locally.
            let assembled = s.stats.received + s.stats.local;
            assert!(
                assembled < total * 6 / 10,
                "{what} rank {rank}: assembled {assembled} of {total} elements"
            );
            assert!(
                s.stats.local > 0,
                "{what} rank {rank}: no local pieces used"
            );
            eprintln!(
                "{what} rank {rank}: received {} + local {} of {total} elements ({:.1}%)",
                s.stats.received,
                s.stats.local,
                100.0 * assembled as f64 / total as f64
            );
        }
        eprintln!(
            "{what}: FSDP(4) x {} steps -> dp(2) tp(2): logits within {worst:.1e} of one rank, \
             generated tokens equal",
            fixture::STEPS
        );
    }
}

#[test]
fn missing_moves_or_shards_end_in_typed_errors_on_every_rank() {
    if !fits() {
        return;
    }
    let config = fixture::config();
    let (src, dst) = (instance(TRAIN), instance(GENERATE));
    let all = rlc_plan::reshard::moves(&src, &dst, config.layers as u64);
    // Nobody sends rank 1's FSDP shards: every rank finds a destination uncovered before sending.
    let without_rank_1: Vec<ShardMove> = all.iter().filter(|m| m.from != 1).cloned().collect();
    // Rank 2 lost one of its shards: it refuses before sending, and the ranks waiting for its
    // pieces learn that it left instead of waiting forever.
    let results = |moves: &[ShardMove], drop_on: Option<usize>| {
        run_world(|world, train, _serve| {
            let fsdp = Fsdp::for_rank(
                &full_copy(&config),
                &config,
                &train,
                fixture::adamw_config(),
            )
            .unwrap();
            let mut local = fsdp.local_shards();
            if drop_on == Some(world.rank()) {
                local.remove("model.layers.1.mlp.up_proj.weight");
            }
            reshard(&src, &dst, moves, &fsdp.shapes(), &config, &world, &local).err()
        })
    };
    for (rank, error) in results(&without_rank_1, None).into_iter().enumerate() {
        assert!(
            matches!(error, Some(ReshardError::Uncovered { missing, .. }) if missing > 0),
            "rank {rank}: {error:?}"
        );
    }
    // Between processes a rank that returns early stays alive, and the ranks waiting for its
    // pieces would wait forever (a job's failing rank ends the job, see `abort_job`).
    if !fixture::threads_only("a rank leaving re-sharding early is `PeerLost` to the others") {
        return;
    }
    for (rank, error) in results(&all, Some(2)).into_iter().enumerate() {
        match rank {
            2 => assert!(
                matches!(&error, Some(ReshardError::MissingShard { name, rank: 2 })
                    if name == "model.layers.1.mlp.up_proj.weight"),
                "rank 2: {error:?}"
            ),
            _ => assert_eq!(
                error,
                Some(ReshardError::Collective(CollectiveError::PeerLost)),
                "rank {rank}"
            ),
        }
    }
}

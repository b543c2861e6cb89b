//! FSDP (ZeRO-3), alone and under DP (HSDP): the same logits, trained weights and generated
//! tokens as one rank, and per-rank memory well below one rank's.

use std::collections::BTreeMap;

use rlc_plan::model::Layout;
use rlc_runtime::generate::generate;
use rlc_runtime::model::ModelConfig;
use rlc_runtime::optim::{AdamW, AdamWConfig};
use rlc_runtime::parallel::RankGroups;
use rlc_runtime::parallel::fsdp::{Fsdp, FsdpError, MemoryReport};
#[path = "../common/estimate.rs"]
mod estimate;
use estimate::checker_estimate;
use tch::Tensor;

use crate::fixture;

/// What one rank produced.
struct Outcome {
    /// Logits of this data rank's rows.
    logits: Tensor,
    tokens: Tensor,
    weights: BTreeMap<String, Tensor>,
    memory: MemoryReport,
    largest_unit: u64,
}

crate::ranks::rank_result_struct!(Outcome {
    logits,
    tokens,
    weights,
    memory,
    largest_unit
});

/// `[first, first + n)` of the batch rows: this data rank's share.
fn share(groups: &RankGroups, rows: i64) -> (i64, i64) {
    let n = rows / i64::from(groups.layout.data_ranks());
    (groups.data_rank() as i64 * n, n)
}

fn run(config: &ModelConfig, layout: Layout) -> Vec<Outcome> {
    fixture::run_ranks(layout, |groups| {
        // Tensors are not `Sync`: every rank builds the (seeded) full model itself.
        let weights = fixture::named_weights(&fixture::model(config).0);
        let mut model = Fsdp::for_rank(&weights, config, &groups, fixture::adamw_config())
            .expect("sharded model");
        let (ids, mask) = fixture::batch();
        let (first, n) = share(&groups, fixture::BATCH);
        let (ids, mask) = (ids.narrow(0, first, n), mask.narrow(0, first, n));
        let logits = model.logits(&ids, &mask).expect("logits");

        // The ranks of an FSDP group decode the same rows (they share every all-gather); DP
        // replicas split the prompts.
        let (prompt_ids, prompt_mask, generation) =
            fixture::replica_prompts(layout.dp, groups.dp_rank);
        let tokens = generate(&model, &prompt_ids, &prompt_mask, &generation)
            .expect("generation")
            .response_ids;

        model.reset_peak();
        for _ in 0..fixture::STEPS {
            let loss =
                |logprobs: &Tensor| fixture::sft_loss(logprobs, &mask, fixture::batch_tokens());
            model
                .train_step(&ids, &mask, loss, Some(fixture::CLIP), fixture::LR)
                .expect("training step");
        }
        Outcome {
            logits,
            tokens,
            weights: model.full_weights().expect("gathered weights"),
            memory: model.memory(),
            largest_unit: model.largest_unit_bytes(),
        }
    })
}

/// Logits within 1e-5, weights after three steps within 1e-4, the same tokens: on every rank.
fn assert_matches_one_rank(config: &ModelConfig, layout: Layout, outcomes: &[Outcome]) {
    let logits = fixture::reference_logits(config);
    let trained = fixture::reference_training(config);
    let tokens = fixture::reference_generation(config);
    let (mut worst_logits, mut worst_weights) = (0.0f64, 0.0f64);
    for (rank, (outcome, groups)) in outcomes.iter().zip(fixture::all_groups(layout)).enumerate() {
        let (first, n) = share(&groups, fixture::BATCH);
        let diff = fixture::max_diff(&outcome.logits, &logits.narrow(0, first, n));
        assert!(diff <= 1e-5, "rank {rank}: logits differ by {diff:e}");
        worst_logits = worst_logits.max(diff);
        worst_weights = trained
            .iter()
            .filter_map(|(name, w)| Some(fixture::max_diff(outcome.weights.get(name)?, w)))
            .fold(worst_weights, f64::max);
        fixture::assert_weights_close(&format!("rank {rank}"), &outcome.weights, &trained, 1e-4);
        let replicas = i64::from(layout.dp);
        let rows = tokens.size()[0] / replicas;
        let expected = tokens.narrow(0, groups.dp_rank as i64 * rows, rows);
        assert!(
            outcome.tokens.equal(&expected),
            "rank {rank}: tokens {:?} vs {:?}",
            Vec::<i64>::try_from(outcome.tokens.view([-1])).unwrap(),
            Vec::<i64>::try_from(expected.view([-1])).unwrap(),
        );
    }
    eprintln!(
        "{layout:?}: logits within {worst_logits:.1e}, weights after {} steps within \
         {worst_weights:.1e}, tokens equal",
        fixture::STEPS
    );
}

/// Bytes one rank holding the whole model keeps between steps: parameters, gradients and AdamW's
/// two moments, all f32.
fn one_rank_state() -> u64 {
    let (vs, _) = fixture::model(&fixture::config());
    let params: i64 = vs
        .variables()
        .values()
        .map(Tensor::numel)
        .map(|n| n as i64)
        .sum();
    16 * params as u64
}

#[test]
fn fsdp_2_matches_one_rank() {
    let (config, layout) = (fixture::config(), fixture::layout(1, 2, 1, 1));
    assert_matches_one_rank(&config, layout, &run(&config, layout));
}

#[test]
fn fsdp_2_with_a_tied_lm_head_matches_one_rank() {
    // The embedding is gathered by two units and gets gradient from both.
    let (config, layout) = (fixture::tied_config(), fixture::layout(1, 2, 1, 1));
    assert_matches_one_rank(&config, layout, &run(&config, layout));
}

#[test]
fn fsdp_2_with_learned_positions_matches_one_rank() {
    // The position table is gathered with the token embedding (unit 0) and gets its gradient there.
    let (config, layout) = (fixture::learned_config(), fixture::layout(1, 2, 1, 1));
    assert_matches_one_rank(&config, layout, &run(&config, layout));
}

#[test]
fn fsdp_4_matches_one_rank_and_holds_a_quarter_of_the_state_plus_one_unit() {
    let (config, layout) = (fixture::config(), fixture::layout(1, 4, 1, 1));
    if !fixture::fits(layout) {
        return;
    }
    let outcomes = run(&config, layout);
    assert_matches_one_rank(&config, layout, &outcomes);
    let full = one_rank_state();
    for (
        rank,
        Outcome {
            memory,
            largest_unit,
            ..
        },
    ) in outcomes.iter().enumerate()
    {
        // Shards are a quarter of each parameter, rounded up: at most 3 padding elements
        // (16 bytes of state each) per parameter.
        let params = fixture::named_weights(&fixture::model(&fixture::config()).0).len() as u64;
        assert!(memory.state() >= full / 4 && memory.state() <= full / 4 + 16 * 3 * params);
        // Gathering holds the received parts and the unpacked parameters (2 units); backward
        // holds the gathered unit, its full gradients and the reduce-scatter buffer (3 units).
        assert!(
            memory.peak_unsharded <= 3 * largest_unit,
            "rank {rank}: {memory:?}, largest unit {largest_unit}"
        );
        assert!(memory.peak <= memory.state() + 3 * largest_unit + memory.peak_activations);
        assert!(
            memory.peak < full / 2,
            "rank {rank}: peak {} bytes vs one rank's state {full}",
            memory.peak
        );
        eprintln!(
            "FSDP 4 rank {rank}: peak {} B ({:.1}% of one rank's {full} B state): state {}, \
             unsharded {}, activations {}; largest unit {largest_unit}",
            memory.peak,
            100.0 * memory.peak as f64 / full as f64,
            memory.state(),
            memory.peak_unsharded,
            memory.peak_activations,
        );
    }
}

#[test]
fn hsdp_2x2_matches_one_rank() {
    let (config, layout) = (fixture::config(), fixture::layout(2, 2, 1, 1));
    if !fixture::fits(layout) {
        return;
    }
    assert_matches_one_rank(&config, layout, &run(&config, layout));
}

#[test]
fn weight_decay_follows_each_original_parameters_rank_not_its_flat_shard() {
    // Strong decay (0.95 per step) makes a wrong flag visible: matrices decayed, vectors not.
    let config = fixture::config();
    let adamw = AdamWConfig {
        weight_decay: 5.0,
        ..fixture::adamw_config()
    };
    let (ids, mask) = fixture::batch();
    let loss = |logprobs: &Tensor| fixture::sft_loss(logprobs, &mask, fixture::batch_tokens());
    let (vs, model) = fixture::model(&config);
    let mut adam = AdamW::for_var_store(&vs, adamw.clone());
    loss(&model.logprobs(&ids, &mask)).backward();
    adam.step(fixture::LR);
    let expected = fixture::named_weights(&vs);
    let results = fixture::run_ranks(fixture::layout(1, 2, 1, 1), |groups| {
        let weights = fixture::named_weights(&fixture::model(&config).0);
        let mut model = Fsdp::for_rank(&weights, &config, &groups, adamw.clone()).unwrap();
        let (ids, mask) = fixture::batch();
        let (first, n) = share(&groups, fixture::BATCH);
        let (ids, mask) = (ids.narrow(0, first, n), mask.narrow(0, first, n));
        let loss = |logprobs: &Tensor| fixture::sft_loss(logprobs, &mask, fixture::batch_tokens());
        model
            .train_step(&ids, &mask, loss, None, fixture::LR)
            .unwrap();
        model.full_weights().unwrap()
    });
    for (rank, weights) in results.iter().enumerate() {
        fixture::assert_weights_close(&format!("rank {rank}"), weights, &expected, 1e-4);
    }
}

#[test]
fn the_checkers_state_estimate_is_the_measured_shards_within_one_percent() {
    let (config, layout) = (fixture::config(), fixture::layout(1, 4, 1, 1));
    if !fixture::fits(layout) {
        return;
    }
    let outcomes = run(&config, layout);
    let memory = outcomes[0].memory;
    let (ids, _) = fixture::batch();
    let estimate = checker_estimate(&fixture::config(), layout, fixture::BATCH, ids.size()[1]);
    let state = estimate.weights + estimate.gradients + estimate.optimizer_state;
    let error = |estimated: f64, measured: u64| (estimated - measured as f64) / measured as f64;
    // The checker counts no q/k/v biases and no padding: both are small here.
    let state_error = error(state, memory.state());
    assert!(
        state_error.abs() < 0.01,
        "state estimate off by {state_error:.3}"
    );
    eprintln!(
        "checker vs measured (FSDP 4, rank 0): state {state:.0} vs {} B ({:+.1}%); \
         state + activations {:.0} vs peak {} B ({:+.1}%); activations {:.0} vs {} B kept",
        memory.state(),
        100.0 * state_error,
        estimate.total(),
        memory.peak,
        100.0 * error(estimate.total(), memory.peak),
        estimate.activations,
        memory.peak_activations,
    );
}

#[test]
fn bad_weights_and_layouts_are_typed_errors() {
    let config = fixture::config();
    let weights = || fixture::named_weights(&fixture::model(&config).0);
    let results = fixture::run_ranks(fixture::layout(1, 2, 1, 1), |groups| {
        let mut missing = weights();
        missing.remove("model.norm.weight");
        let missing = Fsdp::for_rank(&missing, &config, &groups, fixture::adamw_config()).err();
        let mut extra = weights();
        extra.insert(
            "score.weight".into(),
            Tensor::zeros([1, 64], tch::kind::FLOAT_CPU),
        );
        let extra = Fsdp::for_rank(&extra, &config, &groups, fixture::adamw_config()).err();
        (missing, extra)
    });
    for (missing, extra) in results {
        assert_eq!(
            missing,
            Some(FsdpError::MissingWeight("model.norm.weight".into()))
        );
        assert_eq!(
            extra,
            Some(FsdpError::UnexpectedWeight("score.weight".into()))
        );
    }
    let shape = fixture::run_ranks(fixture::layout(1, 1, 2, 1), |groups| {
        let mut weights = weights();
        weights.insert(
            "lm_head.weight".into(),
            Tensor::zeros([3, 3], tch::kind::FLOAT_CPU),
        );
        let wrong = Fsdp::for_rank(&weights, &config, &groups, fixture::adamw_config()).err();
        let shape = Fsdp::new(
            &weights,
            &config,
            &groups.fsdp,
            &groups.dp,
            fixture::adamw_config(),
        )
        .err();
        (wrong, shape)
    });
    for (wrong, shape) in shape {
        assert_eq!(wrong, Some(FsdpError::Layout { tp: 2, pp: 1 }));
        assert!(
            matches!(shape, Some(FsdpError::WeightShape { .. })),
            "{shape:?}"
        );
    }
}

#[test]
fn a_pass_in_flight_blocks_other_uses_of_the_head_until_it_ends() {
    let config = fixture::config();
    let results = fixture::run_ranks(fixture::layout(1, 2, 1, 1), |groups| {
        let weights = fixture::named_weights(&fixture::model(&config).0);
        let model = Fsdp::for_rank(&weights, &config, &groups, fixture::adamw_config()).unwrap();
        let (ids, mask) = fixture::batch();
        let pass = model.forward(&ids, &mask).unwrap();
        let during = (
            model.logits(&ids, &mask).err(),
            model.forward(&ids, &mask).err(),
        );
        drop(pass);
        (during, model.logits(&ids, &mask).is_ok())
    });
    for ((logits, forward), after) in results {
        assert_eq!(logits, Some(FsdpError::PassInFlight));
        assert_eq!(forward, Some(FsdpError::PassInFlight));
        assert!(after, "the pass ended with its drop");
    }
}

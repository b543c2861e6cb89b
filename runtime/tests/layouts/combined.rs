//! Combined layouts against the whole model on one rank: TP 2 × DP 2 (tensor-parallel replicas),
//! TP 2 × PP 2 (tensor-parallel pipeline stages), DP 2 × TP 2 × PP 2 (eight ranks) and FSDP 2 × TP 2
//! (TP shards sharded again), alone and under DP.

use std::collections::BTreeMap;

use rlc_plan::model::Layout;
use rlc_runtime::generate::generate;
use rlc_runtime::model::{Heads, ModelConfig, token_logprobs};
use rlc_runtime::optim::{AdamW, grad_norm};
use rlc_runtime::parallel::combined::{
    CombinedError, FsdpTp, TpPipeline, data_rows, sum_gradients,
};
use rlc_runtime::parallel::tp::{Split, TpError, TpTransformer};
use rlc_runtime::parallel::{RankGroups, Tape};
use tch::{Device, Tensor, nn};

use crate::fixture::{self, CLIP, LR, STEPS};

fn configs() -> [(&'static str, ModelConfig); 2] {
    [
        ("untied", fixture::config()),
        ("tied", fixture::tied_config()),
    ]
}

/// What one rank produced.
struct Outcome {
    /// Logits of this replica's rows, where this rank has them (the last stage).
    logits: Option<Tensor>,
    /// Tokens generated for this replica's prompts.
    tokens: Tensor,
    weights: BTreeMap<String, Tensor>,
    /// The global gradient norm of the first step, before clipping.
    first_norm: f64,
}

crate::ranks::rank_result_struct!(Outcome {
    logits,
    tokens,
    weights,
    first_norm
});

/// This data rank's rows of the batch.
fn replica_batch(groups: &RankGroups) -> (Tensor, Tensor) {
    let (ids, mask) = fixture::batch();
    let (first, rows) = data_rows(groups, fixture::BATCH).expect("even batch");
    (ids.narrow(0, first, rows), mask.narrow(0, first, rows))
}

/// TP inside DP replicas: a `TpTransformer` per replica, gradients summed over `data`.
fn run_tp_dp(config: &ModelConfig, layout: Layout) -> Vec<Outcome> {
    fixture::run_ranks(layout, |groups| {
        let weights = fixture::named_weights(&fixture::model(config).0);
        let vs = nn::VarStore::new(Device::Cpu);
        let model = TpTransformer::new(&vs.root(), &weights, config, Heads::POLICY, &groups.tp)
            .expect("divisible layout");
        let (ids, mask) = replica_batch(&groups);
        let logits = tch::no_grad(|| model.logits(&Tape::new(), &ids, &mask)).expect("logits");

        let (prompt_ids, prompt_mask, generation) =
            fixture::replica_prompts(groups.layout.dp, groups.dp_rank);
        let tokens = generate(&model, &prompt_ids, &prompt_mask, &generation)
            .expect("generation")
            .response_ids;

        let mut adam = AdamW::for_var_store(&vs, fixture::adamw_config());
        let params: Vec<Tensor> = model
            .params()
            .iter()
            .map(|p| p.tensor.shallow_clone())
            .collect();
        let mut norms = Vec::new();
        for _ in 0..STEPS {
            adam.zero_grad();
            let tape = Tape::new();
            let logprobs = model.logprobs(&tape, &ids, &mask).expect("forward");
            let loss = fixture::sft_loss(&logprobs, &mask, fixture::batch_tokens());
            tape.backward(&[(&loss, None)]).expect("backward");
            sum_gradients(&params, &groups.data).expect("gradient sum");
            norms.push(model.clip_grad_norm(CLIP).expect("clip"));
            adam.step(LR);
        }
        Outcome {
            logits: Some(logits),
            tokens,
            weights: model.full_weights().expect("gathered weights"),
            first_norm: norms[0],
        }
    })
}

/// TP inside pipeline stages (and DP over whole pipelines): `micro` micro-batches per step.
fn run_tp_pp(config: &ModelConfig, layout: Layout, micro: usize) -> Vec<Outcome> {
    fixture::run_ranks(layout, |groups| {
        let weights = fixture::named_weights(&fixture::model(config).0);
        let pipeline = TpPipeline::new(&weights, config, &groups.tp, &groups.pp).expect("TP stage");
        let model = pipeline.model();
        let (ids, mask) = replica_batch(&groups);
        let logits = model.logits(&ids, &mask).expect("logits");

        let (prompt_ids, prompt_mask, generation) =
            fixture::replica_prompts(groups.layout.dp, groups.dp_rank);
        let tokens = generate(model, &prompt_ids, &prompt_mask, &generation)
            .expect("generation")
            .response_ids;

        let mut adam = AdamW::for_var_store(model.var_store(), fixture::adamw_config());
        let tokens_in_batch = fixture::batch_tokens();
        let mut norms = Vec::new();
        for _ in 0..STEPS {
            adam.zero_grad();
            model
                .forward_backward(&ids, &mask, micro, |logits, micro| {
                    let logprobs = token_logprobs(logits, &micro.ids);
                    fixture::sft_loss(&logprobs, &micro.mask, tokens_in_batch)
                })
                .expect("1F1B step");
            sum_gradients(&pipeline.tensors(), &groups.data).expect("gradient sum");
            norms.push(pipeline.clip_grad_norm(CLIP).expect("clip"));
            adam.step(LR);
        }
        let weights = pipeline.full_weights().expect("gathered weights");
        // Each rank's shards, the tied embedding's second copy included, are the gathered ones.
        for param in pipeline.params() {
            let full = &weights[&param.name];
            let own = match param.split {
                Split::Replicated => full.shallow_clone(),
                Split::Along(dim) => {
                    let len = full.size()[dim as usize] / i64::from(layout.tp);
                    full.narrow(dim, groups.tp_rank as i64 * len, len)
                }
            };
            assert!(
                param.tensor.equal(&own),
                "shard of `{}` differs",
                param.name
            );
        }
        Outcome {
            logits,
            tokens,
            weights,
            first_norm: norms[0],
        }
    })
}

/// FSDP over each TP rank's shards (HSDP with `dp > 1`).
fn run_fsdp_tp(config: &ModelConfig, layout: Layout) -> Vec<Outcome> {
    fixture::run_ranks(layout, |groups| {
        let weights = fixture::named_weights(&fixture::model(config).0);
        let mut model =
            FsdpTp::new(&weights, config, &groups, fixture::adamw_config()).expect("sharded model");
        let (ids, mask) = replica_batch(&groups);
        let logits = model.logits(&ids, &mask).expect("logits");

        // The ranks of an FSDP group decode the same rows (they share the gathers).
        let (prompt_ids, prompt_mask, generation) =
            fixture::replica_prompts(groups.layout.dp, groups.dp_rank);
        let tokens = model
            .with_model(|tp| generate(tp, &prompt_ids, &prompt_mask, &generation))
            .expect("gathered model")
            .expect("generation")
            .response_ids;

        let norms: Vec<f64> = (0..STEPS)
            .map(|_| {
                let loss =
                    |logprobs: &Tensor| fixture::sft_loss(logprobs, &mask, fixture::batch_tokens());
                model
                    .train_step(&ids, &mask, loss, Some(CLIP), LR)
                    .expect("training step")
            })
            .collect();
        Outcome {
            logits: Some(logits),
            tokens,
            weights: model.full_weights().expect("gathered weights"),
            first_norm: norms[0],
        }
    })
}

/// The global gradient norm of the whole batch's first step on one rank.
fn reference_norm(config: &ModelConfig) -> f64 {
    let (vs, model) = fixture::model(config);
    let (ids, mask) = fixture::batch();
    fixture::sft_loss(&model.logprobs(&ids, &mask), &mask, fixture::batch_tokens()).backward();
    grad_norm(&vs.trainable_variables())
}

/// Logits within 1e-5 and weights after three steps within 1e-4 of one rank, the same tokens and
/// the first step's gradient norm (clipping is active: it is above [`CLIP`]), on every rank;
/// returns the largest logit and weight differences.
fn assert_matches_one_rank(
    label: &str,
    config: &ModelConfig,
    layout: Layout,
    outcomes: &[Outcome],
) -> (f64, f64) {
    let logits = fixture::reference_logits(config);
    let trained = fixture::reference_training(config);
    let tokens = fixture::reference_generation(config);
    let norm = reference_norm(config);
    assert!(norm > CLIP, "the reference's norm {norm} is not clipped");
    let groups = fixture::all_groups(layout);
    let (mut logit_worst, mut weight_worst) = (0.0f64, 0.0f64);
    for (outcome, groups) in outcomes.iter().zip(&groups) {
        let what = format!("{label} rank {}", groups.rank);
        let is_last = groups.pp_rank + 1 == layout.pp as usize;
        assert_eq!(outcome.logits.is_some(), is_last, "{what}: logits where");
        if let Some(got) = &outcome.logits {
            let (first, rows) = data_rows(groups, fixture::BATCH).unwrap();
            let diff = fixture::max_diff(got, &logits.narrow(0, first, rows));
            assert!(diff <= 1e-5, "{what}: logits differ by {diff:e}");
            logit_worst = logit_worst.max(diff);
        }
        let samples = tokens.size()[0] / i64::from(layout.dp);
        let expected = tokens.narrow(0, groups.dp_rank as i64 * samples, samples);
        assert!(
            outcome.tokens.equal(&expected),
            "{what}: tokens {} vs {expected}",
            outcome.tokens
        );
        let norm_diff = (outcome.first_norm - norm).abs() / norm;
        assert!(
            norm_diff < 1e-6,
            "{what}: gradient norm differs by {norm_diff:e}"
        );
        fixture::assert_weights_close(&what, &outcome.weights, &trained, 1e-4);
        let worst = trained
            .iter()
            .map(|(name, w)| fixture::max_diff(&outcome.weights[name], w))
            .fold(0.0, f64::max);
        weight_worst = weight_worst.max(worst);
    }
    println!("{label}: logits within {logit_worst:e}, weights within {weight_worst:e}");
    (logit_worst, weight_worst)
}

#[test]
fn tp2_dp2_matches_one_rank() {
    let layout = fixture::layout(2, 1, 2, 1);
    if !fixture::fits(layout) {
        return;
    }
    for (name, config) in configs() {
        let outcomes = run_tp_dp(&config, layout);
        assert_matches_one_rank(&format!("{name} tp2·dp2"), &config, layout, &outcomes);
    }
}

#[test]
fn tp2_pp2_matches_one_rank() {
    let layout = fixture::layout(1, 1, 2, 2);
    if !fixture::fits(layout) {
        return;
    }
    for (name, config) in configs()
        .into_iter()
        // The first stage's replicated position table beside its vocabulary-parallel embedding.
        .chain([("learned positions", fixture::learned_config())])
    {
        let outcomes = run_tp_pp(&config, layout, 4);
        assert_matches_one_rank(&format!("{name} tp2·pp2"), &config, layout, &outcomes);
    }
}

#[test]
fn dp2_tp2_pp2_matches_one_rank() {
    let layout = fixture::layout(2, 1, 2, 2);
    if !fixture::fits(layout) {
        return;
    }
    for (name, config) in configs() {
        let outcomes = run_tp_pp(&config, layout, 2);
        assert_matches_one_rank(&format!("{name} dp2·tp2·pp2"), &config, layout, &outcomes);
    }
}

#[test]
fn fsdp2_tp2_matches_one_rank() {
    for layout in [fixture::layout(1, 2, 2, 1), fixture::layout(2, 2, 2, 1)] {
        if !fixture::fits(layout) {
            continue;
        }
        let label = format!("dp{}·fsdp2·tp2", layout.dp);
        let learned = ("learned positions", fixture::learned_config());
        for (name, config) in configs().into_iter().chain([learned]) {
            if layout.dp == 2 && name != "untied" {
                continue;
            }
            let outcomes = run_fsdp_tp(&config, layout);
            assert_matches_one_rank(&format!("{name} {label}"), &config, layout, &outcomes);
        }
    }
}

#[test]
fn indivisible_tp_and_uneven_batches_are_typed_errors_on_every_rank() {
    let config = fixture::config();
    if fixture::fits(fixture::layout(1, 1, 3, 2)) {
        let results = fixture::run_ranks(fixture::layout(1, 1, 3, 2), |groups| {
            let weights = fixture::named_weights(&fixture::model(&config).0);
            TpPipeline::new(&weights, &config, &groups.tp, &groups.pp).err()
        });
        for error in results {
            assert_eq!(
                error,
                Some(CombinedError::Tp(TpError::NotDivisible {
                    what: "query heads",
                    count: 8,
                    tp: 3
                }))
            );
        }
    }
    if fixture::fits(fixture::layout(1, 2, 1, 2)) {
        let staged = fixture::run_ranks(fixture::layout(1, 2, 1, 2), |groups| {
            let weights = fixture::named_weights(&fixture::model(&config).0);
            FsdpTp::new(&weights, &config, &groups, fixture::adamw_config()).err()
        });
        assert!(
            staged
                .iter()
                .all(|e| *e == Some(CombinedError::FsdpWithStages(2)))
        );
    }
    let groups = fixture::all_groups(fixture::layout(2, 1, 2, 1));
    assert_eq!(
        data_rows(&groups[3], 7),
        Err(CombinedError::UnevenBatch {
            rows: 7,
            data_ranks: 2
        })
    );
    assert_eq!(data_rows(&groups[3], 8), Ok((4, 4)));
}

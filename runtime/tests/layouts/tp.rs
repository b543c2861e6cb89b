//! Tensor parallelism over 2 and 4 ranks against the whole model on one rank.

use std::collections::BTreeMap;

use rlc_runtime::generate::generate;
use rlc_runtime::model::{Heads, ModelConfig, Transformer, token_logprobs};
use rlc_runtime::optim::{AdamW, grad_norm};
use rlc_runtime::parallel::tp::{Split, TpError, TpTransformer};
use rlc_runtime::parallel::{RankGroups, Tape};
use tch::{Device, Tensor, nn};

use crate::fixture::{self, CLIP, LR, STEPS};

/// Each configuration under each TP degree of the tests (those this job runs).
fn cases() -> Vec<(&'static str, ModelConfig, u32)> {
    let configs = [
        ("untied", fixture::config()),
        ("tied", fixture::tied_config()),
    ];
    configs
        .into_iter()
        .flat_map(|(name, config)| [2, 4].map(|tp| (name, config.clone(), tp)))
        // The learned position table is replicated: one degree shows it.
        .chain([("learned positions", fixture::learned_config(), 2)])
        .filter(|&(_, _, tp)| fixture::fits(fixture::layout(1, 1, tp, 1)))
        .collect()
}

/// This rank's shards of the fixture's model, in a var store of their own.
fn build<'c>(config: &ModelConfig, groups: &'c RankGroups) -> (nn::VarStore, TpTransformer<'c>) {
    let (vs, _) = fixture::model(config);
    let weights = fixture::named_weights(&vs);
    let shards = nn::VarStore::new(Device::Cpu);
    let model = TpTransformer::new(&shards.root(), &weights, config, Heads::POLICY, &groups.tp)
        .expect("divisible layout");
    (shards, model)
}

#[test]
fn tp_logits_and_logprobs_match_one_rank() {
    let (ids, _) = fixture::batch();
    for (name, config, tp) in cases() {
        let reference = fixture::reference_logits(&config);
        let reference_logprobs = token_logprobs(&reference, &ids);
        let outputs = fixture::run_ranks(fixture::layout(1, 1, tp, 1), |groups| {
            let (_, model) = build(&config, &groups);
            let (ids, mask) = fixture::batch();
            tch::no_grad(|| {
                let tape = Tape::new();
                let logits = model.logits(&tape, &ids, &mask).unwrap();
                let logprobs = model.logprobs(&tape, &ids, &mask).unwrap();
                (logits, logprobs)
            })
        });
        for (rank, (logits, logprobs)) in outputs.iter().enumerate() {
            let logit_diff = fixture::max_diff(logits, &reference);
            let logprob_diff = fixture::max_diff(logprobs, &reference_logprobs);
            eprintln!(
                "{name} tp{tp} rank {rank}: logits {logit_diff:e}, log-probs {logprob_diff:e}"
            );
            assert!(
                logit_diff < 1e-5,
                "{name} tp{tp} rank {rank}: logits differ by {logit_diff:e}"
            );
            assert!(
                logprob_diff < 1e-5,
                "{name} tp{tp} rank {rank}: log-probs differ by {logprob_diff:e}"
            );
        }
    }
}

/// The largest difference of each replicated parameter's gradient between this rank and the
/// others of its TP group.
fn replicated_grad_spread(model: &TpTransformer, groups: &RankGroups) -> f64 {
    model
        .params()
        .iter()
        .filter(|p| p.split == Split::Replicated)
        .map(|p| {
            let grads = groups.tp.all_gather(&p.tensor.grad()).unwrap();
            grads
                .iter()
                .map(|g| fixture::max_diff(g, &grads[0]))
                .fold(0.0, f64::max)
        })
        .fold(0.0, f64::max)
}

/// Every parameter's full gradient, shards gathered over the group.
fn full_grads(model: &TpTransformer, groups: &RankGroups) -> BTreeMap<String, Tensor> {
    model
        .params()
        .iter()
        .map(|p| {
            let grad = p.tensor.grad();
            let full = match p.split {
                Split::Replicated => grad.copy(),
                Split::Along(dim) => Tensor::cat(&groups.tp.all_gather(&grad).unwrap(), dim),
            };
            (p.name.clone(), full)
        })
        .collect()
}

/// The gradients of the first step on one rank (before clipping) and their global norm.
fn reference_gradients(config: &ModelConfig) -> (BTreeMap<String, Tensor>, f64) {
    let (vs, model) = fixture::model(config);
    let (ids, mask) = fixture::batch();
    fixture::sft_loss(&model.logprobs(&ids, &mask), &mask, fixture::batch_tokens()).backward();
    let params: Vec<Tensor> = vs.variables().into_values().collect();
    let grads = vs
        .variables()
        .into_iter()
        .map(|(name, t)| (name, t.grad().copy()))
        .collect();
    (grads, grad_norm(&params))
}

/// The largest gradient difference of any tensor relative to that tensor's largest gradient.
fn relative_grad_diff(
    actual: &BTreeMap<String, Tensor>,
    expected: &BTreeMap<String, Tensor>,
) -> f64 {
    assert_eq!(actual.len(), expected.len(), "gradient names");
    expected
        .iter()
        .map(|(name, g)| {
            let diff = fixture::max_diff(&actual[name], g) / g.abs().max().double_value(&[]);
            if diff > 1e-4 {
                eprintln!("`{name}`: gradient differs by {diff:.2e} (relative)");
            }
            diff
        })
        .fold(0.0, f64::max)
}

/// What one rank saw while training: its first-step gradients (full) and global norm, the
/// largest spread of replicated gradients over the group, and the full weights at the end.
struct Trained {
    first_grads: BTreeMap<String, Tensor>,
    first_norm: f64,
    spread: f64,
    weights: BTreeMap<String, Tensor>,
}

crate::ranks::rank_result_struct!(Trained {
    first_grads,
    first_norm,
    spread,
    weights
});

fn train(config: &ModelConfig, tp: u32) -> Vec<Trained> {
    fixture::run_ranks(fixture::layout(1, 1, tp, 1), |groups| {
        let (vs, model) = build(config, &groups);
        let mut adam = AdamW::for_var_store(&vs, fixture::adamw_config());
        let (ids, mask) = fixture::batch();
        let (mut first_grads, mut first_norm, mut spread) = (BTreeMap::new(), 0.0, 0.0);
        for step in 0..STEPS {
            adam.zero_grad();
            let tape = Tape::new();
            let logprobs = model.logprobs(&tape, &ids, &mask).unwrap();
            let loss = fixture::sft_loss(&logprobs, &mask, fixture::batch_tokens());
            tape.backward(&[(&loss, None)]).unwrap();
            spread = f64::max(spread, replicated_grad_spread(&model, &groups));
            if step == 0 {
                first_grads = full_grads(&model, &groups);
            }
            let norm = model.clip_grad_norm(CLIP).unwrap();
            if step == 0 {
                first_norm = norm;
            }
            adam.step(LR);
        }
        Trained {
            first_grads,
            first_norm,
            spread,
            weights: model.full_weights().unwrap(),
        }
    })
}

/// Gradients, the global norm, replicated gradients (bit-identical on every rank) and the weights
/// after three AdamW steps within 1e-4.
#[test]
fn tp_training_matches_one_rank() {
    for (name, config, tp) in cases() {
        let (expected_grads, expected_norm) = reference_gradients(&config);
        let expected = fixture::reference_training(&config);
        for (rank, trained) in train(&config, tp).iter().enumerate() {
            let what = format!("{name} tp{tp} rank {rank}");
            assert_eq!(
                trained.spread, 0.0,
                "{what}: replicated gradients differ between ranks"
            );
            let grad_diff = relative_grad_diff(&trained.first_grads, &expected_grads);
            let norm_diff = (trained.first_norm - expected_norm).abs() / expected_norm;
            let weight_diff = worst_diff(&trained.weights, &expected);
            eprintln!(
                "{what}: first gradients within {grad_diff:e} (relative), norm {norm_diff:e}, \
                 weights after {STEPS} steps within {weight_diff:e}"
            );
            assert!(
                grad_diff < 1e-5,
                "{what}: gradients differ by {grad_diff:e} (relative)"
            );
            assert!(
                norm_diff < 1e-6,
                "{what}: gradient norm differs by {norm_diff:e}"
            );
            fixture::assert_weights_close(&what, &trained.weights, &expected, 1e-4);
        }
    }
}

fn worst_diff(actual: &BTreeMap<String, Tensor>, expected: &BTreeMap<String, Tensor>) -> f64 {
    expected
        .iter()
        .filter_map(|(name, w)| actual.get(name).map(|a| fixture::max_diff(a, w)))
        .fold(0.0, f64::max)
}

#[test]
fn tp_generation_samples_the_same_tokens_on_every_rank() {
    for (name, config, tp) in cases() {
        let expected = fixture::reference_generation(&config);
        let tokens = fixture::run_ranks(fixture::layout(1, 1, tp, 1), |groups| {
            let (_, model) = build(&config, &groups);
            let (ids, mask) = fixture::prompts();
            generate(&model, &ids, &mask, &fixture::generate_config())
                .unwrap()
                .response_ids
        });
        let expected = Vec::<i64>::try_from(expected.flatten(0, -1)).unwrap();
        for (rank, tokens) in tokens.iter().enumerate() {
            let tokens = Vec::<i64>::try_from(tokens.flatten(0, -1)).unwrap();
            assert_eq!(tokens, expected, "{name} tp{tp} rank {rank}");
        }
    }
}

#[test]
fn an_indivisible_tp_degree_is_a_typed_error() {
    let layout = fixture::layout(1, 1, 3, 1);
    if !fixture::fits(layout) {
        return;
    }
    let config = fixture::config();
    let errors = fixture::run_ranks(layout, |groups| {
        let (vs, _) = fixture::model(&config);
        let shards = nn::VarStore::new(Device::Cpu);
        TpTransformer::new(
            &shards.root(),
            &fixture::named_weights(&vs),
            &config,
            Heads::POLICY,
            &groups.tp,
        )
        .err()
    });
    for error in errors {
        assert_eq!(
            error,
            Some(TpError::NotDivisible {
                what: "query heads",
                count: 8,
                tp: 3
            })
        );
    }
}

/// Critic and reward heads are replicated and read the replicated hidden states.
#[test]
fn tp_value_and_score_heads_match_one_rank() {
    let config = fixture::config();
    let all = Heads {
        lm: true,
        value: true,
        score: true,
    };
    let full = || {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = Transformer::new(&vs.root(), &config, all, fixture::SEED).unwrap();
        (vs, model)
    };
    let (ids, mask) = fixture::batch();
    let (_, reference) = full();
    let (values, scores) =
        tch::no_grad(|| (reference.values(&ids, &mask), reference.scores(&ids, &mask)));
    let outputs = fixture::run_ranks(fixture::layout(1, 1, 2, 1), |groups| {
        let (vs, _) = full();
        let shards = nn::VarStore::new(Device::Cpu);
        let weights = fixture::named_weights(&vs);
        let model = TpTransformer::new(&shards.root(), &weights, &config, all, &groups.tp).unwrap();
        let (ids, mask) = fixture::batch();
        tch::no_grad(|| {
            let tape = Tape::new();
            (
                model.values(&tape, &ids, &mask).unwrap(),
                model.scores(&tape, &ids, &mask).unwrap(),
            )
        })
    });
    for (rank, (tp_values, tp_scores)) in outputs.iter().enumerate() {
        let (value_diff, score_diff) = (
            fixture::max_diff(tp_values, &values),
            fixture::max_diff(tp_scores, &scores),
        );
        assert!(
            value_diff < 1e-5,
            "rank {rank}: values differ by {value_diff:e}"
        );
        assert!(
            score_diff < 1e-5,
            "rank {rank}: scores differ by {score_diff:e}"
        );
    }
}

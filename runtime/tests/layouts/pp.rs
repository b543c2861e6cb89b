//! Pipeline parallelism: PP 2 (two layers a stage) and PP 4 (one), untied and tied LM heads.

use std::collections::BTreeMap;

use rlc_runtime::generate::generate;
use rlc_runtime::model::{ModelConfig, token_logprobs};
use rlc_runtime::optim::AdamW;
use rlc_runtime::parallel::pp::{PipelineError, PipelineModel};
use tch::Tensor;

use crate::fixture;

/// Pipeline stages, micro-batches of a training step, and the tolerance on the weights after
/// three steps. With one micro-batch every stage computes exactly the single rank's operations
/// (measured: equal bits). With four, float32 gradient sums in another order differ by ~1e-8,
/// which Adam's `m / √v` turns into up to ~3e-6 on weights whose gradients are that small (at
/// the fixture's learning rate); one rank with four micro-batches differs from one rank with one
/// by as much, so this is the micro-batching's doing, not the pipeline's.
const TRAINING_RUNS: [(u32, usize, f64); 3] = [(2, 4, 1e-4), (4, 4, 1e-4), (4, 1, 1e-6)];

fn configs() -> [(&'static str, ModelConfig); 3] {
    [
        ("untied", fixture::config()),
        ("tied", fixture::tied_config()),
        // The first stage adds the position table to the token embeddings.
        ("learned positions", fixture::learned_config()),
    ]
}

fn initial_weights(config: &ModelConfig) -> BTreeMap<String, Tensor> {
    fixture::named_weights(&fixture::model(config).0)
}

#[test]
fn logits_match_one_rank() {
    for (what, config) in configs() {
        let expected = fixture::reference_logits(&config);
        for stages in [2, 4] {
            if !fixture::fits(fixture::layout(1, 1, 1, stages)) {
                continue;
            }
            let logits = fixture::run_ranks(fixture::layout(1, 1, 1, stages), |groups| {
                let model = PipelineModel::new(&initial_weights(&config), &config, &groups.pp)
                    .expect("stage");
                let (ids, mask) = fixture::batch();
                model.logits(&ids, &mask).expect("forward")
            });
            let (last, others) = logits.split_last().unwrap();
            assert!(
                others.iter().all(Option::is_none),
                "only the last stage has logits"
            );
            let diff = fixture::max_diff(last.as_ref().unwrap(), &expected);
            println!("{what}, PP {stages}: logits within {diff:e}");
            assert!(
                diff <= 1e-5,
                "{what}, PP {stages}: logits differ by {diff:e}"
            );
        }
    }
}

/// Three AdamW steps on `micro` micro-batches; returns every stage's view of the full weights and
/// the losses the stages reported.
fn train(
    config: &ModelConfig,
    stages: u32,
    micro: usize,
) -> Vec<(BTreeMap<String, Tensor>, Vec<f64>)> {
    fixture::run_ranks(fixture::layout(1, 1, 1, stages), |groups| {
        let model =
            PipelineModel::new(&initial_weights(config), config, &groups.pp).expect("stage");
        let mut adam = AdamW::for_var_store(model.var_store(), fixture::adamw_config());
        let (ids, mask) = fixture::batch();
        let tokens = fixture::batch_tokens();
        let mut losses = Vec::new();
        for _ in 0..fixture::STEPS {
            adam.zero_grad();
            let loss = model
                .forward_backward(&ids, &mask, micro, |logits, micro| {
                    fixture::sft_loss(&token_logprobs(logits, &micro.ids), &micro.mask, tokens)
                })
                .expect("1F1B step");
            model.clip_grad_norm(fixture::CLIP).expect("clip");
            adam.step(fixture::LR);
            losses.push(loss);
        }
        let full = model.full_weights().expect("gather");
        // Each stage's own weights, the tied embedding's second copy included, are the gathered ones.
        for (name, own) in model.var_store().variables() {
            assert!(own.equal(&full[&name]), "stage copy of `{name}` differs");
        }
        (full, losses)
    })
}

#[test]
fn three_training_steps_match_one_rank() {
    for (what, config) in configs() {
        let expected = fixture::reference_training(&config);
        let (_, reference) = fixture::model(&config);
        let (ids, mask) = fixture::batch();
        let first_loss = fixture::sft_loss(
            &reference.logprobs(&ids, &mask),
            &mask,
            fixture::batch_tokens(),
        )
        .double_value(&[]);
        for (stages, micro, tolerance) in TRAINING_RUNS {
            if !fixture::fits(fixture::layout(1, 1, 1, stages)) {
                continue;
            }
            let ranks = train(&config, stages, micro);
            let label = format!("{what}, PP {stages}, {micro} micro-batch(es)");
            for (weights, losses) in &ranks {
                fixture::assert_weights_close(&label, weights, &expected, tolerance);
                assert_eq!(losses, &ranks[0].1, "{label}: every stage reports the loss");
            }
            let worst = expected
                .iter()
                .map(|(name, w)| fixture::max_diff(&ranks[0].0[name], w))
                .fold(0.0, f64::max);
            let loss_diff = (ranks[0].1[0] - first_loss).abs();
            println!("{label}: weights within {worst:e}, first loss within {loss_diff:e}");
            assert!(loss_diff < 1e-5, "{label}: loss {:?}", ranks[0].1);
            assert!(
                ranks[0].1[2] < ranks[0].1[0],
                "{label}: training lowers the loss"
            );
        }
    }
}

#[test]
fn generation_samples_the_same_tokens_on_every_stage() {
    for (what, config) in configs() {
        let expected = fixture::reference_generation(&config);
        for stages in [2, 4] {
            if !fixture::fits(fixture::layout(1, 1, 1, stages)) {
                continue;
            }
            let tokens = fixture::run_ranks(fixture::layout(1, 1, 1, stages), |groups| {
                let model = PipelineModel::new(&initial_weights(&config), &config, &groups.pp)
                    .expect("stage");
                let (ids, mask) = fixture::prompts();
                generate(&model, &ids, &mask, &fixture::generate_config())
                    .expect("generation")
                    .response_ids
            });
            for (stage, got) in tokens.iter().enumerate() {
                assert!(
                    got.equal(&expected),
                    "{what}, PP {stages}, stage {stage}: {got} vs {expected}"
                );
            }
        }
    }
}

#[test]
fn bad_splits_and_inputs_are_errors_on_every_stage() {
    let two_layers = ModelConfig {
        layers: 2,
        ..fixture::config()
    };
    if fixture::fits(fixture::layout(1, 1, 1, 4)) {
        let errors = fixture::run_ranks(fixture::layout(1, 1, 1, 4), |groups| {
            PipelineModel::new(&initial_weights(&two_layers), &two_layers, &groups.pp).err()
        });
        assert!(errors.iter().all(|e| *e
            == Some(PipelineError::TooManyStages {
                stages: 4,
                layers: 2
            })));
    }

    let results = fixture::run_ranks(fixture::layout(1, 1, 1, 2), |groups| {
        let config = fixture::config();
        let mut partial = initial_weights(&config);
        partial.remove("model.layers.3.mlp.up_proj.weight");
        let missing = PipelineModel::new(&partial, &config, &groups.pp).err();
        let model = PipelineModel::new(&initial_weights(&config), &config, &groups.pp).unwrap();
        let (ids, mask) = fixture::batch();
        let no_loss = |_: &Tensor, _: &_| Tensor::from(0.0);
        let micro = model.forward_backward(&ids, &mask, 9, no_loss).err();
        let shape = model.logits(&ids, &mask.narrow(1, 0, 5)).err();
        let token = model.logits(&(&ids + 64), &mask).err();
        (missing, micro, shape, token)
    });
    for (stage, (missing, micro, shape, token)) in results.into_iter().enumerate() {
        let expected_missing = (stage == 1)
            .then(|| PipelineError::MissingWeight("model.layers.3.mlp.up_proj.weight".into()));
        assert_eq!(missing, expected_missing);
        assert_eq!(
            micro,
            Some(PipelineError::MicroBatches { micro: 9, rows: 8 })
        );
        assert!(matches!(shape, Some(PipelineError::InputShape { .. })));
        assert!(matches!(
            token,
            Some(PipelineError::TokenOutOfRange { vocab: 64, .. })
        ));
    }
}

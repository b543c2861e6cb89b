use tch::{Device, Kind, Tensor, nn};

use super::*;
use crate::rng::Rng;

fn build(config: &ModelConfig, heads: Heads, seed: u64) -> (nn::VarStore, Transformer) {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Transformer::new(&vs.root(), config, heads, seed).unwrap();
    (vs, model)
}

fn random_ids(seed: u64, batch: i64, steps: i64, vocab: i64) -> Tensor {
    let mut rng = Rng::new(seed);
    let ids: Vec<i64> = (0..batch * steps)
        .map(|_| (rng.next_u64() % vocab as u64) as i64)
        .collect();
    Tensor::from_slice(&ids).view([batch, steps])
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

fn assert_every_parameter_has_gradient(vs: &nn::VarStore) {
    for (name, param) in vs.variables() {
        let grad = param.grad();
        assert!(grad.defined(), "{name} received no gradient");
        let size = grad.abs().sum(Kind::Double).double_value(&[]);
        assert!(size > 0.0, "{name} received an all-zero gradient");
    }
}

#[test]
fn lm_loss_reaches_every_parameter() {
    for (tie_embeddings, qkv_bias) in [(false, false), (true, true)] {
        let config = ModelConfig {
            tie_embeddings,
            qkv_bias,
            ..ModelConfig::tiny()
        };
        let (vs, model) = build(&config, Heads::POLICY, 0);
        let ids = random_ids(1, 2, 9, config.vocab);
        let mask = Tensor::ones([2, 9], (Kind::Int64, Device::Cpu));
        let loss = -model.logprobs(&ids, &mask).mean(Kind::Float);
        loss.backward();
        assert_every_parameter_has_gradient(&vs);
    }
}

#[test]
fn value_and_score_losses_reach_every_parameter() {
    let config = ModelConfig::tiny();
    let ids = random_ids(2, 2, 7, config.vocab);
    let mask = Tensor::from_slice(&[1i64, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0]).view([2, 7]);

    let (vs, critic) = build(&config, Heads::CRITIC, 0);
    let values = critic.values(&ids, &mask);
    assert_eq!(values.size(), [2, 7]);
    (values * &mask)
        .pow_tensor_scalar(2)
        .sum(Kind::Float)
        .backward();
    assert_every_parameter_has_gradient(&vs);

    let (vs, reward) = build(&config, Heads::REWARD, 0);
    let scores = reward.scores(&ids, &mask);
    assert_eq!(scores.size(), [2]);
    scores.pow_tensor_scalar(2).sum(Kind::Float).backward();
    assert_every_parameter_has_gradient(&vs);
}

#[test]
fn parameter_names_follow_the_hugging_face_llama_layout() {
    let config = ModelConfig {
        layers: 1,
        qkv_bias: true,
        ..ModelConfig::tiny()
    };
    let (vs, _) = build(&config, Heads::POLICY, 0);
    let mut names: Vec<String> = vs.variables().into_keys().collect();
    names.sort();
    let layer = "model.layers.0";
    let mut expected = vec![
        "lm_head.weight".to_string(),
        "model.embed_tokens.weight".to_string(),
        "model.norm.weight".to_string(),
        format!("{layer}.input_layernorm.weight"),
        format!("{layer}.post_attention_layernorm.weight"),
        format!("{layer}.mlp.gate_proj.weight"),
        format!("{layer}.mlp.up_proj.weight"),
        format!("{layer}.mlp.down_proj.weight"),
        format!("{layer}.self_attn.q_proj.weight"),
        format!("{layer}.self_attn.q_proj.bias"),
        format!("{layer}.self_attn.k_proj.weight"),
        format!("{layer}.self_attn.k_proj.bias"),
        format!("{layer}.self_attn.v_proj.weight"),
        format!("{layer}.self_attn.v_proj.bias"),
        format!("{layer}.self_attn.o_proj.weight"),
    ];
    expected.sort();
    assert_eq!(names, expected);
    let q = &vs.variables()[&format!("{layer}.self_attn.k_proj.weight")];
    assert_eq!(
        q.size(),
        [config.kv_heads * config.head_dim(), config.hidden]
    );
}

#[test]
fn tied_model_has_no_separate_lm_head() {
    let config = ModelConfig {
        tie_embeddings: true,
        ..ModelConfig::tiny()
    };
    let (vs, _) = build(&config, Heads::POLICY, 0);
    assert!(!vs.variables().contains_key("lm_head.weight"));
}

#[test]
fn same_seed_gives_same_weights() {
    let config = ModelConfig::tiny();
    let (a, _) = build(&config, Heads::POLICY, 3);
    let (b, _) = build(&config, Heads::POLICY, 3);
    let (c, _) = build(&config, Heads::POLICY, 4);
    let (a, b, c) = (a.variables(), b.variables(), c.variables());
    for (name, weight) in &a {
        assert!(weight.equal(&b[name]), "{name} differs for the same seed");
    }
    let name = "model.layers.1.mlp.up_proj.weight";
    assert!(
        !a[name].equal(&c[name]),
        "different seeds gave the same {name}"
    );
    let std = a[name].std(true).double_value(&[]);
    assert!((std - INIT_STD).abs() < 0.002, "init std {std}");
}

#[test]
fn padding_on_either_side_does_not_change_real_positions() {
    let config = ModelConfig::tiny();
    let (_, model) = build(
        &config,
        Heads {
            lm: true,
            value: false,
            score: true,
        },
        5,
    );
    let ids = random_ids(6, 1, 6, config.vocab);
    let full = Tensor::ones([1, 6], (Kind::Int64, Device::Cpu));
    let reference = model.logits(&ids, &full);
    let reference_score = model.scores(&ids, &full);

    let pad = Tensor::full([1, 3], 7, (Kind::Int64, Device::Cpu));
    let zeros = Tensor::zeros([1, 3], (Kind::Int64, Device::Cpu));
    let left = Tensor::cat(&[&pad, &ids], 1);
    let left_mask = Tensor::cat(&[&zeros, &full], 1);
    let right = Tensor::cat(&[&ids, &pad], 1);
    let right_mask = Tensor::cat(&[&full, &zeros], 1);

    let left_logits = model.logits(&left, &left_mask).narrow(1, 3, 6);
    let right_logits = model.logits(&right, &right_mask).narrow(1, 0, 6);
    assert!(max_abs_diff(&left_logits, &reference) < 1e-5);
    assert!(max_abs_diff(&right_logits, &reference) < 1e-5);
    assert!(max_abs_diff(&model.scores(&left, &left_mask), &reference_score) < 1e-5);
    assert!(max_abs_diff(&model.scores(&right, &right_mask), &reference_score) < 1e-5);
    // Reading the score anywhere but the last real token would give a different number.
    let unmasked_right = model.scores(&right, &Tensor::ones([1, 9], (Kind::Int64, Device::Cpu)));
    assert!(max_abs_diff(&unmasked_right, &reference_score) > 1e-6);
}

#[test]
fn later_tokens_do_not_change_earlier_logits() {
    let config = ModelConfig::tiny();
    let (_, model) = build(&config, Heads::POLICY, 0);
    let ids = random_ids(8, 1, 8, config.vocab);
    let changed = ids.copy();
    let _ = changed.narrow(1, 5, 3).fill_(1);
    let mask = Tensor::ones([1, 8], (Kind::Int64, Device::Cpu));
    let a = model.logits(&ids, &mask);
    let b = model.logits(&changed, &mask);
    assert!(max_abs_diff(&a.narrow(1, 0, 5), &b.narrow(1, 0, 5)) == 0.0);
    assert!(max_abs_diff(&a.narrow(1, 5, 3), &b.narrow(1, 5, 3)) > 1e-4);
}

#[test]
fn logprobs_are_log_softmax_of_the_realised_next_token() {
    let config = ModelConfig::tiny();
    let (_, model) = build(&config, Heads::POLICY, 0);
    let ids = random_ids(9, 2, 5, config.vocab);
    let mask = Tensor::ones([2, 5], (Kind::Int64, Device::Cpu));
    let logits = model.logits(&ids, &mask).to_kind(Kind::Double);
    let logprobs = model.logprobs(&ids, &mask);
    assert_eq!(logprobs.size(), [2, 4]);
    for b in 0..2 {
        for t in 0..4 {
            let row = logits.get(b).get(t);
            let next = ids.int64_value(&[b, t + 1]);
            let expected = row.double_value(&[next]) - row.logsumexp([0], false).double_value(&[]);
            let got = logprobs.double_value(&[b, t]);
            assert!(
                (got - expected).abs() < 1e-5,
                "[{b},{t}] {got} vs {expected}"
            );
        }
    }
}

fn learned() -> ModelConfig {
    ModelConfig {
        positions: Positions::Learned,
        ..ModelConfig::tiny()
    }
}

#[test]
fn learned_positions_add_a_seeded_table_and_reach_its_gradient() {
    let config = learned();
    let (vs, model) = build(&config, Heads::POLICY, 3);
    let table = vs
        .variables()
        .remove("model.embed_positions.weight")
        .expect("a position table");
    assert_eq!(table.size(), [config.max_len, config.hidden]);
    // Drawn like the token embedding, from the model's own generator.
    let std = table.std(true).double_value(&[]);
    assert!((0.015..0.025).contains(&std), "{std}");
    let (again, _) = build(&config, Heads::POLICY, 3);
    let same = again.variables()["model.embed_positions.weight"].shallow_clone();
    assert_eq!(max_abs_diff(&table, &same), 0.0);
    // The rotary model has no such table.
    let (rope, _) = build(&ModelConfig::tiny(), Heads::POLICY, 3);
    assert!(
        !rope
            .variables()
            .contains_key("model.embed_positions.weight")
    );

    let ids = random_ids(1, 2, 9, config.vocab);
    let mask = Tensor::ones([2, 9], (Kind::Int64, Device::Cpu));
    (-model.logprobs(&ids, &mask).mean(Kind::Float)).backward();
    assert_every_parameter_has_gradient(&vs);
}

#[test]
fn learned_positions_are_absolute_and_read_the_table() {
    let config = learned();
    let (vs, model) = build(&config, Heads::POLICY, 5);
    // One token repeated: without positions every row would see the same keys and values.
    let ids = Tensor::full([1, 6], 7, (Kind::Int64, Device::Cpu));
    let mask = Tensor::ones([1, 6], (Kind::Int64, Device::Cpu));
    let logits = model.logits(&ids, &mask);
    let first = logits.narrow(1, 0, 1);
    let last = logits.narrow(1, 5, 1);
    assert!(max_abs_diff(&first, &last) > 1e-4);
    // Left padding keeps the real tokens' positions (they count real tokens only).
    let pad = Tensor::zeros([1, 2], (Kind::Int64, Device::Cpu));
    let padded_ids = Tensor::cat(&[&pad, &ids], 1);
    let padded_mask = Tensor::cat(&[&pad, &mask], 1);
    let padded = model.logits(&padded_ids, &padded_mask).narrow(1, 2, 6);
    assert!(max_abs_diff(&padded, &logits) < 1e-5);
    // Zeroing the table changes the logits: the forward pass reads it.
    tch::no_grad(|| {
        let _ = vs.variables()["model.embed_positions.weight"]
            .shallow_clone()
            .zero_();
    });
    let without = model.logits(&ids, &mask);
    assert!(max_abs_diff(&without, &logits) > 1e-4);
    assert!(max_abs_diff(&without.narrow(1, 0, 1), &without.narrow(1, 5, 1)) < 1e-5);
}

#[test]
fn learned_positions_decode_with_a_cache_as_in_one_pass() {
    let config = learned();
    let (_vs, model) = build(&config, Heads::POLICY, 9);
    let ids = random_ids(4, 2, 7, config.vocab);
    let mask = Tensor::ones([2, 7], (Kind::Int64, Device::Cpu));
    let full = model.lm_head(&model.hidden_states(&ids, &mask, None));
    let mut cache = KvCache::new(config.layers as usize);
    let prefix = model.hidden_states(
        &ids.narrow(1, 0, 4),
        &mask.narrow(1, 0, 4),
        Some(&mut cache),
    );
    let rest = model.hidden_states(&ids.narrow(1, 4, 3), &mask, Some(&mut cache));
    let stepped = model.lm_head(&Tensor::cat(&[prefix, rest], 1));
    assert!(max_abs_diff(&full, &stepped) < 1e-4);
}

/// Positions unattended in the middle of a sequence (the holes of a multi-turn rollout) change
/// nothing for the tokens around them: the logits at the real tokens equal those of the
/// sequence without the holes, for rotary and for learned positions.
#[test]
fn holes_in_the_middle_change_nothing() {
    for positions in [Positions::Rope, Positions::Learned] {
        let config = ModelConfig {
            positions,
            ..ModelConfig::tiny()
        };
        let vs = nn::VarStore::new(Device::Cpu);
        let model = Transformer::new(&vs.root(), &config, Heads::POLICY, 3).unwrap();
        let compact = Tensor::from_slice(&[5i64, 6, 7, 8, 9, 10, 11]).view([1, 7]);
        // Two holes after the third token, one after the fifth (pad id 0, attention 0).
        let holed = Tensor::from_slice(&[5i64, 6, 7, 0, 0, 8, 9, 0, 10, 11]).view([1, 10]);
        let mask = Tensor::from_slice(&[1i64, 1, 1, 0, 0, 1, 1, 0, 1, 1]).view([1, 10]);
        let a = model.logits(&compact, &compact.ones_like());
        let b = model.logits(&holed, &mask);
        let real = Tensor::from_slice(&[0i64, 1, 2, 5, 6, 8, 9]);
        let b = b.index_select(1, &real);
        let diff = (a - b).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "{positions:?}: logits differ by {diff}");
    }
}

#[test]
fn outputs_at_some_positions_equal_the_whole_pass_there_in_value_and_gradient() {
    // Rotary positions over grouped and ungrouped heads, learned positions, left padding.
    let ungrouped = ModelConfig {
        kv_heads: 4,
        ..ModelConfig::tiny()
    };
    for config in [ModelConfig::tiny(), ungrouped, learned()] {
        let ids = random_ids(5, 3, 9, config.vocab);
        let mask = Tensor::ones([3, 9], (Kind::Int64, Device::Cpu));
        let _ = mask.get(1).narrow(0, 0, 2).fill_(0);
        let rows = Rows { first: 4, len: 4 };
        let grads = |whole: bool| {
            let (vs, policy) = build(&config, Heads::POLICY, 0);
            // Random prompts share no prefix: this is the one-pass path.
            let logp = if whole {
                policy.logprobs(&ids, &mask).narrow(1, rows.first, rows.len)
            } else {
                policy.logprobs_at(&ids, &mask, rows)
            };
            logp.sum(Kind::Float).backward();
            let grads: std::collections::BTreeMap<String, Tensor> = vs
                .variables()
                .into_iter()
                .map(|(name, p)| (name, p.grad()))
                .collect();
            (logp.detach(), grads)
        };
        let (whole, whole_grads) = grads(true);
        let (some, some_grads) = grads(false);
        assert!(max_abs_diff(&whole, &some) < 1e-5);
        assert_eq!(whole_grads.len(), some_grads.len());
        for ((name, a), b) in whole_grads.iter().zip(some_grads.values()) {
            assert!(max_abs_diff(a, b) < 1e-5, "{name}");
        }
        let (_, critic) = build(&config, Heads::CRITIC, 0);
        let values = critic.values(&ids, &mask).narrow(1, rows.first, rows.len);
        assert!(max_abs_diff(&values, &critic.values_at(&ids, &mask, rows)) < 1e-5);
    }
}

#[test]
fn undifferentiated_passes_equal_differentiated_ones() {
    // No gradient: the short-attention loops; with one: libtorch's kernel.
    let config = ModelConfig::tiny();
    let (_vs, model) = build(&config, Heads::POLICY, 3);
    let ids = random_ids(6, 4, 8, config.vocab);
    let mask = Tensor::ones([4, 8], (Kind::Int64, Device::Cpu));
    let _ = mask.get(2).narrow(0, 0, 3).fill_(0);
    let with_grad = model.logprobs(&ids, &mask);
    assert!(with_grad.requires_grad());
    let without = tch::no_grad(|| model.logprobs(&ids, &mask));
    assert!(max_abs_diff(&with_grad, &without) < 1e-5);
}

#[test]
fn a_groups_shared_prompt_runs_once_with_the_same_values_and_gradients() {
    // 3 prompts (one left-padded) × 4 samples each, 4 response tokens: the prompt positions run
    // once per prompt and every sample reads their cache.
    let config = learned();
    let (prompts, samples, prompt_len, response) = (3, 4, 5, 4);
    let prompt_ids = random_ids(7, prompts, prompt_len, config.vocab);
    let prompt_mask = Tensor::ones([prompts, prompt_len], (Kind::Int64, Device::Cpu));
    let _ = prompt_mask.get(1).narrow(0, 0, 2).fill_(0);
    let rows = prompts * samples;
    let repeat = |t: &Tensor| t.repeat_interleave_self_int(samples, 0, None);
    let ids = Tensor::cat(
        &[
            repeat(&prompt_ids),
            random_ids(8, rows, response, config.vocab),
        ],
        1,
    );
    let mask = Tensor::cat(
        &[
            repeat(&prompt_mask),
            Tensor::ones([rows, response], (Kind::Int64, Device::Cpu)),
        ],
        1,
    );
    let read = Rows {
        first: prompt_len - 1,
        len: response,
    };
    let run = |shared: bool| {
        let (vs, policy) = build(&config, Heads::POLICY, 4);
        let logp = if shared {
            policy.logprobs_at(&ids, &mask, read)
        } else {
            policy.logprobs(&ids, &mask).narrow(1, read.first, read.len)
        };
        let undifferentiated = tch::no_grad(|| policy.logprobs_at(&ids, &mask, read));
        (&logp * Tensor::arange(rows, (Kind::Float, Device::Cpu)).view([rows, 1]))
            .sum(Kind::Float)
            .backward();
        let grads: std::collections::BTreeMap<String, Tensor> = vs
            .variables()
            .into_iter()
            .map(|(name, p)| (name, p.grad()))
            .collect();
        (logp.detach(), undifferentiated, grads)
    };
    let (whole, _, whole_grads) = run(false);
    let (shared, undifferentiated, shared_grads) = run(true);
    assert!(max_abs_diff(&whole, &shared) < 1e-5);
    assert!(max_abs_diff(&whole, &undifferentiated) < 1e-5);
    for ((name, a), b) in whole_grads.iter().zip(shared_grads.values()) {
        assert!(max_abs_diff(a, b) < 1e-5, "{name}");
    }
    // A response of no tokens reads nothing (and does not fail).
    let (_vs, policy) = build(&config, Heads::POLICY, 4);
    let none = Rows {
        first: prompt_len - 1,
        len: 0,
    };
    let prompt = ids.narrow(1, 0, prompt_len);
    let prompt_mask = mask.narrow(1, 0, prompt_len);
    assert_eq!(
        policy.logprobs_at(&prompt, &prompt_mask, none).size(),
        [rows, 0]
    );
}

/// `precision = bf16`: the variables, the activations and the gradients are bfloat16, the
/// log-probabilities, values and scores float32, and the outputs those of the float32 model to
/// bfloat16's rounding (an ulp is 2⁻⁸ relative).
#[test]
fn a_bfloat16_model_computes_in_bfloat16_close_to_its_float32_self() {
    let config = ModelConfig::tiny();
    let ids = random_ids(3, 3, 10, config.vocab);
    let mask = Tensor::from_slice(&[0i64, 0, 1, 1, 1, 1, 1, 1, 1, 1])
        .view([1, 10])
        .repeat([3, 1]);
    for heads in [Heads::POLICY, Heads::CRITIC, Heads::REWARD] {
        let (_, float) = build(&config, heads, 4);
        let (mut vs, half) = build(&config, heads, 4);
        vs.bfloat16();
        assert_eq!(half.kind(), Kind::BFloat16);
        let hidden = half.hidden_states(&ids, &mask, None);
        assert_eq!(hidden.kind(), Kind::BFloat16);
        let (got, expected) = if heads.lm {
            (half.logprobs(&ids, &mask), float.logprobs(&ids, &mask))
        } else if heads.value {
            (half.values(&ids, &mask), float.values(&ids, &mask))
        } else {
            (half.scores(&ids, &mask), float.scores(&ids, &mask))
        };
        assert_eq!(got.kind(), Kind::Float, "{heads:?}");
        let live = if heads.score {
            Tensor::ones([3], (Kind::Float, Device::Cpu))
        } else {
            let width = got.size()[1];
            mask.narrow(1, 10 - width, width).to_kind(Kind::Float)
        };
        let diff = ((&got - &expected) * &live).abs().max().double_value(&[]);
        let scale = (&expected * &live).abs().max().double_value(&[]);
        // Rounding, not another function: within a few ulps of the largest output, and not 0.
        assert!(
            diff > 0.0,
            "{heads:?}: the bfloat16 model computed in float32"
        );
        // Measured: 1.7e-3 (log-probs up to 4.2), 1.1e-3 (values), 6.4e-4 (scores).
        assert!(
            diff < 0.01 * scale.max(1.0),
            "{heads:?}: {diff} (outputs up to {scale})"
        );
        (got * &live).sum(Kind::Float).backward();
        for (name, param) in vs.variables() {
            assert_eq!(param.grad().kind(), Kind::BFloat16, "{name}");
        }
        assert_every_parameter_has_gradient(&vs);
    }
}

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

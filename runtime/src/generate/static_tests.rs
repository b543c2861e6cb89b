//! The static decode step (the body of a captured graph on a GPU), run eagerly on the CPU: the
//! same rollout as the eager decoder, on batch sizes that are powers of two, in buffers that
//! never move; and the same multi-turn episodes.

use tch::{Device, Tensor, nn};

use super::static_decode::{self, Recording};
use super::turns_tests::{observation, scripted};
use super::*;
use crate::model::{Heads, ModelConfig};

fn model(seed: u64) -> (nn::VarStore, Transformer) {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Transformer::new(&vs.root(), &ModelConfig::tiny(), Heads::POLICY, seed).unwrap();
    (vs, model)
}

/// The static decoder's rollout and the batch sizes its steps ran for, next to the eager
/// decoder's rollout, with the stop flag read every `check_every` steps in both.
fn both(
    model: &Transformer,
    prompts: &[Vec<i64>],
    config: &GenerateConfig,
    check_every: i64,
) -> (Rollout, Vec<i64>, Rollout) {
    let (ids, mask) = left_pad(prompts, 0);
    validate(model, &ids, &mask, config).unwrap();
    let mut runner = Recording::default();
    let fixed = tch::no_grad(|| {
        static_decode::generate(model, &ids, &mask, config, check_every, &mut runner)
    })
    .unwrap();
    let eager =
        tch::no_grad(|| Decoder::new(model, &ids, &mask, config, check_every).run()).unwrap();
    (fixed, runner.batches, eager)
}

fn assert_same_rollout(fixed: &Rollout, eager: &Rollout) {
    assert!(fixed.prompt_ids.equal(&eager.prompt_ids));
    assert!(fixed.prompt_mask.equal(&eager.prompt_mask));
    assert!(fixed.group_ids.equal(&eager.group_ids));
    assert_eq!(fixed.response_ids.size(), eager.response_ids.size());
    assert!(
        fixed.response_ids.equal(&eager.response_ids),
        "{:?}\nvs\n{:?}",
        Vec::<Vec<i64>>::try_from(&fixed.response_ids),
        Vec::<Vec<i64>>::try_from(&eager.response_ids)
    );
    assert!(fixed.response_mask.equal(&eager.response_mask));
    // Attention over the whole cache, its unwritten columns masked, rounds differently.
    assert!(
        fixed
            .token_logprobs
            .allclose(&eager.token_logprobs, 1e-5, 1e-5, false)
    );
    match (&fixed.logits, &eager.logits) {
        (Some(f), Some(e)) => assert!(f.allclose(e, 1e-5, 1e-5, false)),
        (None, None) => {}
        _ => panic!("one decoder returned logits, the other not"),
    }
}

#[test]
fn greedy_static_decoding_is_the_eager_rollout() {
    let (_vs, model) = model(3);
    let prompts = [vec![5, 9, 2, 7, 1], vec![4], vec![8, 3, 3]];
    let config = GenerateConfig {
        max_new: 12,
        ..GenerateConfig::default()
    };
    let (fixed, batches, eager) = both(&model, &prompts, &config, 1);
    assert_same_rollout(&fixed, &eager);
    assert_eq!(fixed.response_ids.size(), [3, 12]);
    // Eleven steps after the prefill's token, all on the whole batch.
    assert_eq!(batches, [3; 11]);
}

#[test]
fn sampled_static_decoding_with_stops_is_the_eager_rollout() {
    let (_vs, model) = model(4);
    let prompts: Vec<Vec<i64>> = (0..6).map(|i| vec![1 + i, 2 + 2 * i, 3]).collect();
    let sampling = SamplingConfig {
        temperature: 1.3,
        top_k: Some(20),
        top_p: Some(0.95),
    };
    for check_every in [1, 4] {
        let config = GenerateConfig {
            max_new: 20,
            samples_per_prompt: 3,
            eos_token_id: Some(7),
            pad_token_id: 1,
            sampling: sampling.clone(),
            seed: 11,
            return_logits: true,
            rows_of: Some((5, 40)),
            first_position: 2,
            ..GenerateConfig::default()
        };
        let (fixed, _, eager) = both(&model, &prompts, &config, check_every);
        assert_same_rollout(&fixed, &eager);
    }
}

#[test]
fn stopped_rows_leave_for_power_of_two_batches_and_the_rollout_is_the_same() {
    let (_vs, model) = model(5);
    let prompts: Vec<Vec<i64>> = (0..16).map(|i| vec![1 + i % 7, 2 + i % 11, 3]).collect();
    let config = |eos: Option<i64>| GenerateConfig {
        max_new: 48,
        samples_per_prompt: 4,
        eos_token_id: eos,
        sampling: SamplingConfig::at_temperature(1.5),
        seed: 9,
        ..GenerateConfig::default()
    };
    // The token sampled most often stops rows early and late.
    let (probe, _, _) = both(&model, &prompts, &config(None), 1);
    let eos = probe
        .response_ids
        .flatten(0, -1)
        .bincount(None::<Tensor>, ModelConfig::tiny().vocab)
        .argmax(0, false)
        .int64_value(&[]);
    let (fixed, batches, eager) = both(&model, &prompts, &config(Some(eos)), 1);
    assert_same_rollout(&fixed, &eager);
    let lengths = fixed.response_mask.sum_dim_intlist(1, false, Kind::Int64);
    assert!(
        lengths.min().int64_value(&[]) < lengths.max().int64_value(&[]),
        "rows must stop at different lengths for the test to mean anything"
    );
    // Every batch a power of two, never growing, starting at all 64 rows and shrinking.
    assert_eq!(batches[0], 64);
    assert!(batches.iter().all(|&b| (b as u64).is_power_of_two()));
    assert!(batches.windows(2).all(|w| w[1] <= w[0]), "{batches:?}");
    assert!(batches.last() < batches.first(), "{batches:?}");
    // Without compaction, the whole batch to the end.
    let whole = GenerateConfig {
        compact_finished: false,
        ..config(Some(eos))
    };
    let (kept, batches, _) = both(&model, &prompts, &whole, 1);
    assert!(kept.response_ids.equal(&fixed.response_ids));
    assert!(batches.iter().all(|&b| b == 64));
}

/// Multi-turn episodes by the static step and by the eager decoder, against the same scripted
/// environment (rows 1 and 2 done after turn 0 and 1, the others observing 0..3 tokens), with
/// the stop flag read every `check_every` tokens in both; and the batch sizes of the static
/// steps.
fn both_turns(
    model: &Transformer,
    config: &GenerateConfig,
    turns: TurnsConfig,
    check_every: i64,
) -> ((TurnsRollout, Vec<i64>), TurnsRollout, bool) {
    let prompts: Vec<Vec<i64>> = (0..5)
        .map(|i| vec![2 + i, 3 + 2 * i, 4][..1 + i as usize % 3].to_vec())
        .collect();
    let (ids, mask) = left_pad(&prompts, config.pad_token_id);
    let reply = |t: i64, r: i64, _: &[i64]| match (t, r) {
        (0, 1) | (1, 2) => Reply::Done,
        _ => Reply::Observe(observation(t, r % 6)),
    };
    let mut runner = Recording::default();
    let mut env = scripted(reply);
    let fixed = tch::no_grad(|| {
        static_decode::generate_turns(
            model,
            &ids,
            &mask,
            config,
            turns,
            &mut env,
            check_every,
            &mut runner,
        )
    })
    .unwrap();
    let mut eager_env = scripted(reply);
    let eager = turns::generate_turns_checking(
        model,
        &ids,
        &mask,
        config,
        turns,
        &mut eager_env,
        check_every,
    )
    .unwrap();
    assert_eq!(env.calls, eager_env.calls, "what the environment saw");
    // Whether some turn ended before its budget (the test means more then).
    let early = env
        .calls
        .iter()
        .flat_map(|(_, _, responses)| responses)
        .any(|r| (r.len() as i64) < config.max_new);
    ((fixed, runner.batches), eager, early)
}

fn assert_same_episodes(fixed: &TurnsRollout, eager: &TurnsRollout) {
    for (name, a, b) in [
        ("prompt ids", &fixed.prompt_ids, &eager.prompt_ids),
        ("prompt mask", &fixed.prompt_mask, &eager.prompt_mask),
        ("group ids", &fixed.group_ids, &eager.group_ids),
        ("response ids", &fixed.response_ids, &eager.response_ids),
        ("attention", &fixed.attention, &eager.attention),
        ("policy", &fixed.policy, &eager.policy),
        ("turn", &fixed.turn, &eager.turn),
        ("turns", &fixed.turns, &eager.turns),
    ] {
        assert_eq!(a.size(), b.size(), "{name}");
        assert!(a.equal(b), "{name}: {a} against {b}");
    }
    assert!(
        fixed
            .token_logprobs
            .allclose(&eager.token_logprobs, 1e-5, 1e-5, false)
    );
}

/// Not 0: a hole must be told from a token by its attention, not its id.
const PAD: i64 = 2;

#[test]
fn multi_turn_static_decoding_is_the_eager_episodes() {
    let (_vs, model) = model(6);
    let turns = TurnsConfig {
        max_turns: 3,
        max_obs: 4,
    };
    let config = |eos: Option<i64>, sampling: SamplingConfig| GenerateConfig {
        max_new: 10,
        samples_per_prompt: 2,
        eos_token_id: eos,
        pad_token_id: PAD,
        sampling,
        seed: 13,
        rows_of: Some((2, 12)),
        ..GenerateConfig::default()
    };
    let sampled = SamplingConfig {
        temperature: 1.4,
        top_k: Some(30),
        top_p: Some(0.9),
    };
    // The token sampled most often, padding aside, ends turns early and late.
    let ((probe, _), _, _) = both_turns(&model, &config(None, sampled.clone()), turns, 1);
    let counts = probe
        .response_ids
        .masked_select(&probe.policy)
        .bincount(None::<Tensor>, ModelConfig::tiny().vocab);
    let _ = counts.narrow(0, PAD, 1).fill_(0);
    let eos = counts.argmax(0, false).int64_value(&[]);
    for (sampling, check_every) in [
        (sampled.clone(), 1),
        (sampled, 4),
        (SamplingConfig::GREEDY, 1),
    ] {
        let greedy = sampling.is_greedy();
        let ((fixed, batches), eager, early) =
            both_turns(&model, &config(Some(eos), sampling), turns, check_every);
        assert_same_episodes(&fixed, &eager);
        assert!(greedy || early, "no turn ended before its budget");
        // Rows stay in place across turns: every step on all ten rows.
        assert!(
            !batches.is_empty() && batches.iter().all(|&b| b == 10),
            "{batches:?}"
        );
    }
}

/// A bfloat16 model's static decode step (its attention bias in bfloat16, over the whole
/// cache) samples the eager decoder's tokens.
#[test]
fn a_bfloat16_models_static_decoding_is_the_eager_rollout() {
    let (mut vs, model) = model(6);
    vs.bfloat16();
    let prompts = [vec![5, 9, 2, 7, 1], vec![4], vec![8, 3, 3], vec![2, 2]];
    let config = GenerateConfig {
        max_new: 10,
        samples_per_prompt: 2,
        sampling: SamplingConfig {
            temperature: 0.9,
            top_k: None,
            top_p: None,
        },
        seed: 11,
        ..GenerateConfig::default()
    };
    let (fixed, _, eager) = both(&model, &prompts, &config, 1);
    assert!(fixed.response_ids.equal(&eager.response_ids));
    assert_eq!(fixed.token_logprobs.kind(), tch::Kind::Float);
    let diff = (&fixed.token_logprobs - &eager.token_logprobs)
        .abs()
        .max()
        .double_value(&[]);
    assert!(diff < 0.05, "{diff}");
}

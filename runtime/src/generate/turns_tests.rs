//! Multi-turn generation against scripted environments (Rust closures; the protocol and the
//! Python side are tested in `exec::environment` and `tests/environment.rs`).

use tch::{Device, Kind, Tensor, nn};

use super::turns::generate_turns_checking;
use super::*;
use crate::model::{Heads, ModelConfig};

fn policy(seed: u64) -> (nn::VarStore, Transformer) {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Transformer::new(&vs.root(), &ModelConfig::tiny(), Heads::POLICY, seed).unwrap();
    (vs, model)
}

fn rows(t: &Tensor) -> Vec<Vec<i64>> {
    Vec::<Vec<i64>>::try_from(t.to_kind(Kind::Int64)).unwrap()
}

const PAD: i64 = 0;
const EOS: i64 = 1;

/// An environment written as a closure of (turn, row, response) → reply, recording its calls.
pub(super) struct Scripted<F: FnMut(i64, i64, &[i64]) -> Reply> {
    reply: F,
    pub(super) calls: Vec<(i64, Vec<i64>, Vec<Vec<i64>>)>,
}

impl<F: FnMut(i64, i64, &[i64]) -> Reply> Environment for Scripted<F> {
    fn step(
        &mut self,
        turn: i64,
        rows: &[i64],
        responses: &[Vec<i64>],
    ) -> Result<Vec<Reply>, GenerateError> {
        self.calls.push((turn, rows.to_vec(), responses.to_vec()));
        Ok(rows
            .iter()
            .zip(responses)
            .map(|(&r, resp)| (self.reply)(turn, r, resp))
            .collect())
    }
}

pub(super) fn scripted<F: FnMut(i64, i64, &[i64]) -> Reply>(reply: F) -> Scripted<F> {
    Scripted {
        reply,
        calls: Vec::new(),
    }
}

fn config(max_new: i64, temperature: f64, seed: u64) -> GenerateConfig {
    GenerateConfig {
        max_new,
        samples_per_prompt: 2,
        eos_token_id: Some(EOS),
        pad_token_id: PAD,
        sampling: SamplingConfig::at_temperature(temperature),
        seed,
        ..GenerateConfig::default()
    }
}

fn prompts() -> (Tensor, Tensor) {
    left_pad(&[vec![5, 9, 2, 7, 11], vec![3, 4]], PAD)
}

/// Observation of row `r` after turn `t`: lengths 0..=3 (an empty one included), ids ≥ 40.
pub(super) fn observation(t: i64, r: i64) -> Vec<i64> {
    (0..(r + t) % 4).map(|i| 40 + i + r).collect()
}

#[test]
fn observations_sit_right_aligned_in_their_slots_and_are_not_policy_tokens() {
    let (_, model) = policy(21);
    let (ids, mask) = prompts();
    let turns = TurnsConfig {
        max_turns: 3,
        max_obs: 4,
    };
    let (max_new, obs) = (5, [7i64, 8, 9]);
    let mut env = scripted(|_, _, _| Reply::Observe(obs.to_vec()));
    let out = generate_turns(
        &model,
        &ids,
        &mask,
        &config(max_new, 1.0, 3),
        turns,
        &mut env,
    )
    .unwrap();
    let n = turns.response_len(max_new);
    assert_eq!(n, 3 * 5 + 2 * 4);
    assert_eq!(out.response_ids.size(), [4, n]);
    let (resp, attn, policy, turn) = (
        rows(&out.response_ids),
        rows(&out.attention),
        rows(&out.policy),
        rows(&out.turn),
    );
    for r in 0..4 {
        for k in 0..2 {
            // Slot `k`'s observation: one hole, then the three tokens.
            let start = (k * (max_new + 4) + max_new) as usize;
            assert_eq!(
                resp[r][start..start + 4],
                [PAD, 7, 8, 9],
                "row {r} slot {k}"
            );
            assert_eq!(attn[r][start..start + 4], [0, 1, 1, 1]);
            assert_eq!(policy[r][start..start + 4], [0, 0, 0, 0]);
            assert_eq!(turn[r][start..start + 4], [-1, -1, -1, -1]);
        }
        for (j, &p) in policy[r].iter().enumerate() {
            // A policy token attends; its turn is its slot's; padding holds PAD, unattended.
            if p != 0 {
                assert_eq!(attn[r][j], 1);
                assert_eq!(turn[r][j], j as i64 / (max_new + 4));
            } else if attn[r][j] == 0 {
                assert_eq!(resp[r][j], PAD);
            }
        }
    }
    // The environment saw each turn's sampled tokens: the policy positions of the slot.
    assert_eq!(env.calls.len(), 3);
    for (k, (turn, who, responses)) in env.calls.iter().enumerate() {
        assert_eq!(*turn, k as i64);
        assert_eq!(who, &[0, 1, 2, 3]);
        for (r, response) in responses.iter().enumerate() {
            let slot = k * (max_new as usize + 4);
            let sampled: Vec<i64> = (slot..slot + max_new as usize)
                .filter(|&j| policy[r][j] != 0)
                .map(|j| resp[r][j])
                .collect();
            assert_eq!(response, &sampled);
        }
    }
    assert_eq!(rows(&out.turns.unsqueeze(1)), [[3], [3], [3], [3]]);
}

/// The layout with holes is the context each token was sampled in: a forward pass over the
/// finished rollout (prompt + response, its attention) gives the sampler's log-probs at every
/// policy position, though turns stop early at EOS and observations have 0..3 tokens.
#[test]
fn the_training_forward_gives_the_samplers_log_probs_at_policy_positions() {
    let (_, model) = policy(22);
    let (ids, mask) = prompts();
    let turns = TurnsConfig {
        max_turns: 4,
        max_obs: 3,
    };
    let max_new = 4;
    let mut env = scripted(|t, r, _| Reply::Observe(observation(t, r)));
    let out = generate_turns(
        &model,
        &ids,
        &mask,
        &config(max_new, 1.5, 7),
        turns,
        &mut env,
    )
    .unwrap();
    let policy = out.policy.shallow_clone();
    // Some turns stopped early (holes inside turn slots), some observations were short.
    let holes = out.attention.eq(0).sum(Kind::Int64).int64_value(&[]);
    assert!(holes > 0, "the layout has holes");
    let sequence = Tensor::cat(&[&out.prompt_ids, &out.response_ids], 1);
    let attention = Tensor::cat(&[&out.prompt_mask, &out.attention], 1);
    let p = out.prompt_ids.size()[1];
    let n = out.response_ids.size()[1];
    let forward = model.logprobs(&sequence, &attention).narrow(1, p - 1, n);
    let err = (&forward - &out.token_logprobs)
        .masked_fill(&policy.logical_not(), 0.0)
        .abs()
        .max()
        .double_value(&[]);
    assert!(err <= 2e-5, "forward and sampler log-probs differ by {err}");
    // Off the policy positions the sampler's are 0 (never trained on).
    let off = out
        .token_logprobs
        .masked_fill(&policy, 0.0)
        .abs()
        .max()
        .double_value(&[]);
    assert_eq!(off, 0.0);
}

#[test]
fn done_ends_the_episode_and_max_turns_bounds_it() {
    let (_, model) = policy(23);
    let (ids, mask) = prompts();
    let turns = TurnsConfig {
        max_turns: 3,
        max_obs: 2,
    };
    let max_new = 3;
    // Row 1 is done after turn 0, row 2 after turn 1; rows 0 and 3 play every turn.
    let mut env = scripted(|t, r, _| match (t, r) {
        (0, 1) | (1, 2) => Reply::Done,
        _ => Reply::Observe(vec![30]),
    });
    let out = generate_turns(
        &model,
        &ids,
        &mask,
        &config(max_new, 1.0, 5),
        turns,
        &mut env,
    )
    .unwrap();
    assert_eq!(
        Vec::<i64>::try_from(&out.turns).unwrap(),
        [3, 1, 2, 3],
        "turns taken"
    );
    let who: Vec<Vec<i64>> = env.calls.iter().map(|(_, w, _)| w.clone()).collect();
    assert_eq!(who, [vec![0, 1, 2, 3], vec![0, 2, 3], vec![0, 3]]);
    // After row 1's first turn, nothing: padding, unattended, no policy token.
    let (attn, resp) = (rows(&out.attention), rows(&out.response_ids));
    let after = max_new as usize;
    assert!(attn[1][after..].iter().all(|&a| a == 0));
    assert!(resp[1][after..].iter().all(|&t| t == PAD));
    let turn = rows(&out.turn);
    assert!(turn[2].iter().all(|&t| t < 2), "row 2 never plays turn 2");
}

#[test]
fn the_same_seed_gives_the_same_episodes_however_the_batch_is_split() {
    let (_, model) = policy(24);
    let (ids, mask) = prompts();
    let turns = TurnsConfig {
        max_turns: 3,
        max_obs: 3,
    };
    let run = |ids: &Tensor, mask: &Tensor, rows_of: Option<(i64, i64)>, first_row: i64| {
        let mut env = scripted(|t, r, _| Reply::Observe(observation(t, r + first_row)));
        let config = GenerateConfig {
            rows_of,
            ..config(4, 1.0, 99)
        };
        generate_turns(&model, ids, mask, &config, turns, &mut env).unwrap()
    };
    let whole = run(&ids, &mask, None, 0);
    let again = run(&ids, &mask, None, 0);
    assert!(whole.response_ids.equal(&again.response_ids));
    assert!(whole.attention.equal(&again.attention));
    let other_seed = {
        let mut env = scripted(|t, r, _| Reply::Observe(observation(t, r)));
        generate_turns(&model, &ids, &mask, &config(4, 1.0, 100), turns, &mut env).unwrap()
    };
    assert!(!whole.response_ids.equal(&other_seed.response_ids));
    // Each prompt on a data rank of its own: rows 0..2 and 2..4 of a batch of 4.
    let (a_ids, a_mask) = left_pad(&[vec![5, 9, 2, 7, 11]], PAD);
    let (b_ids, b_mask) = left_pad(&[vec![3, 4]], PAD);
    let a = run(&a_ids, &a_mask, Some((0, 4)), 0);
    let b = run(&b_ids, &b_mask, Some((2, 4)), 2);
    assert_eq!(
        rows(&a.response_ids),
        rows(&whole.response_ids.narrow(0, 0, 2))
    );
    assert_eq!(
        rows(&b.response_ids),
        rows(&whole.response_ids.narrow(0, 2, 2))
    );
}

#[test]
fn an_observation_longer_than_max_obs_or_outside_the_vocabulary_is_an_error() {
    let (_, model) = policy(25);
    let (ids, mask) = prompts();
    let turns = TurnsConfig {
        max_turns: 2,
        max_obs: 2,
    };
    let mut long = scripted(|_, _, _| Reply::Observe(vec![3, 4, 5]));
    let e = generate_turns(&model, &ids, &mask, &config(3, 1.0, 1), turns, &mut long)
        .unwrap_err()
        .to_string();
    assert!(e.contains("longer than max_obs 2"), "{e}");
    let mut outside = scripted(|_, _, _| Reply::Observe(vec![480]));
    let e =
        generate_turns(&model, &ids, &mask, &config(3, 1.0, 1), turns, &mut outside).unwrap_err();
    assert!(
        matches!(e, GenerateError::TokenOutOfRange { id: 480, .. }),
        "{e}"
    );
    // The layout must fit the context: 7 + 3·20 + 2·4 > 64.
    let mut env = scripted(|_, _, _| Reply::Done);
    let too_long = TurnsConfig {
        max_turns: 3,
        max_obs: 4,
    };
    let e =
        generate_turns(&model, &ids, &mask, &config(20, 1.0, 1), too_long, &mut env).unwrap_err();
    assert!(matches!(e, GenerateError::TooLong { .. }), "{e}");
}

/// The policy with its end-of-answer logit raised, so that turns end at many lengths.
struct EndsEarly<'a>(&'a Transformer);

impl Decode for EndsEarly<'_> {
    fn config(&self) -> &ModelConfig {
        Decode::config(self.0)
    }

    fn has_lm_head(&self) -> bool {
        Decode::has_lm_head(self.0)
    }

    fn new_cache(&self, positions: i64) -> KvCache {
        Decode::new_cache(self.0, positions)
    }

    fn next_logits(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, GenerateError> {
        let logits = self.0.next_logits(ids, mask, cache)?;
        let raise = Tensor::zeros_like(&logits).index_fill(1, &Tensor::from(EOS), 2.5);
        Ok(logits + raise)
    }
}

#[test]
fn reading_the_stop_flag_every_eighth_token_gives_the_same_episodes() {
    let (_, model) = policy(25);
    let model = EndsEarly(&model);
    let (ids, mask) = prompts();
    let turns = TurnsConfig {
        max_turns: 3,
        max_obs: 4,
    };
    let max_new = 12;
    let run = |every: i64| {
        let mut env = scripted(|t, r, _| Reply::Observe(observation(t, r)));
        let config = config(max_new, 1.0, 8);
        let out =
            generate_turns_checking(&model, &ids, &mask, &config, turns, &mut env, every).unwrap();
        (out, env.calls)
    };
    let (each, calls) = run(1);
    let (eighth, eighth_calls) = run(8);
    // Some turn ended for every row before its budget, off a multiple of eight: there the
    // decoder read every token stops at once, the other goes on with padding to its next read.
    let ends: Vec<usize> = calls
        .iter()
        .map(|(_, _, responses)| responses.iter().map(Vec::len).max().unwrap())
        .collect();
    assert!(
        ends.iter().any(|&n| n < max_new as usize && n % 8 != 0),
        "no turn ended early: {ends:?}"
    );
    assert_eq!(calls, eighth_calls, "what the environment saw");
    for (name, a, b) in [
        ("ids", &each.response_ids, &eighth.response_ids),
        ("attention", &each.attention, &eighth.attention),
        ("policy", &each.policy, &eighth.policy),
        ("turn", &each.turn, &eighth.turn),
        ("turns", &each.turns, &eighth.turns),
    ] {
        assert!(a.equal(b), "{name}: {a} against {b}");
    }
    let logprobs = (&each.token_logprobs - &eighth.token_logprobs)
        .abs()
        .max()
        .double_value(&[]);
    assert!(logprobs < 1e-6, "log-probs {logprobs}");
}

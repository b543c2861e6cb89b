use tch::{Device, Tensor, nn};

use super::*;
use crate::model::{Heads, ModelConfig};

fn policy(seed: u64) -> (nn::VarStore, Transformer) {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Transformer::new(&vs.root(), &ModelConfig::tiny(), Heads::POLICY, seed).unwrap();
    (vs, model)
}

fn prompts() -> (Tensor, Tensor) {
    left_pad(&[vec![5, 9, 2, 7, 11], vec![3, 4], vec![8, 1, 30]], 0)
}

fn rows(t: &Tensor) -> Vec<Vec<i64>> {
    Vec::<Vec<i64>>::try_from(t).unwrap()
}

#[test]
fn left_pad_aligns_prompts_to_the_right() {
    let (ids, mask) = left_pad(&[vec![4, 5, 6], vec![7]], 1);
    assert_eq!(rows(&ids), [vec![4, 5, 6], vec![1, 1, 7]]);
    assert_eq!(rows(&mask), [vec![1, 1, 1], vec![0, 0, 1]]);
}

#[test]
fn cached_and_recomputed_greedy_generation_agree() {
    let (_, model) = policy(11);
    let (ids, mask) = prompts();
    let config = GenerateConfig {
        max_new: 10,
        return_logits: true,
        ..GenerateConfig::default()
    };
    let cached = generate(&model, &ids, &mask, &config).unwrap();
    let recomputed = generate(
        &model,
        &ids,
        &mask,
        &GenerateConfig {
            use_kv_cache: false,
            ..config
        },
    )
    .unwrap();
    assert_eq!(cached.response_ids.size(), [3, 10]);
    assert_eq!(rows(&cached.response_ids), rows(&recomputed.response_ids));
    let (a, b) = (cached.logits.unwrap(), recomputed.logits.unwrap());
    assert_eq!(a.size(), [3, 10, ModelConfig::tiny().vocab]);
    let err = (a - b).abs().max().double_value(&[]);
    assert!(err <= 1e-5, "cached and recomputed logits differ by {err}");
}

#[test]
fn greedy_tokens_match_the_arg_max_of_a_full_forward_pass() {
    let (_, model) = policy(12);
    let (ids, mask) = prompts();
    let config = GenerateConfig {
        max_new: 4,
        ..GenerateConfig::default()
    };
    let rollout = generate(&model, &ids, &mask, &config).unwrap();
    let sequence = Tensor::cat(&[&ids, &rollout.response_ids], 1);
    let full_mask = Tensor::cat(&[&mask, &rollout.response_mask], 1);
    let logits = model.logits(&sequence, &full_mask);
    let predicted = logits.narrow(1, ids.size()[1] - 1, 4).argmax(-1, false);
    assert_eq!(rows(&predicted), rows(&rollout.response_ids));
}

/// The log-probs the sampler records are those of the model's raw logits (not the tempered,
/// truncated distribution it drew from) at the sampled tokens: what a forward pass over the
/// rollout gives, to rounding (the KV-cached decode sums in another order); 0 at the padding
/// after EOS. A `logprobs` op marked `from_sampling` returns them instead of that forward pass.
#[test]
fn sampled_log_probs_are_those_of_a_forward_pass() {
    let (_, model) = policy(15);
    let (ids, mask) = prompts();
    let config = GenerateConfig {
        max_new: 6,
        samples_per_prompt: 3,
        sampling: SamplingConfig {
            temperature: 0.7,
            top_k: Some(20),
            top_p: Some(0.9),
        },
        eos_token_id: Some(7),
        pad_token_id: 0,
        seed: 3,
        ..GenerateConfig::default()
    };
    let rollout = generate(&model, &ids, &mask, &config).unwrap();
    let width = rollout.response_ids.size()[1];
    assert_eq!(rollout.token_logprobs.size(), [9, width]);
    let sequence = Tensor::cat(&[&rollout.prompt_ids, &rollout.response_ids], 1);
    let full_mask = Tensor::cat(
        &[&rollout.prompt_mask, &rollout.response_ids.ones_like()],
        1,
    );
    let prompt_len = rollout.prompt_ids.size()[1];
    let forward = model
        .logprobs(&sequence, &full_mask)
        .narrow(1, prompt_len - 1, width);
    let live = rollout.response_mask.to_kind(Kind::Float);
    let err = ((&forward - &rollout.token_logprobs) * &live)
        .abs()
        .max()
        .double_value(&[]);
    assert!(err <= 1e-5, "sampled and forward log-probs differ by {err}");
    let padding = (&rollout.token_logprobs * live.ones_like().g_sub(&live))
        .abs()
        .max();
    assert_eq!(padding.double_value(&[]), 0.0);
    assert!(
        live.sum(Kind::Float).double_value(&[]) < (9 * width) as f64,
        "some row should stop early"
    );
}

#[test]
fn response_mask_covers_tokens_up_to_and_including_eos() {
    let (_, model) = policy(13);
    let (ids, mask) = prompts();
    let free = generate(
        &model,
        &ids,
        &mask,
        &GenerateConfig {
            max_new: 8,
            ..GenerateConfig::default()
        },
    )
    .unwrap();
    let free_rows = rows(&free.response_ids);
    // Use the token that row 0 emits third as EOS, so row 0 stops at step 2 or earlier.
    let eos = free_rows[0][2];
    let pad = 47;
    let config = GenerateConfig {
        max_new: 8,
        eos_token_id: Some(eos),
        pad_token_id: pad,
        ..GenerateConfig::default()
    };
    let stopped = generate(&model, &ids, &mask, &config).unwrap();
    let (tokens, masks) = (rows(&stopped.response_ids), rows(&stopped.response_mask));
    let width = tokens[0].len();
    let expected_width = free_rows
        .iter()
        .map(|row| row.iter().position(|&t| t == eos).map_or(8, |i| i + 1))
        .max()
        .unwrap();
    assert_eq!(
        width, expected_width,
        "generation should stop once every row emitted EOS"
    );
    for (row, free_row) in free_rows.iter().enumerate() {
        let stop = free_row
            .iter()
            .position(|&t| t == eos)
            .map_or(width, |i| i + 1)
            .min(width);
        let expected_mask: Vec<i64> = (0..width).map(|i| i64::from(i < stop)).collect();
        let expected_tokens: Vec<i64> = (0..width)
            .map(|i| if i < stop { free_row[i] } else { pad })
            .collect();
        assert_eq!(masks[row], expected_mask, "mask of row {row}");
        assert_eq!(tokens[row], expected_tokens, "tokens of row {row}");
    }
    assert_eq!(
        masks[0].iter().sum::<i64>() as usize,
        free_rows[0].iter().position(|&t| t == eos).unwrap() + 1
    );
}

#[test]
fn samples_of_one_prompt_are_adjacent_and_share_a_group_id() {
    let (_, model) = policy(14);
    let (ids, mask) = prompts();
    let sampling = SamplingConfig {
        temperature: 1.0,
        top_k: None,
        top_p: Some(0.95),
    };
    let config = GenerateConfig {
        max_new: 6,
        samples_per_prompt: 3,
        sampling,
        seed: 5,
        ..GenerateConfig::default()
    };
    let rollout = generate(&model, &ids, &mask, &config).unwrap();
    assert_eq!(
        Vec::<i64>::try_from(&rollout.group_ids).unwrap(),
        [0, 0, 0, 1, 1, 1, 2, 2, 2]
    );
    assert_eq!(rollout.response_ids.size(), [9, 6]);
    let (prompt_rows, original) = (rows(&rollout.prompt_ids), rows(&ids));
    for (row, prompt) in prompt_rows.iter().enumerate() {
        assert_eq!(prompt, &original[row / 3]);
    }
    assert_eq!(rows(&rollout.prompt_mask)[4], rows(&mask)[1]);
    let responses = rows(&rollout.response_ids);
    assert!(
        responses[0] != responses[1] || responses[1] != responses[2],
        "samples of a prompt are all equal"
    );
}

#[test]
fn a_seed_fixes_the_samples() {
    let (_, model) = policy(15);
    let (ids, mask) = prompts();
    let sampling = SamplingConfig {
        temperature: 1.0,
        top_k: Some(20),
        top_p: None,
    };
    let config = GenerateConfig {
        max_new: 6,
        samples_per_prompt: 2,
        sampling,
        seed: 9,
        ..GenerateConfig::default()
    };
    let a = generate(&model, &ids, &mask, &config).unwrap();
    let b = generate(&model, &ids, &mask, &config).unwrap();
    let c = generate(
        &model,
        &ids,
        &mask,
        &GenerateConfig {
            seed: 10,
            ..config.clone()
        },
    )
    .unwrap();
    let d = generate(
        &model,
        &ids,
        &mask,
        &GenerateConfig {
            use_kv_cache: false,
            ..config
        },
    )
    .unwrap();
    assert_eq!(rows(&a.response_ids), rows(&b.response_ids));
    assert_eq!(rows(&a.response_ids), rows(&d.response_ids));
    assert_ne!(rows(&a.response_ids), rows(&c.response_ids));
}

#[test]
fn invalid_settings_are_errors() {
    let (_, model) = policy(16);
    let (ids, mask) = prompts();
    let bad_top_p = GenerateConfig {
        sampling: SamplingConfig {
            temperature: 1.0,
            top_k: None,
            top_p: Some(1.5),
        },
        ..GenerateConfig::default()
    };
    assert!(matches!(
        generate(&model, &ids, &mask, &bad_top_p),
        Err(GenerateError::InvalidSetting(_))
    ));
    let short_mask = mask.narrow(1, 0, 2);
    assert!(matches!(
        generate(&model, &ids, &short_mask, &GenerateConfig::default()),
        Err(GenerateError::PromptShape { .. })
    ));
    let right_padded = Tensor::from_slice(&[1i64, 1, 0]).view([1, 3]);
    assert_eq!(
        generate(
            &model,
            &right_padded,
            &right_padded,
            &GenerateConfig::default()
        )
        .unwrap_err(),
        GenerateError::NotLeftPadded
    );
    let too_long = GenerateConfig {
        max_new: 60,
        ..GenerateConfig::default()
    };
    assert_eq!(
        generate(&model, &ids, &mask, &too_long).unwrap_err(),
        GenerateError::TooLong {
            prompt: 5,
            max_new: 60,
            max_len: 64
        }
    );
    let bad_pad = GenerateConfig {
        pad_token_id: 48,
        ..GenerateConfig::default()
    };
    assert_eq!(
        generate(&model, &ids, &mask, &bad_pad).unwrap_err(),
        GenerateError::TokenOutOfRange { id: 48, vocab: 48 }
    );
    let vs = nn::VarStore::new(Device::Cpu);
    let critic = Transformer::new(&vs.root(), &ModelConfig::tiny(), Heads::CRITIC, 0).unwrap();
    assert_eq!(
        generate(&critic, &ids, &mask, &GenerateConfig::default()).unwrap_err(),
        GenerateError::NoLmHead
    );
}

/// Sampled rows of a batch: `prompts()` twice each, top-2 sampling at temperature 1.
fn sampled(max_new: i64, eos: Option<i64>) -> GenerateConfig {
    GenerateConfig {
        max_new,
        samples_per_prompt: 2,
        eos_token_id: eos,
        pad_token_id: 47,
        sampling: SamplingConfig {
            temperature: 1.0,
            top_k: Some(2),
            top_p: None,
        },
        seed: 21,
        return_logits: true,
        ..GenerateConfig::default()
    }
}

#[test]
fn reading_the_stop_flag_every_few_tokens_gives_the_same_rollout() {
    let (_, model) = policy(16);
    let (ids, mask) = prompts();
    let max_new = 16;
    // The first stream (from seed 0) in which some token is emitted by every row, early: as EOS,
    // it stops every row before `max_new`, at different steps.
    let first_at = |row: &Vec<i64>, t: i64| row.iter().position(|&x| x == t);
    let (seed, last_stop, eos) = (0..100)
        .find_map(|seed| {
            let config = GenerateConfig {
                seed,
                ..sampled(max_new, None)
            };
            let free = rows(&generate(&model, &ids, &mask, &config).unwrap().response_ids);
            let (last, eos) = (0..48)
                .filter_map(|t| {
                    let stops: Option<Vec<usize>> = free.iter().map(|r| first_at(r, t)).collect();
                    Some((stops?.into_iter().max()?, t))
                })
                .min()?;
            (last < 10).then_some((seed, last, eos))
        })
        .expect("a stream in which every row stops early");
    // Rows leaving the batch at other steps would change the logits' rounding
    // (`compaction_tests.rs` compares those within a tolerance).
    let config = GenerateConfig {
        seed,
        compact_finished: false,
        ..sampled(max_new, Some(eos))
    };
    let run = |every: i64| {
        tch::no_grad(|| Decoder::new(&model, &ids, &mask, &config, every).run()).unwrap()
    };
    let each = run(1);
    assert_eq!(each.response_ids.size()[1] as usize, last_stop + 1);
    let stops: Vec<i64> = rows(&each.response_mask)
        .iter()
        .map(|r| r.iter().sum())
        .collect();
    assert!(stops.iter().any(|&s| s < stops[0]) || stops.iter().any(|&s| s > stops[0]));
    for every in [2, 5, 8] {
        let sparse = run(every);
        assert_eq!(
            rows(&sparse.response_ids),
            rows(&each.response_ids),
            "every {every}"
        );
        assert_eq!(rows(&sparse.response_mask), rows(&each.response_mask));
        assert!(sparse.token_logprobs.equal(&each.token_logprobs));
        assert!(sparse.logits.unwrap().equal(each.logits.as_ref().unwrap()));
    }
}

#[test]
fn a_slice_of_the_batch_samples_the_rows_the_whole_batch_does() {
    let (_, model) = policy(17);
    let (ids, mask) = prompts();
    let whole = generate(&model, &ids, &mask, &sampled(6, None)).unwrap();
    // Prompts 1 and 2 are rows 2..6 of the whole batch.
    let part = generate(
        &model,
        &ids.narrow(0, 1, 2),
        &mask.narrow(0, 1, 2),
        &GenerateConfig {
            rows_of: Some((2, 6)),
            ..sampled(6, None)
        },
    )
    .unwrap();
    assert_eq!(
        rows(&part.response_ids),
        rows(&whole.response_ids.narrow(0, 2, 4))
    );
    // Without its place in the batch, the slice draws rows 0..4's numbers instead.
    let alone = generate(
        &model,
        &ids.narrow(0, 1, 2),
        &mask.narrow(0, 1, 2),
        &sampled(6, None),
    );
    assert_ne!(rows(&alone.unwrap().response_ids), rows(&part.response_ids));
}

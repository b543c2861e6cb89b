//! `generate` on a rank's prompts, and the model calls that read a rollout.

use rlc_plan::model::RoleKind;
use tch::{Device, Kind, Tensor};

use super::error::{Result, RunError};
use super::roles::Model;
use super::values::Rollout;
use crate::data::{Sample, Specials};
use crate::generate::{
    Decode, Environment, GenerateConfig, SamplingConfig, TurnsConfig, generate, generate_turns,
    left_pad,
};
use crate::model::{Rows, token_logprobs};
use crate::parallel::Tape;

pub struct Sampling {
    pub n: i64,
    pub max_new: i64,
    pub sampling: SamplingConfig,
    pub seed: u64,
    /// Where a response stops, and what fills the rows after it.
    pub specials: Specials,
}

/// Samples `n` responses for each prompt. The prompts are prompts `first..` of a step batch of
/// `total` prompts: row ids and random numbers are those of the whole batch, so the result does
/// not depend on how the batch is split over data ranks.
pub fn rollout(
    model: &dyn Decode,
    samples: &[Sample],
    first: i64,
    total: i64,
    how: &Sampling,
    device: Device,
) -> Result<Rollout> {
    let (prompt_ids, prompt_mask, config) = decoder_input(samples, first, total, how, device);
    let out = generate(model, &prompt_ids, &prompt_mask, &config)?;
    Ok(assemble(out, samples, first, how, device))
}

/// The first tokens of a partial rollout (`generate(…, pause_at: p)`), sampled by the weights
/// before the pause.
pub struct Paused {
    out: crate::generate::Rollout,
    config: GenerateConfig,
}

/// [`rollout`] up to the pause: the first `pause_at` tokens of each response (fewer where every
/// row stopped before).
pub fn start(
    model: &dyn Decode,
    samples: &[Sample],
    first: i64,
    total: i64,
    how: &Sampling,
    pause_at: i64,
    device: Device,
) -> Result<Paused> {
    let (prompt_ids, prompt_mask, mut config) = decoder_input(samples, first, total, how, device);
    config.max_new = pause_at.min(how.max_new);
    let out = generate(model, &prompt_ids, &prompt_mask, &config)?;
    Ok(Paused { out, config })
}

/// The rest of a paused rollout, sampled by `model` (the next weights). The cache of each row's
/// prompt and first tokens is computed again with them, so every later token is sampled from,
/// and its `logp` is, the new policy's distribution given the whole prefix; a cache kept from the
/// old weights would mix the two policies, and no log-prob would be the behaviour policy's.
/// Rows that stopped before the pause get padding. Each token draws the random number of its row
/// and position, as without the pause: with the same weights the rollout is the uninterrupted
/// one.
pub fn finish(
    model: &dyn Decode,
    paused: Paused,
    samples: &[Sample],
    first: i64,
    how: &Sampling,
    device: Device,
) -> Result<Rollout> {
    let Paused { out, mut config } = paused;
    let pause_at = config.max_new;
    let width = out.response_ids.size()[1];
    let goes_on = if width < pause_at || how.max_new <= pause_at {
        None
    } else {
        let last = out.response_ids.select(1, pause_at - 1);
        let alive = out
            .response_mask
            .select(1, pause_at - 1)
            .to_kind(Kind::Bool);
        let stopped = how
            .specials
            .eos
            .map_or_else(|| alive.zeros_like(), |eos| last.eq(eos));
        Some(alive.logical_and(&stopped.logical_not()))
    };
    let Some(goes_on) = goes_on.filter(|g| g.any().int64_value(&[]) != 0) else {
        return Ok(assemble(out, samples, first, how, device));
    };
    let ids = Tensor::cat(&[&out.prompt_ids, &out.response_ids], 1);
    let mask = Tensor::cat(&[&out.prompt_mask, &out.response_mask.ones_like()], 1);
    config.max_new = how.max_new - pause_at;
    config.samples_per_prompt = 1;
    config.first_position = pause_at;
    let more = generate(model, &ids, &mask, &config)?;
    let keep = goes_on.unsqueeze(1);
    let response_ids = Tensor::cat(
        &[
            &out.response_ids,
            &more.response_ids.where_scalarother(&keep, how.specials.pad),
        ],
        1,
    );
    let response_mask = Tensor::cat(&[&out.response_mask, &(&more.response_mask * &keep)], 1);
    let token_logprobs = Tensor::cat(&[&out.token_logprobs, &(&more.token_logprobs * &keep)], 1);
    let whole = crate::generate::Rollout {
        response_ids,
        response_mask,
        token_logprobs,
        logits: None,
        ..out
    };
    Ok(assemble(whole, samples, first, how, device))
}

/// The versions of the weights that sampled each token, `[rows, width]` int64: `before` for all,
/// or, for a rollout paused at `p` that then took the next weights, `after` from position `p`.
pub fn versions(
    rows: i64,
    width: i64,
    before: u64,
    pause: Option<(i64, u64)>,
    device: Device,
) -> Tensor {
    let all = Tensor::full([rows, width], before as i64, (Kind::Int64, device));
    match pause {
        Some((p, after)) if p < width => {
            let later = Tensor::arange(width, (Kind::Int64, device))
                .ge(p)
                .unsqueeze(0)
                .expand([rows, width], false);
            all.masked_fill(&later, after as i64)
        }
        _ => all,
    }
}

/// A single-turn rollout's fields from what the decoder produced: responses padded to
/// `max_new` (so every rank's rows line up), the mask and last-token marks, targets, groups.
fn assemble(
    out: crate::generate::Rollout,
    samples: &[Sample],
    first: i64,
    how: &Sampling,
    device: Device,
) -> Rollout {
    let pad = how.specials.pad;
    let rows = out.response_ids.size()[0];
    // Responses that all stopped early are padded to `max_new`, so every rank's rows line up.
    let width = out.response_ids.size()[1];
    let extra = how.max_new - width;
    let response = out
        .response_ids
        .constant_pad_nd([0, extra])
        .masked_fill(&pad_columns(rows, width, how.max_new, device), pad);
    let mask = out
        .response_mask
        .constant_pad_nd([0, extra])
        .to_kind(Kind::Bool);
    let next = mask.narrow(1, 1, how.max_new - 1).constant_pad_nd([0, 1]);
    let last = mask.logical_and(&next.logical_not());
    let targets: Vec<Vec<i64>> = samples
        .iter()
        .flat_map(|s| std::iter::repeat_n(&s.target, how.n as usize))
        .map(|t| {
            let mut row: Vec<i64> = t.iter().copied().take(how.max_new as usize).collect();
            row.resize(how.max_new as usize, pad);
            row
        })
        .collect();
    let target = Tensor::from_slice(&targets.concat())
        .view([rows, how.max_new])
        .to_device(device);
    let dataset_rows: Vec<i64> = samples
        .iter()
        .flat_map(|s| std::iter::repeat_n(s.row.map_or(-1, |r| r as i64), how.n as usize))
        .collect();
    let dataset_rows = Tensor::from_slice(&dataset_rows).to_device(device);
    let group = &out.group_ids + first;
    let prompt_len = out.prompt_ids.size()[1];
    let ids = Tensor::cat(&[&out.prompt_ids, &response], 1);
    let attention = Tensor::cat(&[&out.prompt_mask, &response.ones_like()], 1);
    // 0 in the columns added after the generated width (masked, as the padding there is).
    let sampled = out.token_logprobs.constant_pad_nd([0, extra]);
    Rollout {
        fields: vec![
            ("prompt".into(), out.prompt_ids),
            ("response".into(), response),
            ("target".into(), target),
            ("mask".into(), mask),
            ("last".into(), last),
            ("group".into(), group),
            (SAMPLED_LOGPROBS.into(), sampled),
            (DATASET_ROW.into(), dataset_rows),
        ],
        ids,
        attention,
        prompt_len,
        response_len: how.max_new,
    }
}

/// The left-padded prompts of `samples` (with their mask) on `device`, and the decoder's
/// configuration: prompts `first..` of a step batch of `total`, sampled as `how` says.
fn decoder_input(
    samples: &[Sample],
    first: i64,
    total: i64,
    how: &Sampling,
    device: Device,
) -> (Tensor, Tensor, GenerateConfig) {
    let prompts: Vec<Vec<i64>> = samples.iter().map(|s| s.prompt.clone()).collect();
    let (prompt_ids, prompt_mask) = left_pad(&prompts, how.specials.pad);
    let config = GenerateConfig {
        max_new: how.max_new,
        samples_per_prompt: how.n,
        eos_token_id: how.specials.eos,
        pad_token_id: how.specials.pad,
        sampling: how.sampling.clone(),
        seed: how.seed,
        use_kv_cache: true,
        return_logits: false,
        rows_of: Some((first * how.n, total * how.n)),
        first_position: 0,
        compact_finished: true,
    };
    (
        prompt_ids.to_device(device),
        prompt_mask.to_device(device),
        config,
    )
}

/// [`rollout`] against an environment: episodes of up to `turns.max_turns` turns in the fixed
/// slots of `generate::generate_turns`. The response is the whole layout (`N =
/// turns.response_len(max_new)` positions); `mask` covers the sampled tokens only, `turn` gives
/// each sampled token's turn (−1 at observations and padding), `turns` each row's turns, and the
/// sampler's log-probs are 0 off the sampled tokens. The caller adds `env_reward`.
#[allow(clippy::too_many_arguments)]
pub fn env_rollout(
    model: &dyn Decode,
    samples: &[Sample],
    first: i64,
    total: i64,
    how: &Sampling,
    turns: TurnsConfig,
    env: &mut dyn Environment,
    device: Device,
) -> Result<Rollout> {
    let pad = how.specials.pad;
    let (prompt_ids, prompt_mask, config) = decoder_input(samples, first, total, how, device);
    let out = generate_turns(model, &prompt_ids, &prompt_mask, &config, turns, env)?;
    let rows = out.response_ids.size()[0];
    let width = turns.response_len(how.max_new);
    let mask = out.policy.shallow_clone();
    // The last sampled token of each row (the episode's end).
    let positions = Tensor::arange(width, (Kind::Int64, device))
        .unsqueeze(0)
        .expand([rows, width], false);
    let last_index = positions
        .masked_fill(&mask.logical_not(), -1)
        .amax(&[1i64][..], true);
    let last = positions.eq_tensor(&last_index).logical_and(&mask);
    let targets: Vec<Vec<i64>> = samples
        .iter()
        .flat_map(|s| std::iter::repeat_n(&s.target, how.n as usize))
        .map(|t| {
            let mut row: Vec<i64> = t.iter().copied().take(width as usize).collect();
            row.resize(width as usize, pad);
            row
        })
        .collect();
    let target = Tensor::from_slice(&targets.concat())
        .view([rows, width])
        .to_device(device);
    let dataset_rows: Vec<i64> = samples
        .iter()
        .flat_map(|s| std::iter::repeat_n(s.row.map_or(-1, |r| r as i64), how.n as usize))
        .collect();
    let dataset_rows = Tensor::from_slice(&dataset_rows).to_device(device);
    let group = &out.group_ids + first;
    let prompt_len = out.prompt_ids.size()[1];
    let ids = Tensor::cat(&[&out.prompt_ids, &out.response_ids], 1);
    let attention = Tensor::cat(&[&out.prompt_mask, &out.attention], 1);
    Ok(Rollout {
        fields: vec![
            ("prompt".into(), out.prompt_ids),
            ("response".into(), out.response_ids),
            ("target".into(), target),
            ("mask".into(), mask),
            ("last".into(), last),
            ("group".into(), group),
            ("turn".into(), out.turn),
            ("turns".into(), out.turns),
            (SAMPLED_LOGPROBS.into(), out.token_logprobs),
            (DATASET_ROW.into(), dataset_rows),
        ],
        ids,
        attention,
        prompt_len,
        response_len: width,
    })
}

/// The rollout field that holds the log-probs the sampler computed, `[R, max_new]` float32:
/// the behaviour policy's, which a program reads as `rollout.logp`.
pub const SAMPLED_LOGPROBS: &str = "logp";

/// The rollout field that holds how many updates the weights that sampled each token had seen,
/// `[R, N]` (`rollout.version`): the step for a synchronous rollout, `staleness` fewer for an
/// asynchronous one, and one more from the pause on for a partial one.
pub const VERSION: &str = "version";

/// The rollout field that holds each row's row in its dataset (`Sample::row`, -1 for none),
/// `[R]` int64: where a verifier finds the row's other fields (no program can name it).
pub const DATASET_ROW: &str = "dataset row";

/// The log-probs of `r`'s response tokens as the sampler computed them: what a `logprobs` op
/// marked `from_sampling` returns instead of a forward pass (a plan built with
/// `--forward-logprobs` marks none).
pub fn sampled_logprobs(r: &Rollout) -> Option<Tensor> {
    r.field(SAMPLED_LOGPROBS).map(Tensor::shallow_clone)
}

/// `[rows, max_new]`: true in the columns added after the generated `width`.
fn pad_columns(rows: i64, width: i64, max_new: i64, device: Device) -> Tensor {
    Tensor::arange(max_new, (Kind::Int64, device))
        .ge(width)
        .unsqueeze(0)
        .expand([rows, max_new], false)
}

/// What a model call reads off a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Log-probability `[R, N]` of each response token.
    Logprobs,
    /// The critic's value `[R, N]` of the state before each response token.
    Values,
    /// The reward model's score `[R]` of each sequence, read at its last real token.
    Scores,
}

impl Output {
    /// The output an `update` of a role of model kind `kind` trains.
    pub fn of_kind(kind: RoleKind) -> Output {
        match kind {
            RoleKind::ValueModel => Output::Values,
            RoleKind::RewardModel => Output::Scores,
            RoleKind::CausalLM => Output::Logprobs,
        }
    }
}

/// `what` of rollout `r` under `model` (with autograd when enabled; a tensor-parallel model
/// records its cuts on `tape`, for the backward pass of an update).
pub fn output<'c>(model: &Model<'c>, what: Output, r: &Rollout, tape: &Tape<'c>) -> Result<Tensor> {
    let responses = |t: Tensor| t.narrow(1, r.prompt_len - 1, r.response_len);
    // The positions whose outputs the response's tokens read: only these leave the last layer.
    let rows = Rows {
        first: r.prompt_len - 1,
        len: r.response_len,
    };
    Ok(match (model, what) {
        (Model::Whole(m), Output::Logprobs) => m.logprobs_at(&r.ids, &r.attention, rows),
        (Model::Whole(m), Output::Values) => m.values_at(&r.ids, &r.attention, rows),
        (Model::Whole(m), Output::Scores) => m.scores(&r.ids, &score_mask(r)),
        (Model::Tp(m), Output::Logprobs) => responses(m.logprobs(tape, &r.ids, &r.attention)?),
        (Model::Tp(m), Output::Values) => responses(m.values(tape, &r.ids, &r.attention)?),
        (Model::Tp(m), Output::Scores) => m.scores(tape, &r.ids, &score_mask(r))?,
        (Model::Fsdp(m), Output::Logprobs) => {
            responses(token_logprobs(&m.logits(&r.ids, &r.attention)?, &r.ids))
        }
        (Model::Pp(m, pp), Output::Logprobs) => {
            // The last stage's, broadcast so every stage's kernels see them.
            let last = pp.world_size() - 1;
            let mine = m
                .logits(&r.ids, &r.attention)?
                .map(|logits| responses(token_logprobs(&logits, &r.ids)));
            pp.broadcast(mine.as_ref(), last)?
        }
        (Model::Pp(..), _) => {
            return Err(RunError::Unsupported(
                "values and scores under pipelining (it runs LM-head models only)".into(),
            ));
        }
        (Model::Fsdp(_), _) => {
            return Err(RunError::Unsupported(
                "values and scores under FSDP (it shards LM-head models only)".into(),
            ));
        }
    })
}

/// The positions a score reads: the prompt and the response up to its end (of a multi-turn
/// rollout, its attention: the turns and the observations between them).
fn score_mask(r: &Rollout) -> Tensor {
    if r.field("turn").is_some() {
        return r.attention.shallow_clone();
    }
    r.field("mask").map_or_else(
        || r.attention.shallow_clone(),
        |m| {
            let prompt = r.attention.narrow(1, 0, r.prompt_len);
            Tensor::cat(&[&prompt, &m.to_kind(Kind::Int64)], 1)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tokens::{BOS, EOS, EQUALS, PAD};
    use crate::generate::GenerateError;
    use crate::model::{KvCache, ModelConfig};

    /// A decoder whose next token is always EOS: every response stops at its first token.
    struct StopsAtOnce(ModelConfig);

    impl Decode for StopsAtOnce {
        fn config(&self) -> &ModelConfig {
            &self.0
        }

        fn has_lm_head(&self) -> bool {
            true
        }

        fn new_cache(&self, positions: i64) -> KvCache {
            KvCache::preallocated(self.0.layers as usize, positions)
        }

        fn next_logits(
            &self,
            ids: &Tensor,
            _mask: &Tensor,
            _cache: Option<&mut KvCache>,
        ) -> std::result::Result<Tensor, GenerateError> {
            let logits = Tensor::full(
                [ids.size()[0], self.0.vocab],
                -1e4,
                (Kind::Float, Device::Cpu),
            );
            let _ = logits.narrow(1, EOS, 1).fill_(1e4);
            Ok(logits)
        }
    }

    fn rows(t: &Tensor) -> Vec<Vec<i64>> {
        Vec::<Vec<i64>>::try_from(t.to_kind(Kind::Int64)).unwrap()
    }

    /// Columns past the generated width, and targets shorter than `max_new`, hold the pad token
    /// (they once held the number of padded columns, which reads as a digit).
    #[test]
    fn columns_past_the_generated_width_hold_the_pad_token() {
        let samples = vec![crate::data::Sample {
            prompt: vec![BOS, 1, 2, EQUALS],
            target: vec![2, 1, EOS],
            row: None,
        }];
        let how = Sampling {
            n: 2,
            max_new: 6,
            sampling: SamplingConfig::GREEDY,
            seed: 1,
            specials: Specials::TASK,
        };
        let r = rollout(
            &StopsAtOnce(ModelConfig::tiny()),
            &samples,
            0,
            1,
            &how,
            Device::Cpu,
        )
        .unwrap();
        let response = rows(r.field("response").unwrap());
        assert_eq!(response, vec![vec![EOS, PAD, PAD, PAD, PAD, PAD]; 2]);
        let target = rows(r.field("target").unwrap());
        assert_eq!(target, vec![vec![2, 1, EOS, PAD, PAD, PAD]; 2]);
        let mask = rows(r.field("mask").unwrap());
        assert_eq!(mask, vec![vec![1, 0, 0, 0, 0, 0]; 2]);
    }
}

#[cfg(test)]
#[path = "partial_tests.rs"]
mod partial_tests;

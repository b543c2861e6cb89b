//! Multi-turn generation ([`crate::generate::generate_turns`]) by the static decode step: within
//! a turn, one step replayed per token as in single-turn generation; between turns, the holes
//! left in the turn's slot and the environment's observations are fed into the same buffers as
//! one block (eagerly: once a turn). A row that ended its turn early answers the next one from
//! its cache, so no row leaves the batch: one step shape, the batch of all rows. The episodes
//! are the eager decoder's: the same layout, tokens, masks and log-probabilities (up to the
//! rounding of attention over more, masked, keys).

use tch::{Kind, Tensor};

use super::{StaticDecoder, StepRunner, StoppedRows};
use crate::generate::turns::{Environment, Episodes, TurnsConfig, TurnsRollout};
use crate::generate::{GenerateConfig, GenerateError};
use crate::model::Transformer;

/// Generates as [`crate::generate::generate_turns`] does (arguments validated), each decode
/// step run by `runner`; `check_every`: steps between two reads of the stop flag.
#[allow(clippy::too_many_arguments)] // the eager decoder's arguments, and the runner
pub(crate) fn generate_turns(
    model: &Transformer,
    prompt_ids: &Tensor,
    prompt_mask: &Tensor,
    config: &GenerateConfig,
    turns: TurnsConfig,
    env: &mut dyn Environment,
    check_every: i64,
    runner: &mut dyn StepRunner,
) -> Result<TurnsRollout, GenerateError> {
    let (max_new, slot) = (config.max_new, config.max_new + turns.max_obs);
    // The layout as one response, whose positions draw the random numbers as the eager
    // decoder's do; a rollout of turns returns no logits.
    let layout = GenerateConfig {
        max_new: turns.response_len(max_new),
        first_position: 0,
        return_logits: false,
        ..config.clone()
    };
    let mut decoder =
        StaticDecoder::prefill(model, prompt_ids, prompt_mask, &layout, StoppedRows::Holes)?;
    let device = prompt_ids.device();
    let mut episodes = Episodes::new(decoder.rows, turns, model.config().vocab);
    for turn in 0..turns.max_turns {
        let start = turn * slot;
        let chosen = decoder.decode_tokens(max_new, check_every, runner)?;
        let (tokens, policy) = decoder.written(start, chosen);
        let Some((obs_ids, obs_mask)) =
            episodes.after_turn(env, turn, &tokens, &policy, config.pad_token_id)?
        else {
            break;
        };
        let logits = decoder.feed_block(start + chosen - 1, max_new - chosen, &obs_ids, &obs_mask);
        decoder.start_turn(start + slot, &episodes.playing(device), &logits);
    }
    Ok(decoder.into_turns_rollout(turns, max_new, episodes.turns_taken(device)))
}

impl StaticDecoder<'_> {
    /// The tokens written at response positions `start..start + width` and their mask (`[R,
    /// width]` each).
    fn written(&self, start: i64, width: i64) -> (Tensor, Tensor) {
        let out = &self.rollout;
        let of = |t: &Tensor| t.narrow(0, 0, self.rows).narrow(1, start, width);
        (of(&out.response_ids), of(&out.response_mask))
    }

    /// Feeds, after a turn whose last token was chosen at response position `at`, that token,
    /// `holes` holes (the rest of its slot) and the observation slot (`[R, max_obs]` ids and
    /// attention), which the rollout records; returns the logits `[R, V]` after it.
    fn feed_block(&mut self, at: i64, holes: i64, obs_ids: &Tensor, obs_mask: &Tensor) -> Tensor {
        let (rows, device) = (self.rows, obs_ids.device());
        let max_obs = obs_ids.size()[1];
        let observed = at + 1 + holes;
        let out = &self.rollout;
        for (recorded, values) in [(&out.response_ids, obs_ids), (&out.response_mask, obs_mask)] {
            recorded
                .narrow(0, 0, rows)
                .narrow(1, observed, max_obs)
                .copy_(values);
        }
        let pad = self.config.pad_token_id;
        let ids = Tensor::cat(
            &[
                self.token.unsqueeze(1),
                Tensor::full([rows, holes], pad, (Kind::Int64, device)),
                obs_ids.shallow_clone(),
            ],
            1,
        );
        let attention = Tensor::cat(
            &[
                self.attention.unsqueeze(1),
                Tensor::zeros([rows, holes], (Kind::Int64, device)),
                obs_mask.shallow_clone(),
            ],
            1,
        );
        let first = self.prompt_len + at;
        let columns =
            Tensor::arange_start(first, first + 1 + holes + max_obs, (Kind::Int64, device));
        self.feed(rows, &ids, &attention, &columns)
    }

    /// Starts the turn whose slot begins at response position `position`: the rows `playing`
    /// (`[R]` bool) decode, the others are stopped; chooses its first token from `logits`.
    fn start_turn(&mut self, position: i64, playing: &Tensor, logits: &Tensor) {
        let _ = self.position.fill_(position);
        self.finished.copy_(&playing.logical_not());
        self.choose(logits, self.rows);
    }

    /// The episodes as written: each turn slot's attended tokens are the policy's, of its turn.
    fn into_turns_rollout(self, turns: TurnsConfig, max_new: i64, taken: Tensor) -> TurnsRollout {
        let (out, rows) = (self.rollout, self.rows);
        let keep = |t: Tensor| t.narrow(0, 0, rows);
        let attention = keep(out.response_mask);
        let width = attention.size()[1];
        let slot = max_new + turns.max_obs;
        // The turn of each response position in a turn slot, −1 in an observation slot.
        let slot_turn: Vec<i64> = (0..width)
            .map(|p| if p % slot < max_new { p / slot } else { -1 })
            .collect();
        let slot_turn = Tensor::from_slice(&slot_turn).to_device(attention.device());
        let policy = attention.ne(0).logical_and(&slot_turn.ge(0).unsqueeze(0));
        let turn = slot_turn
            .unsqueeze(0)
            .expand([rows, width], false)
            .where_scalarother(&policy, -1);
        TurnsRollout {
            prompt_ids: out.prompt_ids,
            prompt_mask: out.prompt_mask,
            response_ids: keep(out.response_ids),
            attention,
            policy,
            turn,
            turns: taken,
            group_ids: out.group_ids,
            token_logprobs: keep(out.token_logprobs),
        }
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, nn};

    use super::*;
    use crate::generate::left_pad;
    use crate::generate::static_decode::Recording;
    use crate::model::{Heads, ModelConfig};

    /// What replaying one captured step across turns relies on: feeding a turn's block and
    /// starting the next turn write into the buffers the step reads, where they are.
    #[test]
    fn turns_feed_and_restart_in_the_same_buffers() {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = Transformer::new(&vs.root(), &ModelConfig::tiny(), Heads::POLICY, 3).unwrap();
        let (ids, mask) = left_pad(&[vec![4, 5, 6], vec![7]], 0);
        let turns = TurnsConfig {
            max_turns: 2,
            max_obs: 3,
        };
        let config = GenerateConfig {
            max_new: turns.response_len(4),
            samples_per_prompt: 2,
            eos_token_id: Some(9),
            sampling: crate::generate::SamplingConfig::at_temperature(1.0),
            ..GenerateConfig::default()
        };
        tch::no_grad(|| {
            let mut decoder =
                StaticDecoder::prefill(&model, &ids, &mask, &config, StoppedRows::Holes).unwrap();
            let before = decoder.addresses();
            let mut runner = Recording::default();
            let chosen = decoder.decode_tokens(4, 1, &mut runner).unwrap();
            let obs_ids =
                Tensor::from_slice(&[0i64, 11, 12, 0, 0, 13, 0, 0, 0, 14, 15, 16]).view([4, 3]);
            let obs_mask = obs_ids.ne(0).to_kind(Kind::Int64);
            let logits = decoder.feed_block(chosen - 1, 4 - chosen, &obs_ids, &obs_mask);
            let playing = Tensor::from_slice(&[true, false, true, true]);
            decoder.start_turn(7, &playing, &logits);
            decoder.decode_tokens(4, 1, &mut runner).unwrap();
            assert_eq!(decoder.addresses(), before);
            // The observations are recorded in their slot, the row done holds padding after it.
            let (written, attended) = decoder.written(4, 3);
            assert!(written.equal(&obs_ids) && attended.equal(&obs_mask));
            let (_, second) = decoder.written(7, 4);
            assert_eq!(second.get(1).sum(Kind::Int64).int64_value(&[]), 0);
            assert!(runner.batches.iter().all(|&b| b == 4));
        });
    }
}

//! Multi-turn generation against an environment (`docs/environments.md`): the policy decodes a
//! turn, the environment answers each row still in its episode with an observation (or ends
//! it), the observation's tokens are fed through the KV cache, and the next turn decodes after
//! them.
//!
//! Every row has the same fixed slots after its (left-padded) prompt:
//!
//! ```text
//! [turn 0: max_new][obs 0: max_obs][turn 1: max_new] … [obs K-2: max_obs][turn K-1: max_new]
//! ```
//!
//! A position nobody filled (after a turn's end-of-answer token, the start of an observation
//! shorter than `max_obs` — observations are right-aligned in their slot, so the token before a
//! turn's first is the observation's last — and every slot after the episode ended) holds the
//! padding token with attention 0. The KV cache holds every slot position with that same mask,
//! so the training forward over the finished rollout sees exactly the context each token was
//! sampled in: positions come from the mask's cumulative sum, masked keys are never attended to.

use tch::{Kind, Tensor};

use super::{Decode, GenerateConfig, GenerateError, next_tokens_from, philox};

/// The turns of an episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnsConfig {
    /// Turns at most (≥ 1); `GenerateConfig::max_new` is each turn's budget.
    pub max_turns: i64,
    /// Tokens at most per observation (≥ 1).
    pub max_obs: i64,
}

impl TurnsConfig {
    /// Response positions of the layout: `K·max_new + (K−1)·max_obs`.
    pub fn response_len(&self, max_new: i64) -> i64 {
        self.max_turns * max_new + (self.max_turns - 1) * self.max_obs
    }
}

/// What the environment answered after a row's turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The episode goes on; these tokens (at most `max_obs`) come before the next turn.
    Observe(Vec<i64>),
    /// The episode is over.
    Done,
}

/// The environment as the decoder sees it: token ids in, observations out.
pub trait Environment {
    /// After turn `turn`: `rows[i]` (a row of the call's batch) sampled `responses[i]` in this
    /// turn (its end-of-answer token included). One reply per row, in order.
    fn step(
        &mut self,
        turn: i64,
        rows: &[i64],
        responses: &[Vec<i64>],
    ) -> Result<Vec<Reply>, GenerateError>;
}

/// What [`generate_turns`] produced, `R = prompts × samples_per_prompt` rows and
/// `N = TurnsConfig::response_len` response positions.
#[derive(Debug)]
pub struct TurnsRollout {
    /// `[R, P]`, left-padded as given.
    pub prompt_ids: Tensor,
    pub prompt_mask: Tensor,
    /// `[R, N]` int64: sampled tokens, observation tokens, padding.
    pub response_ids: Tensor,
    /// `[R, N]` int64: 1 at sampled and observation tokens, 0 at padding.
    pub attention: Tensor,
    /// `[R, N]` bool: the tokens the policy sampled (each turn's end-of-answer token included).
    pub policy: Tensor,
    /// `[R, N]` int64: the turn of each sampled token, −1 elsewhere.
    pub turn: Tensor,
    /// `[R]` int64: turns each row took (1..=max_turns).
    pub turns: Tensor,
    /// `[R]` int64: the prompt of each row.
    pub group_ids: Tensor,
    /// `[R, N]` float32: each sampled token's log-probability under the model's raw logits, as
    /// the training forward over the rollout gives it (up to rounding); 0 elsewhere.
    pub token_logprobs: Tensor,
}

/// Generates episodes of up to `turns.max_turns` turns for the left-padded prompts, asking `env`
/// after each turn.
pub fn generate_turns<M: Decode + ?Sized>(
    model: &M,
    prompt_ids: &Tensor,
    prompt_mask: &Tensor,
    config: &GenerateConfig,
    turns: TurnsConfig,
    env: &mut dyn Environment,
) -> Result<TurnsRollout, GenerateError> {
    let every = super::stop_check_interval(prompt_ids.device());
    generate_turns_checking(model, prompt_ids, prompt_mask, config, turns, env, every)
}

/// [`generate_turns`], reading whether any row of a turn still decodes every `check_every`
/// tokens (the device's interval there; the tests set it).
pub(super) fn generate_turns_checking<M: Decode + ?Sized>(
    model: &M,
    prompt_ids: &Tensor,
    prompt_mask: &Tensor,
    config: &GenerateConfig,
    turns: TurnsConfig,
    env: &mut dyn Environment,
    check_every: i64,
) -> Result<TurnsRollout, GenerateError> {
    if turns.max_turns < 1 || turns.max_obs < 1 {
        return Err(GenerateError::InvalidSetting(format!(
            "max_turns and max_obs must be at least 1, got {} and {}",
            turns.max_turns, turns.max_obs
        )));
    }
    if config.samples_per_prompt < 1 || config.max_new < 1 {
        return Err(GenerateError::InvalidSetting(
            "max_new and samples_per_prompt must be at least 1".into(),
        ));
    }
    // The single-turn checks, with the whole layout as the response.
    let whole = GenerateConfig {
        max_new: turns.response_len(config.max_new),
        use_kv_cache: true,
        ..config.clone()
    };
    super::validate(model, prompt_ids, prompt_mask, &whole)?;
    tch::no_grad(|| {
        if let Some((whole, index)) = super::graphed(model, prompt_ids.device())? {
            let mut graphs = super::static_decode::Graphs::new(index);
            return super::static_decode::generate_turns(
                whole,
                prompt_ids,
                prompt_mask,
                config,
                turns,
                env,
                check_every,
                &mut graphs,
            );
        }
        EagerTurns::new(model, prompt_ids, prompt_mask, config, turns, check_every).run(env)
    })
}

/// Columns of the layout, appended as they are decided.
#[derive(Default)]
struct Columns {
    ids: Vec<Tensor>,
    attention: Vec<Tensor>,
    policy: Vec<Tensor>,
    turn: Vec<Tensor>,
    logprobs: Vec<Tensor>,
}

impl Columns {
    /// Appends `[R, w]` blocks.
    fn push(&mut self, ids: Tensor, attention: Tensor, policy: Tensor, turn: Tensor, lp: Tensor) {
        self.ids.push(ids);
        self.attention.push(attention);
        self.policy.push(policy);
        self.turn.push(turn);
        self.logprobs.push(lp);
    }

    /// `w` positions of padding with attention 0.
    fn holes(&mut self, rows: i64, w: i64, pad: i64, device: tch::Device) -> Tensor {
        let ids = Tensor::full([rows, w], pad, (Kind::Int64, device));
        self.push(
            ids.shallow_clone(),
            Tensor::zeros([rows, w], (Kind::Int64, device)),
            Tensor::zeros([rows, w], (Kind::Bool, device)),
            Tensor::full([rows, w], -1, (Kind::Int64, device)),
            Tensor::zeros([rows, w], (Kind::Float, device)),
        );
        ids
    }

    fn width(&self) -> i64 {
        self.ids.iter().map(|t| t.size()[1]).sum()
    }
}

struct EagerTurns<'a, M: Decode + ?Sized> {
    model: &'a M,
    config: &'a GenerateConfig,
    turns: TurnsConfig,
    /// `[R, N]` float64 over the layout's `N` positions: the uniform number of each row at each
    /// position it may sample at (`None` when greedy).
    uniforms: Option<Tensor>,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    group_ids: Tensor,
    cache: crate::model::KvCache,
    /// Tokens between two reads of the rows-still-answering flag ([`super::stop_check_interval`]):
    /// between reads, rows that have stopped decode padding with attention 0, which is what the
    /// rest of their turn's slot holds anyway.
    check_every: i64,
    /// Attention over the prompt and every position fed so far.
    mask: Tensor,
    columns: Columns,
}

impl<'a, M: Decode + ?Sized> EagerTurns<'a, M> {
    fn new(
        model: &'a M,
        prompt_ids: &Tensor,
        prompt_mask: &Tensor,
        config: &'a GenerateConfig,
        turns: TurnsConfig,
        check_every: i64,
    ) -> Self {
        let device = prompt_ids.device();
        let n = config.samples_per_prompt;
        let group_ids = Tensor::arange(prompt_ids.size()[0], (Kind::Int64, device))
            .repeat_interleave_self_int(n, 0, None);
        let prompt_mask = prompt_mask.to_kind(Kind::Int64);
        let rows = prompt_ids.size()[0] * n;
        let first = config.rows_of.map_or(0, |(first, _)| first);
        let positions = 0..turns.response_len(config.max_new);
        // The prompt, then every turn's response and observation slots.
        let cache = model.new_cache(prompt_ids.size()[1] + positions.end);
        let uniforms = (!config.sampling.is_greedy())
            .then(|| philox::uniforms(config.seed, first..first + rows, positions, device));
        Self {
            model,
            config,
            turns,
            uniforms,
            prompt_ids: prompt_ids.index_select(0, &group_ids),
            mask: prompt_mask.index_select(0, &group_ids),
            prompt_mask: prompt_mask.index_select(0, &group_ids),
            group_ids,
            cache,
            check_every,
            columns: Columns::default(),
        }
    }

    /// The token each row chooses at layout position `position`.
    fn sample(&self, logits: &Tensor, position: i64) -> Tensor {
        match &self.uniforms {
            Some(u) => next_tokens_from(logits, &self.config.sampling, &u.select(1, position)),
            None => logits.argmax(-1, false),
        }
    }

    fn run(mut self, env: &mut dyn Environment) -> Result<TurnsRollout, GenerateError> {
        let rows = self.prompt_ids.size()[0];
        let device = self.prompt_ids.device();
        let (pad, max_new, max_obs) = (
            self.config.pad_token_id,
            self.config.max_new,
            self.turns.max_obs,
        );
        let mut logits = self.prefill()?;
        let mut episodes = Episodes::new(rows, self.turns, self.model.config().vocab);
        for turn in 0..self.turns.max_turns {
            let mut alive = episodes.playing(device);
            let mut sampled: Vec<Tensor> = Vec::new();
            let mut steps = 0;
            // The turn's last token, fed with the block after it (not at all after the last turn).
            let mut pending = None;
            while steps < max_new {
                // Turn t's slot starts at t · (max_new + max_obs).
                let chosen = self.sample(&logits, turn * (max_new + max_obs) + steps);
                let token = chosen.where_scalarother(&alive, pad);
                let lp = logits
                    .log_softmax(-1, Kind::Float)
                    .gather(1, &token.unsqueeze(1), false)
                    .squeeze_dim(1)
                    .where_scalarother(&alive, 0.0);
                let turn_index =
                    Tensor::full([rows], turn, (Kind::Int64, device)).where_scalarother(&alive, -1);
                let attention = alive.to_kind(Kind::Int64);
                self.columns.push(
                    token.unsqueeze(1),
                    attention.unsqueeze(1),
                    alive.unsqueeze(1),
                    turn_index.unsqueeze(1),
                    lp.unsqueeze(1),
                );
                sampled.push(token.shallow_clone());
                if let Some(eos) = self.config.eos_token_id {
                    alive = alive.logical_and(&token.ne(eos));
                }
                steps += 1;
                let check = steps % self.check_every == 0;
                if steps == max_new || (check && alive.any().int64_value(&[]) == 0) {
                    pending = Some((token.unsqueeze(1), attention.unsqueeze(1)));
                    break;
                }
                logits = self.feed(&token.unsqueeze(1), &attention.unsqueeze(1))?;
            }
            let policy = Tensor::cat(
                &self.columns.policy[self.columns.policy.len() - sampled.len()..],
                1,
            );
            let Some((obs_ids, obs_mask)) =
                episodes.after_turn(env, turn, &Tensor::stack(&sampled, 1), &policy, pad)?
            else {
                break;
            };
            // The rest of the turn's slot (holes) and the observation slot, fed as one block.
            let rest = max_new - steps;
            let (last_token, last_attention) = pending.expect("a turn samples at least one token");
            let mut block_ids = vec![last_token];
            let mut block_mask = vec![last_attention];
            if rest > 0 {
                block_ids.push(self.columns.holes(rows, rest, pad, device));
                block_mask.push(Tensor::zeros([rows, rest], (Kind::Int64, device)));
            }
            self.columns.push(
                obs_ids.shallow_clone(),
                obs_mask.shallow_clone(),
                Tensor::zeros([rows, max_obs], (Kind::Bool, device)),
                Tensor::full([rows, max_obs], -1, (Kind::Int64, device)),
                Tensor::zeros([rows, max_obs], (Kind::Float, device)),
            );
            block_ids.push(obs_ids);
            block_mask.push(obs_mask);
            logits = self.feed(&Tensor::cat(&block_ids, 1), &Tensor::cat(&block_mask, 1))?;
        }
        // Slots after every episode ended.
        let n = self.turns.response_len(max_new);
        let filled = self.columns.width();
        if filled < n {
            let _ = self.columns.holes(rows, n - filled, pad, device);
        }
        let c = self.columns;
        Ok(TurnsRollout {
            prompt_ids: self.prompt_ids,
            prompt_mask: self.prompt_mask,
            response_ids: Tensor::cat(&c.ids, 1),
            attention: Tensor::cat(&c.attention, 1),
            policy: Tensor::cat(&c.policy, 1),
            turn: Tensor::cat(&c.turn, 1),
            turns: episodes.turns_taken(device),
            group_ids: self.group_ids,
            token_logprobs: Tensor::cat(&c.logprobs, 1),
        })
    }

    /// Logits for the first token of turn 0, `[R, V]`: each distinct prompt prefilled once.
    fn prefill(&mut self) -> Result<Tensor, GenerateError> {
        let n = self.config.samples_per_prompt;
        let first_samples = Tensor::arange_start_step(
            0,
            self.prompt_ids.size()[0],
            n,
            (Kind::Int64, self.prompt_ids.device()),
        );
        let ids = self.prompt_ids.index_select(0, &first_samples);
        let mask = self.prompt_mask.index_select(0, &first_samples);
        let logits = self.model.next_logits(&ids, &mask, Some(&mut self.cache))?;
        self.cache.select_rows(&self.group_ids);
        Ok(logits.index_select(0, &self.group_ids))
    }

    /// Feeds `[R, w]` tokens with their attention and returns the logits after the last.
    fn feed(&mut self, ids: &Tensor, attention: &Tensor) -> Result<Tensor, GenerateError> {
        self.mask = Tensor::cat(&[&self.mask, attention], 1);
        self.model
            .next_logits(ids, &self.mask, Some(&mut self.cache))
    }
}

/// The host's side of a batch of episodes, whichever decoder runs them: which rows still play,
/// the turns each took, and the environment's answers checked and laid out as observation slots.
pub(super) struct Episodes {
    turns: TurnsConfig,
    vocab: i64,
    playing: Vec<bool>,
    turns_taken: Vec<i64>,
}

impl Episodes {
    pub(super) fn new(rows: i64, turns: TurnsConfig, vocab: i64) -> Self {
        Self {
            turns,
            vocab,
            playing: vec![true; rows as usize],
            turns_taken: vec![0; rows as usize],
        }
    }

    /// `[R]` bool: the rows whose episode goes on.
    pub(super) fn playing(&self, device: tch::Device) -> Tensor {
        Tensor::from_slice(&self.playing).to_device(device)
    }

    /// `[R]` int64: the turns each row took.
    pub(super) fn turns_taken(&self, device: tch::Device) -> Tensor {
        Tensor::from_slice(&self.turns_taken).to_device(device)
    }

    /// After turn `turn`, in which each row chose `tokens` (`[R, w]`, `policy` (`[R, w]`, any
    /// kind) marking those it sampled): asks `env` about the rows that played it. `None` when no
    /// episode goes on (the last turn, or every row done); otherwise the observation slot,
    /// `[R, max_obs]` ids and attention on the tokens' device, each observation right-aligned
    /// after `pad` holes (a row without one: holes only).
    pub(super) fn after_turn(
        &mut self,
        env: &mut dyn Environment,
        turn: i64,
        tokens: &Tensor,
        policy: &Tensor,
        pad: i64,
    ) -> Result<Option<(Tensor, Tensor)>, GenerateError> {
        let host = |t: &Tensor| {
            Vec::<Vec<i64>>::try_from(t.to_kind(Kind::Int64).to_device(tch::Device::Cpu))
                .map_err(|e| GenerateError::InvalidSetting(e.to_string()))
        };
        let (block, policy_rows) = (host(tokens)?, host(policy)?);
        let mut who = Vec::new();
        let mut responses = Vec::new();
        for (r, playing) in self.playing.iter().enumerate() {
            if *playing {
                self.turns_taken[r] = turn + 1;
                who.push(r as i64);
                responses.push(
                    block[r]
                        .iter()
                        .zip(&policy_rows[r])
                        .filter(|(_, p)| **p != 0)
                        .map(|(t, _)| *t)
                        .collect::<Vec<i64>>(),
                );
            }
        }
        let replies = env.step(turn, &who, &responses)?;
        if replies.len() != who.len() {
            return Err(GenerateError::InvalidSetting(format!(
                "the environment answered {} of {} rows",
                replies.len(),
                who.len()
            )));
        }
        let last = turn + 1 == self.turns.max_turns;
        let max_obs = self.turns.max_obs;
        let mut observations: Vec<&[i64]> = vec![&[]; self.playing.len()];
        for (&r, reply) in who.iter().zip(&replies) {
            match reply {
                Reply::Done => self.playing[r as usize] = false,
                Reply::Observe(ids) if !last => {
                    if ids.len() as i64 > max_obs {
                        return Err(GenerateError::InvalidSetting(format!(
                            "an observation of {} tokens is longer than max_obs {max_obs}",
                            ids.len()
                        )));
                    }
                    if let Some(&id) = ids.iter().find(|&&id| !(0..self.vocab).contains(&id)) {
                        return Err(GenerateError::TokenOutOfRange {
                            id,
                            vocab: self.vocab,
                        });
                    }
                    observations[r as usize] = ids;
                }
                Reply::Observe(_) => {}
            }
        }
        if last || !self.playing.iter().any(|&p| p) {
            return Ok(None);
        }
        let rows = self.playing.len() as i64;
        let mut obs_ids = Vec::with_capacity((rows * max_obs) as usize);
        let mut obs_mask = Vec::with_capacity((rows * max_obs) as usize);
        for o in observations {
            let gap = max_obs as usize - o.len();
            obs_ids.extend(std::iter::repeat_n(pad, gap).chain(o.iter().copied()));
            obs_mask.extend(std::iter::repeat_n(0i64, gap).chain(std::iter::repeat_n(1, o.len())));
        }
        let slot = |values: &[i64]| {
            Tensor::from_slice(values)
                .view([rows, max_obs])
                .to_device(tokens.device())
        };
        Ok(Some((slot(&obs_ids), slot(&obs_mask))))
    }
}

//! Batched autoregressive generation: the prompts (left-padded) are prefilled once, then each
//! step decodes one token per row from the KV cache.

pub mod philox;
mod sampling;
mod static_decode;
mod turns;

pub use sampling::{SamplingConfig, next_tokens, next_tokens_from};
pub use turns::{Environment, Reply, TurnsConfig, TurnsRollout, generate_turns};

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::collectives::CollectiveError;
use crate::model::{KvCache, ModelConfig, Rows, Transformer};

/// What the decoder needs of a model, however its weights are laid out over ranks. Every rank
/// that runs the decoder for one batch must get the same full-vocabulary logits, so that the
/// same seed samples the same tokens on each.
pub trait Decode {
    fn config(&self) -> &ModelConfig;
    fn has_lm_head(&self) -> bool;
    /// An empty cache for the layers this rank runs, with room for `positions` positions.
    fn new_cache(&self, positions: i64) -> KvCache;
    /// Logits `[B, vocab]` for the token after the last of `ids` (`[B, T]`); `mask` covers the
    /// cached positions and then `ids`, as in [`Transformer::hidden_states`].
    fn next_logits(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, GenerateError>;
    /// The whole model, when this rank holds it: generation on a GPU then replays its decode
    /// step as a captured graph (`static_decode`). `None`: a model split over ranks, decoded
    /// eagerly.
    fn whole_model(&self) -> Option<&Transformer> {
        None
    }
}

impl Decode for Transformer {
    fn config(&self) -> &ModelConfig {
        Transformer::config(self)
    }

    fn has_lm_head(&self) -> bool {
        self.heads().lm
    }

    fn new_cache(&self, positions: i64) -> KvCache {
        KvCache::preallocated(self.config().layers as usize, positions)
    }

    fn next_logits(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, GenerateError> {
        // Only the last position's logits are read: the others are keys and values.
        let last = Rows {
            first: ids.size()[1] - 1,
            len: 1,
        };
        let hidden = self.hidden_states_at(ids, mask, cache, Some(last));
        Ok(self.lm_head(&hidden).squeeze_dim(1))
    }

    fn whole_model(&self) -> Option<&Transformer> {
        Some(self)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateConfig {
    /// Longest response, in tokens.
    pub max_new: i64,
    /// Samples drawn per prompt (`n` in GRPO/RLOO); the rows of one prompt are adjacent.
    pub samples_per_prompt: i64,
    /// A row stops after emitting this token; `None` always generates `max_new` tokens.
    pub eos_token_id: Option<i64>,
    /// Written into the response after a row has stopped.
    pub pad_token_id: i64,
    pub sampling: SamplingConfig,
    pub seed: u64,
    /// Decode from the KV cache; `false` recomputes the whole sequence every step (a reference
    /// for tests and debugging).
    pub use_kv_cache: bool,
    /// Also return the logits each response token was chosen from.
    pub return_logits: bool,
    /// These rows are rows `first..first + R` of a batch of `total` rows (`(first, total)`):
    /// a row's random numbers depend on its index in the whole batch ([`philox`]), so a data
    /// rank's share samples exactly the tokens the whole batch would (`total` is only checked).
    /// `None`: the rows are the whole batch.
    pub rows_of: Option<(i64, i64)>,
    /// The response position of the first new token: a paused generation continued from its
    /// first tokens (a partial rollout) draws the random numbers of the positions it is at.
    pub first_position: i64,
    /// Stop decoding rows that have stopped (with the KV cache): at a stop check where a quarter
    /// or more of the rows decoded have emitted EOS, the batch is cut to the others, so that a
    /// few long responses do not carry the finished rows along. The rollout is the same.
    pub compact_finished: bool,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        Self {
            max_new: 16,
            samples_per_prompt: 1,
            eos_token_id: None,
            pad_token_id: 0,
            sampling: SamplingConfig::GREEDY,
            seed: 0,
            use_kv_cache: true,
            return_logits: false,
            rows_of: None,
            first_position: 0,
            compact_finished: true,
        }
    }
}

/// What [`generate`] produced, `R = prompts × samples_per_prompt` rows.
#[derive(Debug)]
pub struct Rollout {
    /// `[R, P]`, left-padded as given.
    pub prompt_ids: Tensor,
    pub prompt_mask: Tensor,
    /// `[R, N]` with `N ≤ max_new` the longest response; `pad_token_id` after a row's EOS.
    pub response_ids: Tensor,
    /// `[R, N]` int64: 1 up to and including the EOS, 0 after it.
    pub response_mask: Tensor,
    /// `[R]` int64: the index of the prompt each row was sampled from.
    pub group_ids: Tensor,
    /// `[R, N, V]` float32 when `return_logits` was set (0 after a row's EOS).
    pub logits: Option<Tensor>,
    /// `[R, N]` float32: the log-probability of each response token under the model's raw
    /// logits (before temperature, top-k or top-p), as a forward pass over the rollout gives it
    /// (up to rounding); 0 after a row's EOS (padding, masked).
    pub token_logprobs: Tensor,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenerateError {
    #[error("generation needs a model with an LM head")]
    NoLmHead,
    #[error("invalid generation setting: {0}")]
    InvalidSetting(String),
    #[error("prompt ids {ids:?} and prompt mask {mask:?} must have the same [B, P] shape")]
    PromptShape { ids: Vec<i64>, mask: Vec<i64> },
    #[error("generation across ranks: {0}")]
    Collective(#[from] CollectiveError),
    #[error("{0}")]
    Graph(String),
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfRange { id: i64, vocab: i64 },
    /// The environment of a multi-turn rollout gave no usable answer (its message says which).
    #[error("{0}")]
    Environment(String),
    #[error("prompts must be left-padded: the last column of the prompt mask has a 0")]
    NotLeftPadded,
    #[error(
        "prompts of {prompt} tokens plus {max_new} new ones exceed the model's max_len {max_len}"
    )]
    TooLong {
        prompt: i64,
        max_new: i64,
        max_len: i64,
    },
}

/// Left-pads token lists into `([B, P] ids, [B, P] mask)` int64 tensors.
pub fn left_pad(prompts: &[Vec<i64>], pad_token_id: i64) -> (Tensor, Tensor) {
    let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(prompts.len() * width);
    let mut mask = Vec::with_capacity(prompts.len() * width);
    for prompt in prompts {
        let padding = width - prompt.len();
        ids.extend(std::iter::repeat_n(pad_token_id, padding).chain(prompt.iter().copied()));
        mask.extend(std::iter::repeat_n(0i64, padding).chain(std::iter::repeat_n(1, prompt.len())));
    }
    let shape = [prompts.len() as i64, width as i64];
    (
        Tensor::from_slice(&ids).view(shape),
        Tensor::from_slice(&mask).view(shape),
    )
}

/// Generates responses for the left-padded `prompt_ids` / `prompt_mask` (`[B, P]`).
pub fn generate<M: Decode + ?Sized>(
    model: &M,
    prompt_ids: &Tensor,
    prompt_mask: &Tensor,
    config: &GenerateConfig,
) -> Result<Rollout, GenerateError> {
    validate(model, prompt_ids, prompt_mask, config)?;
    let device = prompt_ids.device();
    let every = stop_check_interval(device);
    tch::no_grad(|| {
        if config.use_kv_cache
            && let Some((whole, index)) = graphed(model, device)?
        {
            let mut graphs = static_decode::Graphs::new(index);
            return static_decode::generate(
                whole,
                prompt_ids,
                prompt_mask,
                config,
                every,
                &mut graphs,
            );
        }
        Decoder::new(model, prompt_ids, prompt_mask, config, every).run()
    })
}

/// The model and its GPU's index when decode steps run as captured graphs: on a GPU a decode
/// step is dozens of small kernels, as one captured graph per batch size one launch. That needs
/// the model held whole, on CUDA, and the graph library ([`crate::cuda_graph`]).
fn graphed<M: Decode + ?Sized>(
    model: &M,
    device: tch::Device,
) -> Result<Option<(&Transformer, usize)>, GenerateError> {
    if let (Some(whole), tch::Device::Cuda(index)) = (model.whole_model(), device)
        && crate::cuda_graph::available().map_err(GenerateError::Graph)?
    {
        return Ok(Some((whole, index)));
    }
    Ok(None)
}

/// Decoding steps between two reads of the all-rows-stopped flag: reading it back from a GPU
/// waits for the queued work, so there the decoder reads it every 8 tokens (decoding rows that
/// have stopped as padding meanwhile, and dropping the surplus columns at the end: the rollout is
/// the same); on the CPU a read costs nothing, so every token.
fn stop_check_interval(device: tch::Device) -> i64 {
    if device == tch::Device::Cpu { 1 } else { 8 }
}

fn validate<M: Decode + ?Sized>(
    model: &M,
    prompt_ids: &Tensor,
    prompt_mask: &Tensor,
    config: &GenerateConfig,
) -> Result<(), GenerateError> {
    if !model.has_lm_head() {
        return Err(GenerateError::NoLmHead);
    }
    if prompt_ids.dim() != 2 || prompt_ids.size() != prompt_mask.size() || prompt_ids.size()[1] == 0
    {
        return Err(GenerateError::PromptShape {
            ids: prompt_ids.size(),
            mask: prompt_mask.size(),
        });
    }
    let prompt = prompt_ids.size()[1];
    if prompt_mask
        .select(1, prompt - 1)
        .eq(0)
        .any()
        .int64_value(&[])
        != 0
    {
        return Err(GenerateError::NotLeftPadded);
    }
    let vocab = model.config().vocab;
    // Padded positions are embedded too, and the pad token is fed back after EOS.
    let extremes = [
        prompt_ids.min().int64_value(&[]),
        prompt_ids.max().int64_value(&[]),
        config.pad_token_id,
    ];
    if let Some(&id) = extremes.iter().find(|&&id| !(0..vocab).contains(&id)) {
        return Err(GenerateError::TokenOutOfRange { id, vocab });
    }
    let max_len = model.config().max_len;
    if prompt + config.max_new > max_len {
        return Err(GenerateError::TooLong {
            prompt,
            max_new: config.max_new,
            max_len,
        });
    }
    let invalid = |what: String| Err(GenerateError::InvalidSetting(what));
    let sampling = &config.sampling;
    if config.max_new < 1 {
        return invalid(format!(
            "max_new must be at least 1, got {}",
            config.max_new
        ));
    }
    if config.samples_per_prompt < 1 {
        return invalid(format!(
            "samples_per_prompt must be at least 1, got {}",
            config.samples_per_prompt
        ));
    }
    if !(sampling.temperature >= 0.0 && sampling.temperature.is_finite()) {
        return invalid(format!(
            "temperature must be finite and ≥ 0, got {}",
            sampling.temperature
        ));
    }
    if sampling.top_k.is_some_and(|k| k < 1) {
        return invalid(format!(
            "top_k must be at least 1, got {:?}",
            sampling.top_k
        ));
    }
    if sampling.top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
        return invalid(format!("top_p must be in (0, 1], got {:?}", sampling.top_p));
    }
    let rows = prompt_ids.size()[0] * config.samples_per_prompt;
    if let Some((first, total)) = config.rows_of
        && !(first >= 0 && first + rows <= total)
    {
        return invalid(format!(
            "rows {first}..{} do not lie in a batch of {total}",
            first + rows
        ));
    }
    Ok(())
}

/// What one decoding step chose for its rows, `finished` (bool `[rows]`) the rows that had
/// stopped before it: those take padding, response mask 0, log-prob 0 and logits 0.
struct StepChoice {
    /// `[rows]` int64: the token recorded and fed next.
    token: Tensor,
    /// `[rows]` int64: the response mask, 1 while the row generates (its EOS included).
    alive: Tensor,
    /// `[rows]` float32: the token's log-probability under the raw logits.
    logprob: Tensor,
    /// `[rows, V]` float32, when the rollout returns logits.
    logits: Option<Tensor>,
}

impl StepChoice {
    fn new(logits: &Tensor, chosen: &Tensor, finished: &Tensor, config: &GenerateConfig) -> Self {
        let token = chosen.where_scalarother(&finished.logical_not(), config.pad_token_id);
        let alive = finished.logical_not().to_kind(Kind::Int64);
        let logprob = logits
            .log_softmax(-1, Kind::Float)
            .gather(1, &token.unsqueeze(1), false)
            .squeeze_dim(1)
            * &alive;
        let logits = config
            .return_logits
            .then(|| logits.to_kind(Kind::Float) * alive.unsqueeze(1));
        Self {
            token,
            alive,
            logprob,
            logits,
        }
    }
}

/// The columns of a response mask (`[R, N]`) up to the last in which a row was still
/// generating, at least one: the width of the rollout whose steps those are, without the steps
/// decoded after every row had stopped.
fn generated_width(response_mask: &Tensor) -> i64 {
    let live = response_mask.any_dim(0, false).sum(Kind::Int64);
    live.int64_value(&[]).max(1)
}

/// The state of one generation call.
struct Decoder<'a, M: Decode + ?Sized> {
    model: &'a M,
    config: &'a GenerateConfig,
    /// `[R, max_new]` float64: the uniform number of each row at each response position (`None`
    /// when greedy).
    uniforms: Option<Tensor>,
    /// Steps between two reads of the stop flag ([`stop_check_interval`]).
    check_every: i64,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    group_ids: Tensor,
    /// `None` when recomputing from scratch each step.
    cache: Option<KvCache>,
    /// Attention mask over the prompt and every response position, `[R, P + max_new]` (the
    /// positions fed so far: [`Self::mask_fed`]); generated tokens always count as real,
    /// including those after EOS, whose outputs are discarded.
    attention_mask: Tensor,
    tokens: Vec<Tensor>,
    alive: Vec<Tensor>,
    logits: Vec<Tensor>,
    logprobs: Vec<Tensor>,
}

impl<'a, M: Decode + ?Sized> Decoder<'a, M> {
    fn new(
        model: &'a M,
        prompt_ids: &Tensor,
        prompt_mask: &Tensor,
        config: &'a GenerateConfig,
        check_every: i64,
    ) -> Self {
        let device = prompt_ids.device();
        let prompts = prompt_ids.size()[0];
        let n = config.samples_per_prompt;
        let first = config.rows_of.map_or(0, |(first, _)| first);
        let uniforms = (!config.sampling.is_greedy()).then(|| {
            philox::uniforms(
                config.seed,
                first..first + prompts * n,
                config.first_position..config.first_position + config.max_new,
                device,
            )
        });
        let group_ids =
            Tensor::arange(prompts, (Kind::Int64, device)).repeat_interleave_self_int(n, 0, None);
        let prompt_mask = prompt_mask.to_kind(Kind::Int64);
        Self {
            model,
            config,
            uniforms,
            check_every,
            prompt_ids: prompt_ids.index_select(0, &group_ids),
            attention_mask: Tensor::cat(
                &[
                    prompt_mask.index_select(0, &group_ids),
                    Tensor::ones([prompts * n, config.max_new], (Kind::Int64, device)),
                ],
                1,
            ),
            prompt_mask: prompt_mask.index_select(0, &group_ids),
            group_ids,
            cache: config
                .use_kv_cache
                .then(|| model.new_cache(prompt_ids.size()[1] + config.max_new)),
            tokens: Vec::new(),
            alive: Vec::new(),
            logits: Vec::new(),
            logprobs: Vec::new(),
        }
    }

    fn run(mut self) -> Result<Rollout, GenerateError> {
        let rows = self.prompt_ids.size()[0];
        let device = self.prompt_ids.device();
        let mut next_logits = self.prefill()?;
        // The rows still decoded, by index (`None`: all), and which of them have stopped.
        let mut live: Option<Tensor> = None;
        let mut finished = Tensor::zeros([rows], (Kind::Bool, device));
        for step in 0..self.config.max_new {
            let sampled = self.sample(&next_logits, step, live.as_ref());
            let chosen = StepChoice::new(&next_logits, &sampled, &finished, self.config);
            let mut token = chosen.token.shallow_clone();
            self.record(live.as_ref(), chosen);
            if let Some(eos) = self.config.eos_token_id {
                finished = finished.logical_or(&token.eq(eos));
            }
            if step + 1 == self.config.max_new {
                break;
            }
            let check = self.config.eos_token_id.is_some() && (step + 1) % self.check_every == 0;
            if check {
                let stopped = finished.sum(Kind::Int64).int64_value(&[]);
                let decoded = finished.size()[0];
                if stopped == decoded {
                    break;
                }
                if self.compacts() && stopped > 0 && 4 * stopped >= decoded {
                    let keep = finished.logical_not().nonzero().squeeze_dim(1);
                    if let Some(cache) = &mut self.cache {
                        cache.select_rows(&keep);
                    }
                    self.attention_mask = self.attention_mask.index_select(0, &keep);
                    token = token.index_select(0, &keep);
                    finished = finished.index_select(0, &keep);
                    live = Some(match live {
                        Some(rows) => rows.index_select(0, &keep),
                        None => keep,
                    });
                }
            }
            next_logits = self.decode(&token)?;
        }
        Ok(self.into_rollout())
    }

    /// Whether stopped rows leave the batch: only with the KV cache (a recomputing decoder reads
    /// every row's tokens so far).
    fn compacts(&self) -> bool {
        self.config.compact_finished && self.cache.is_some()
    }

    /// Keeps one step's tokens, masks, log-probs and logits of the rows decoded (`live`, or all),
    /// as whole-batch columns: a row that has stopped holds padding, mask 0, log-prob 0 and
    /// logits 0 there, in the batch or out of it (however often the stop flag is read).
    fn record(&mut self, live: Option<&Tensor>, chosen: StepChoice) {
        let StepChoice {
            token,
            alive,
            logprob,
            logits,
        } = chosen;
        let Some(live) = live else {
            self.tokens.push(token);
            self.alive.push(alive);
            self.logprobs.push(logprob);
            self.logits.extend(logits);
            return;
        };
        let rows = self.prompt_ids.size()[0];
        let whole = |part: &Tensor, fill: Tensor| fill.index_copy(0, live, part);
        let device = token.device();
        self.tokens.push(whole(
            &token,
            Tensor::full([rows], self.config.pad_token_id, (Kind::Int64, device)),
        ));
        self.alive
            .push(whole(&alive, Tensor::zeros([rows], (Kind::Int64, device))));
        self.logprobs.push(whole(
            &logprob,
            Tensor::zeros([rows], (Kind::Float, device)),
        ));
        if let Some(l) = logits {
            let vocab = l.size()[1];
            self.logits.push(whole(
                &l,
                Tensor::zeros([rows, vocab], (Kind::Float, device)),
            ));
        }
    }

    fn sample(&self, logits: &Tensor, step: i64, live: Option<&Tensor>) -> Tensor {
        match &self.uniforms {
            Some(u) => {
                let u = u.select(1, step);
                let u = live.map_or_else(|| u.shallow_clone(), |rows| u.index_select(0, rows));
                next_tokens_from(logits, &self.config.sampling, &u)
            }
            None => logits.argmax(-1, false),
        }
    }

    /// Logits for the first response token, `[R, V]`.
    fn prefill(&mut self) -> Result<Tensor, GenerateError> {
        match &mut self.cache {
            Some(cache) => {
                // Prefill each distinct prompt once (from the first of its samples), then give
                // every sample its own copy of the cache.
                let first_samples = Tensor::arange_start_step(
                    0,
                    self.prompt_ids.size()[0],
                    self.config.samples_per_prompt,
                    (Kind::Int64, self.prompt_ids.device()),
                );
                let ids = self.prompt_ids.index_select(0, &first_samples);
                let mask = self.prompt_mask.index_select(0, &first_samples);
                let logits = self.model.next_logits(&ids, &mask, Some(cache))?;
                cache.select_rows(&self.group_ids);
                Ok(logits.index_select(0, &self.group_ids))
            }
            None => self.recompute(),
        }
    }

    /// Feeds the tokens just chosen and returns the logits for the next ones.
    fn decode(&mut self, token: &Tensor) -> Result<Tensor, GenerateError> {
        let mask = self.mask_fed();
        match &mut self.cache {
            Some(cache) => self
                .model
                .next_logits(&token.unsqueeze(1), &mask, Some(cache)),
            None => self.recompute(),
        }
    }

    /// Logits for the next token from a full forward pass over prompt and response so far.
    fn recompute(&self) -> Result<Tensor, GenerateError> {
        let mut pieces = vec![self.prompt_ids.shallow_clone()];
        pieces.extend(self.tokens.iter().map(|t| t.unsqueeze(1)));
        let ids = Tensor::cat(&pieces, 1);
        self.model.next_logits(&ids, &self.mask_fed(), None)
    }

    /// The attention mask's columns of the prompt and the tokens chosen so far (each fed once
    /// it is recorded).
    fn mask_fed(&self) -> Tensor {
        let fed = self.prompt_ids.size()[1] + self.tokens.len() as i64;
        self.attention_mask.narrow(1, 0, fed)
    }

    fn into_rollout(self) -> Rollout {
        let response_mask = Tensor::stack(&self.alive, 1);
        // Steps decoded after every row had stopped (between two stop checks) hold padding
        // only: keep the columns up to the last in which a row was still generating, as reading
        // the flag every step would have (at least one).
        let width = if self.check_every > 1 {
            generated_width(&response_mask)
        } else {
            response_mask.size()[1]
        };
        let keep = |t: Tensor| t.narrow(1, 0, width);
        Rollout {
            prompt_ids: self.prompt_ids,
            prompt_mask: self.prompt_mask,
            response_ids: keep(Tensor::stack(&self.tokens, 1)),
            response_mask: keep(response_mask),
            group_ids: self.group_ids,
            logits: self
                .config
                .return_logits
                .then(|| keep(Tensor::stack(&self.logits, 1))),
            token_logprobs: keep(Tensor::stack(&self.logprobs, 1)),
        }
    }
}

#[cfg(test)]
mod compaction_tests;
#[cfg(test)]
mod static_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod turns_tests;

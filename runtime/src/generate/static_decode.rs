//! Generation by a static decode step: every tensor a step reads or writes is allocated once,
//! for the whole batch and the whole response, and the response position advances in a device
//! counter, so that a step is the same work on the same buffers at every position — on a GPU,
//! one captured CUDA graph replayed per token ([`crate::cuda_graph`]): no launch per operation,
//! and no host round trip between two stop checks. Attention covers every column of the KV
//! cache, those not written yet masked.
//!
//! Rows that stop leave the batch as in the eager decoder, but into a few fixed shapes: at a
//! stop check the rows still decoding move to the front of the buffers (in place: a graph's
//! addresses stay valid) and the step then runs on the smallest power of two that holds them,
//! one graph per power of two (at most log₂ R + 1); the rows between decode as stopped rows,
//! their outputs written to a scratch row. The rollout is the eager decoder's: the same tokens,
//! masks and log-probabilities (up to the rounding of attention over more, masked, keys).

use std::collections::BTreeMap;

use tch::{Kind, Tensor};

use super::{
    Decode, GenerateConfig, GenerateError, Rollout, StepChoice, generated_width, next_tokens_from,
    philox,
};
use crate::cuda_graph::Graph;
use crate::model::{KvCache, Rows, Transformer, additive_bias};

mod multi_turn;

pub(crate) use multi_turn::generate_turns;

/// How a static step runs for the first `rows` rows of the buffers.
pub(crate) trait StepRunner {
    /// Runs `step` exactly once, for a batch of `rows`; `Err` when it could not.
    fn run(&mut self, rows: i64, step: &mut dyn FnMut()) -> Result<(), GenerateError>;
}

/// Runs each step eagerly and records the batch size it ran for: on the CPU, in tests, what
/// [`Graphs`] does on a GPU.
#[cfg(test)]
#[derive(Default)]
pub(super) struct Recording {
    pub(super) batches: Vec<i64>,
}

#[cfg(test)]
impl StepRunner for Recording {
    fn run(&mut self, rows: i64, step: &mut dyn FnMut()) -> Result<(), GenerateError> {
        self.batches.push(rows);
        step();
        Ok(())
    }
}

/// Each batch size's step captured as a CUDA graph at its first run (which runs it once,
/// eagerly) and replayed after.
pub(crate) struct Graphs {
    device: usize,
    captured: BTreeMap<i64, Graph>,
}

impl Graphs {
    pub(crate) fn new(device: usize) -> Self {
        Self {
            device,
            captured: BTreeMap::new(),
        }
    }
}

impl StepRunner for Graphs {
    fn run(&mut self, rows: i64, step: &mut dyn FnMut()) -> Result<(), GenerateError> {
        if let Some(graph) = self.captured.get(&rows) {
            return graph.replay().map_err(GenerateError::Graph);
        }
        let graph = Graph::capture(self.device, step)
            .map_err(GenerateError::Graph)?
            .ok_or_else(|| GenerateError::Graph("no CUDA graph library was found".into()))?;
        self.captured.insert(rows, graph);
        Ok(())
    }
}

/// Generates as [`super::generate`] does (arguments validated), each decode step run by
/// `runner`; `check_every`: steps between two reads of the stop flag.
pub(crate) fn generate(
    model: &Transformer,
    prompt_ids: &Tensor,
    prompt_mask: &Tensor,
    config: &GenerateConfig,
    check_every: i64,
    runner: &mut dyn StepRunner,
) -> Result<Rollout, GenerateError> {
    let mut decoder = StaticDecoder::prefill(
        model,
        prompt_ids,
        prompt_mask,
        config,
        StoppedRows::Attended,
    )?;
    decoder.decode_tokens(config.max_new, check_every, runner)?;
    Ok(decoder.into_rollout())
}

/// The buffers of one static generation, `R` rows of prompt length `P`, response length `N`,
/// and KV-cache room `P + N`.
struct StaticDecoder<'a> {
    model: &'a Transformer,
    config: &'a GenerateConfig,
    rows: i64,
    prompt_len: i64,
    /// What a row that has stopped feeds until the position is read again.
    stopped_rows: StoppedRows,
    /// int64 `[1]`: the response position the next token is chosen for.
    position: Tensor,
    /// `[R]` int64: the token each buffer row feeds next (the last it chose).
    token: Tensor,
    /// `[R]` int64: whether that token is attended to (1) or a hole (0).
    attention: Tensor,
    /// `[R]` int64: the real tokens each buffer row has fed (its prompt's, then its
    /// response's): the position of its next real token, as the mask's cumulative sum gives it.
    real_fed: Tensor,
    /// `[R, P + N]` bool: the keys a row may attend: its prompt's real tokens, then each
    /// response position as it is fed, if real. Columns not fed yet are false.
    keys: Tensor,
    /// `[P + N]` int64: the cache's columns, 0, 1, ….
    every_column: Tensor,
    /// `[R]` bool: the buffer row has stopped (EOS, or it holds no rollout row).
    finished: Tensor,
    /// `[R, N]` float64 uniform numbers of each buffer row, when sampling.
    uniforms: Option<Tensor>,
    /// `[R]` int64: the rollout row each buffer row decodes; `R`, the scratch row of the
    /// outputs, for the rows of a batch past those decoding.
    origin: Tensor,
    /// Per layer, keys and values `[R, kv_heads, P + N, head_dim]`.
    cache: Vec<(Tensor, Tensor)>,
    rollout: Outputs,
}

/// What rows that have stopped feed (their outputs are dropped either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoppedRows {
    /// Their padding as real tokens, as the eager single-turn decoder does: nothing comes after
    /// a response's EOS.
    Attended,
    /// Holes, attention 0, as multi-turn generation does: the row's next turn comes after them.
    Holes,
}

/// The rollout as written, one row more than it has (the scratch row), `N` columns.
struct Outputs {
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    group_ids: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    token_logprobs: Tensor,
    /// `[R + 1, N, V]` float32, when asked for.
    logits: Option<Tensor>,
}

impl<'a> StaticDecoder<'a> {
    /// Prefills each distinct prompt once, gives every sample its copy of the cache, and
    /// chooses the first response token.
    fn prefill(
        model: &'a Transformer,
        prompt_ids: &Tensor,
        prompt_mask: &Tensor,
        config: &'a GenerateConfig,
        stopped_rows: StoppedRows,
    ) -> Result<Self, GenerateError> {
        let device = prompt_ids.device();
        let (prompts, prompt_len) = (prompt_ids.size()[0], prompt_ids.size()[1]);
        let n = config.samples_per_prompt;
        let rows = prompts * n;
        let room = prompt_len + config.max_new;
        let prompt_mask = prompt_mask.to_kind(Kind::Int64);
        let mut cache = model.new_cache(room);
        let logits = model.next_logits(prompt_ids, &prompt_mask, Some(&mut cache))?;
        let group_ids =
            Tensor::arange(prompts, (Kind::Int64, device)).repeat_interleave_self_int(n, 0, None);
        cache.select_rows(&group_ids);
        let logits = logits.index_select(0, &group_ids);
        let prompt_mask = prompt_mask.index_select(0, &group_ids);
        let first = config.rows_of.map_or(0, |(first, _)| first);
        let uniforms = (!config.sampling.is_greedy()).then(|| {
            let positions = config.first_position..config.first_position + config.max_new;
            philox::uniforms(config.seed, first..first + rows, positions, device)
        });
        let outputs =
            |kind: Kind, fill: i64| Tensor::full([rows + 1, config.max_new], fill, (kind, device));
        let rollout = Outputs {
            prompt_ids: prompt_ids.index_select(0, &group_ids),
            group_ids,
            response_ids: outputs(Kind::Int64, config.pad_token_id),
            response_mask: outputs(Kind::Int64, 0),
            token_logprobs: outputs(Kind::Float, 0),
            logits: config.return_logits.then(|| {
                let vocab = logits.size()[1];
                Tensor::zeros([rows + 1, config.max_new, vocab], (Kind::Float, device))
            }),
            prompt_mask: prompt_mask.shallow_clone(),
        };
        let keys = Tensor::cat(
            &[
                prompt_mask.ne(0),
                Tensor::zeros([rows, config.max_new], (Kind::Bool, device)),
            ],
            1,
        );
        let mut decoder = Self {
            model,
            config,
            rows,
            prompt_len,
            stopped_rows,
            position: Tensor::zeros([1], (Kind::Int64, device)),
            token: Tensor::zeros([rows], (Kind::Int64, device)),
            attention: Tensor::ones([rows], (Kind::Int64, device)),
            real_fed: prompt_mask.sum_dim_intlist(1, false, Kind::Int64),
            keys,
            every_column: Tensor::arange(room, (Kind::Int64, device)),
            finished: Tensor::zeros([rows], (Kind::Bool, device)),
            uniforms,
            origin: Tensor::arange(rows, (Kind::Int64, device)),
            cache: cache
                .into_buffers()
                .expect("the prefill wrote every layer's cache"),
            rollout,
        };
        decoder.choose(&logits, rows);
        Ok(decoder)
    }

    /// Decodes up to `tokens` tokens per row, the first of them chosen already (by the prefill,
    /// or [`Self::start_turn`]), reading the stop flag every `check_every` steps; returns the
    /// tokens chosen, fewer when every row had stopped at a read.
    fn decode_tokens(
        &mut self,
        tokens: i64,
        check_every: i64,
        runner: &mut dyn StepRunner,
    ) -> Result<i64, GenerateError> {
        // Rows decoding (at the front of the buffers), and the batch the step runs on. Rows
        // leave the batch only when nothing comes after their response: compaction overwrites
        // them.
        let compacts = self.config.compact_finished && self.stopped_rows == StoppedRows::Attended;
        let (mut live, mut batch) = (self.rows, self.rows);
        for step in 1..tokens {
            if self.config.eos_token_id.is_some() && step % check_every == 0 {
                let keep = self
                    .finished
                    .narrow(0, 0, live)
                    .logical_not()
                    .nonzero()
                    .squeeze_dim(1);
                let left = keep.size()[0];
                if left == 0 {
                    return Ok(step);
                }
                let smaller = (left as u64).next_power_of_two() as i64;
                if compacts && smaller < batch {
                    self.compact(&keep, live, smaller);
                    (live, batch) = (left, smaller);
                }
            }
            runner.run(batch, &mut || self.step(batch))?;
        }
        Ok(tokens)
    }

    /// One decode step for the first `rows` buffer rows: feeds their last tokens, then chooses
    /// the next ones. Nothing here reads a device value on the host, and nothing depends on the
    /// position but device tensors.
    fn step(&mut self, rows: i64) {
        let logits = self.decode(rows);
        self.choose(&logits, rows);
    }

    /// Logits `[rows, V]` after feeding each row's last token, written at cache column
    /// `P + position - 1`.
    fn decode(&mut self, rows: i64) -> Tensor {
        let column = &self.position + (self.prompt_len - 1);
        let token = self.token.narrow(0, 0, rows).unsqueeze(1);
        let attention = self.attention.narrow(0, 0, rows).unsqueeze(1);
        self.feed(rows, &token, &attention, &column)
    }

    /// Feeds `[rows, T]` tokens with their attention (1 real, 0 a hole) at cache columns
    /// `columns` (int64 `[T]`, consecutive) of the first `rows` buffer rows and returns the
    /// logits `[rows, V]` after the last: keys, positions and the attention bias from the
    /// buffers, as the eager decoder's mask gives them.
    fn feed(&mut self, rows: i64, ids: &Tensor, attention: &Tensor, columns: &Tensor) -> Tensor {
        let first = |t: &Tensor| t.narrow(0, 0, rows);
        let mut keys = first(&self.keys);
        let _ = keys.index_copy_(1, columns, &attention.ne(0));
        // A token's position is the real tokens up to it, less one (a hole: its last real one's).
        let mut real_fed = first(&self.real_fed);
        let positions = (real_fed.unsqueeze(1) + attention.cumsum(1, Kind::Int64) - 1).clamp_min(0);
        let _ = real_fed.g_add_(&attention.sum_dim_intlist(1, false, Kind::Int64));
        // Causal within the tokens fed: each attends the keys up to its own column.
        let (room, steps) = (keys.size()[1], columns.size()[0]);
        let causal = self
            .every_column
            .view([1, room])
            .le_tensor(&columns.view([steps, 1]));
        let allowed = keys
            .view([rows, 1, 1, room])
            .logical_and(&causal.view([1, 1, steps, room]));
        let bias = additive_bias(&allowed, self.model.kind());
        let buffers: Vec<(Tensor, Tensor)> = self
            .cache
            .iter()
            .map(|(k, v)| (first(k), first(v)))
            .collect();
        let mut cache = KvCache::at_columns(&buffers, columns);
        let last = Rows {
            first: steps - 1,
            len: 1,
        };
        let hidden =
            self.model
                .hidden_states_static(ids, &positions, &bias, &mut cache, Some(last));
        self.model.lm_head(&hidden).squeeze_dim(1)
    }

    /// Chooses the first `rows` rows' tokens at the current position from `logits`, writes
    /// them and their masks, log-probabilities and logits into the rollout, and advances the
    /// position: a row that has stopped takes padding, mask 0, log-prob 0 and logits 0.
    fn choose(&mut self, logits: &Tensor, rows: i64) {
        let first = |t: &Tensor| t.narrow(0, 0, rows);
        let chosen = match &self.uniforms {
            Some(u) => {
                let u = first(u).index_select(1, &self.position).squeeze_dim(1);
                next_tokens_from(logits, &self.config.sampling, &u)
            }
            None => logits.argmax(-1, false),
        };
        let mut finished = first(&self.finished);
        let StepChoice {
            token,
            alive,
            logprob,
            logits,
        } = StepChoice::new(logits, &chosen, &finished, self.config);
        let at = [
            Some(first(&self.origin)),
            Some(self.position.expand([rows], false)),
        ];
        let out = &mut self.rollout;
        let _ = out.response_ids.index_put_(&at, &token, false);
        let _ = out.response_mask.index_put_(&at, &alive, false);
        let _ = out.token_logprobs.index_put_(&at, &logprob, false);
        if let (Some(all), Some(logits)) = (&mut out.logits, logits) {
            let _ = all.index_put_(&at, &logits, false);
        }
        first(&self.token).copy_(&token);
        if self.stopped_rows == StoppedRows::Holes {
            first(&self.attention).copy_(&alive);
        }
        if let Some(eos) = self.config.eos_token_id {
            let _ = finished.logical_or_(&token.eq(eos));
        }
        let _ = self.position.g_add_scalar_(1);
    }

    /// Moves the buffer rows `keep` (of the first `live`) to the front, in place, and marks the
    /// rows after them up to `batch` as holding no rollout row.
    fn compact(&mut self, keep: &Tensor, live: i64, batch: i64) {
        let left = keep.size()[0];
        let mut per_row: Vec<&mut Tensor> = vec![
            &mut self.token,
            &mut self.attention,
            &mut self.real_fed,
            &mut self.keys,
            &mut self.finished,
            &mut self.origin,
        ];
        per_row.extend(self.uniforms.as_mut());
        for (k, v) in &mut self.cache {
            per_row.push(k);
            per_row.push(v);
        }
        for buffer in per_row {
            let kept = buffer.narrow(0, 0, live).index_select(0, keep);
            buffer.narrow(0, 0, left).copy_(&kept);
        }
        let filler = batch - left;
        let _ = self.finished.narrow(0, left, filler).fill_(1);
        let _ = self.origin.narrow(0, left, filler).fill_(self.rows);
    }

    /// The rollout's rows, and its columns up to the last in which a row was still generating
    /// (at least one), as the eager decoder keeps.
    fn into_rollout(self) -> Rollout {
        let out = self.rollout;
        let rows = self.rows;
        let response_mask = out.response_mask.narrow(0, 0, rows);
        let width = generated_width(&response_mask);
        let keep = |t: Tensor| t.narrow(0, 0, rows).narrow(1, 0, width);
        Rollout {
            prompt_ids: out.prompt_ids,
            prompt_mask: out.prompt_mask,
            response_ids: keep(out.response_ids),
            response_mask: keep(response_mask),
            group_ids: out.group_ids,
            logits: out.logits.map(keep),
            token_logprobs: keep(out.token_logprobs),
        }
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, nn};

    use super::*;
    use crate::generate::left_pad;
    use crate::model::{Heads, ModelConfig};

    impl StaticDecoder<'_> {
        /// Where every buffer a step reads or writes lies.
        pub(super) fn addresses(&self) -> Vec<usize> {
            let out = &self.rollout;
            let mut all = vec![
                &self.position,
                &self.token,
                &self.attention,
                &self.real_fed,
                &self.keys,
                &self.every_column,
                &self.finished,
                &self.origin,
                &out.response_ids,
                &out.response_mask,
                &out.token_logprobs,
            ];
            all.extend(self.uniforms.as_ref());
            all.extend(out.logits.as_ref());
            all.extend(self.cache.iter().flat_map(|(k, v)| [k, v]));
            all.iter().map(|t| t.data_ptr() as usize).collect()
        }
    }

    /// What replaying a captured graph relies on: every step, before and after rows leave the
    /// batch, reads and writes the same memory.
    #[test]
    fn the_buffers_never_move() {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = Transformer::new(&vs.root(), &ModelConfig::tiny(), Heads::POLICY, 2).unwrap();
        let prompts: Vec<Vec<i64>> = (0..8).map(|i| vec![1 + i, 3]).collect();
        let (ids, mask) = left_pad(&prompts, 0);
        let config = GenerateConfig {
            max_new: 6,
            samples_per_prompt: 8,
            eos_token_id: Some(47),
            sampling: crate::generate::SamplingConfig::at_temperature(1.0),
            return_logits: true,
            ..GenerateConfig::default()
        };
        tch::no_grad(|| {
            let mut decoder =
                StaticDecoder::prefill(&model, &ids, &mask, &config, StoppedRows::Attended)
                    .unwrap();
            let before = decoder.addresses();
            // 40 of the 64 rows stopped: the 24 left move to the front, the step runs on 32.
            let _ = decoder.finished.narrow(0, 0, 40).fill_(1);
            let mut runner = Recording::default();
            decoder.decode_tokens(6, 1, &mut runner).unwrap();
            assert_eq!(runner.batches[0], 32);
            assert_eq!(decoder.addresses(), before);
        });
    }
}

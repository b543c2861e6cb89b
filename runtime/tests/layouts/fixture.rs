//! The model, batch and single-rank results every layout is compared with.

use std::collections::BTreeMap;

use rlc_plan::model::Layout;
use rlc_runtime::generate::{GenerateConfig, SamplingConfig, generate, left_pad};
use rlc_runtime::model::{Heads, ModelConfig, Transformer};
use rlc_runtime::optim::{AdamW, AdamWConfig, clip_grad_norm};
use rlc_runtime::parallel::{RankGroups, process_groups};
use tch::{Device, Kind, Tensor, nn};

use crate::ranks::{RankResult, layout_name, run_on};
pub use crate::ranks::{all_groups, fits, fits_ranks, threads_only};

pub const SEED: u64 = 7;
pub const STEPS: usize = 3;
/// AdamW normalises each element's step by that element's own gradient size, so where a gradient
/// nearly cancels over the batch, float32 rounding (any change of summation order: splitting the
/// batch, sharding a matmul) becomes a weight difference proportional to the learning rate — at
/// 1e-2 up to ~2e-4 on the single-rank reference itself under sub-epsilon noise. At 1e-3 three
/// steps still move weights by up to 3e-3 (30× the 1e-4 tolerance) and that noise stays ~1e-5.
pub const LR: f64 = 1e-3;
pub const CLIP: f64 = 1.0;
/// Rows of the training batch: divisible by every data-parallel degree and micro-batch count used.
pub const BATCH: i64 = 8;

/// Four layers (two pipeline stages of two), 8 query and 4 key/value heads, an MLP width and a
/// vocabulary divisible by 4: every layout of the tests divides it. Qwen2-style q/k/v biases so
/// that bias sharding is exercised too.
pub fn config() -> ModelConfig {
    ModelConfig {
        layers: 4,
        hidden: 64,
        heads: 8,
        kv_heads: 4,
        ffn: 96,
        vocab: 64,
        max_len: 32,
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        tie_embeddings: false,
        qkv_bias: true,
        positions: Default::default(),
    }
}

/// The same with the LM head tied to the embedding (both vocabulary-parallel under TP).
pub fn tied_config() -> ModelConfig {
    ModelConfig {
        tie_embeddings: true,
        qkv_bias: false,
        ..config()
    }
}

/// The untied model with a learned position table instead of rotary positions, and no q/k/v
/// biases: without a rotation a key bias shifts every score of a query equally, so softmax
/// cancels it and its gradient is rounding noise, which no relative comparison can match.
pub fn learned_config() -> ModelConfig {
    ModelConfig {
        positions: rlc_runtime::model::Positions::Learned,
        qkv_bias: false,
        ..config()
    }
}

pub fn layout(dp: u32, fsdp: u32, tp: u32, pp: u32) -> Layout {
    Layout::new(dp, fsdp, tp, pp)
}

/// The whole model on one rank, as every layout starts from it.
pub fn model(config: &ModelConfig) -> (nn::VarStore, Transformer) {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Transformer::new(&vs.root(), config, Heads::POLICY, SEED).expect("valid config");
    (vs, model)
}

/// Every weight by its Hugging Face name (private copies).
pub fn named_weights(vs: &nn::VarStore) -> BTreeMap<String, Tensor> {
    vs.variables()
        .into_iter()
        .map(|(name, t)| (name, t.detach().copy()))
        .collect()
}

/// `[BATCH, 12]` token ids and mask: rows of different lengths, left and right padding.
pub fn batch() -> (Tensor, Tensor) {
    let vocab = config().vocab;
    let width = 12;
    let mut ids = Vec::new();
    let mut mask = Vec::new();
    for row in 0..BATCH {
        let real = width - (row % 4);
        let left = if row % 2 == 0 { width - real } else { 0 };
        for col in 0..width {
            let is_real = col >= left && col < left + real;
            ids.push(if is_real {
                (row * 7 + col * 13 + 3) % vocab
            } else {
                0
            });
            mask.push(i64::from(is_real));
        }
    }
    (
        Tensor::from_slice(&ids).view([BATCH, width]),
        Tensor::from_slice(&mask).view([BATCH, width]),
    )
}

/// Real next-token positions of the whole batch (the denominator of the token-mean loss).
pub fn batch_tokens() -> f64 {
    let (_, mask) = batch();
    target_mask(&mask).sum(Kind::Double).double_value(&[])
}

/// Which next-token log-probabilities `[B, T-1]` count: the predicted token and its context are real.
pub fn target_mask(mask: &Tensor) -> Tensor {
    let steps = mask.size()[1];
    (mask.narrow(1, 1, steps - 1) * mask.narrow(1, 0, steps - 1)).to_kind(Kind::Float)
}

/// Supervised loss: minus the log-probabilities of the real tokens, divided by `tokens` — the
/// count over the *whole* batch, so a data rank's loss on its rows sums to the global token mean.
pub fn sft_loss(logprobs: &Tensor, mask: &Tensor, tokens: f64) -> Tensor {
    -(logprobs * target_mask(mask)).sum(Kind::Float) / tokens
}

pub fn adamw_config() -> AdamWConfig {
    AdamWConfig::default()
}

/// Logits `[BATCH, 12, vocab]` of the whole model on one rank.
pub fn reference_logits(config: &ModelConfig) -> Tensor {
    let (_, model) = model(config);
    let (ids, mask) = batch();
    tch::no_grad(|| model.logits(&ids, &mask))
}

/// The weights after [`STEPS`] AdamW steps (constant learning rate [`LR`], gradients clipped to a
/// global norm of [`CLIP`]) on the whole batch, on one rank.
pub fn reference_training(config: &ModelConfig) -> BTreeMap<String, Tensor> {
    let (vs, model) = model(config);
    let mut adam = AdamW::for_var_store(&vs, adamw_config());
    let (ids, mask) = batch();
    for _ in 0..STEPS {
        adam.zero_grad();
        sft_loss(&model.logprobs(&ids, &mask), &mask, batch_tokens()).backward();
        clip_grad_norm(&adam.params(), CLIP);
        adam.step(LR);
    }
    named_weights(&vs)
}

/// Prompts of different lengths (left-padded) and a sampling configuration with a fixed seed.
pub fn prompts() -> (Tensor, Tensor) {
    left_pad(
        &[
            vec![5, 9, 13],
            vec![2, 4, 6, 8, 10],
            vec![1],
            vec![33, 17, 60, 42],
        ],
        0,
    )
}

pub fn generate_config() -> GenerateConfig {
    GenerateConfig {
        max_new: 10,
        samples_per_prompt: 2,
        sampling: SamplingConfig {
            temperature: 1.0,
            ..SamplingConfig::GREEDY
        },
        seed: 11,
        ..GenerateConfig::default()
    }
}

/// Replica `replica` of `replicas`' share of [`prompts`] and the generation settings that sample
/// exactly the whole batch's tokens for them (each data-parallel replica decodes its own prompts).
pub fn replica_prompts(replicas: u32, replica: usize) -> (Tensor, Tensor, GenerateConfig) {
    let (ids, mask) = prompts();
    let count = ids.size()[0];
    let per_replica = count / i64::from(replicas);
    let start = replica as i64 * per_replica;
    let mut generation = generate_config();
    let samples = generation.samples_per_prompt;
    generation.rows_of = Some((start * samples, count * samples));
    (
        ids.narrow(0, start, per_replica),
        mask.narrow(0, start, per_replica),
        generation,
    )
}

/// Token ids `[8, 10]` one rank samples from [`prompts`] with [`generate_config`].
pub fn reference_generation(config: &ModelConfig) -> Tensor {
    let (_, model) = model(config);
    let (ids, mask) = prompts();
    generate(&model, &ids, &mask, &generate_config())
        .expect("generation")
        .response_ids
}

/// Runs `body` on every rank of `layout` and returns the results in rank order, on every
/// process: ranks are threads of this process, or the processes of an MPI job (each runs its own
/// rank's body; see `ranks.rs`), which must be as many as the layout's ranks at least (ask
/// [`fits`] first).
pub fn run_ranks<T: RankResult + Send>(
    layout: Layout,
    body: impl Fn(RankGroups) -> T + Sync,
) -> Vec<T> {
    run_on(
        layout.devices() as usize,
        &layout_name(layout),
        || process_groups(layout),
        body,
    )
}

/// The largest absolute difference of two tensors of one shape.
pub fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shapes differ");
    (a.to_kind(Kind::Double) - b.to_kind(Kind::Double))
        .abs()
        .max()
        .double_value(&[])
}

/// Asserts that `actual` has every weight of `expected` within `tolerance`, naming the worst.
pub fn assert_weights_close(
    what: &str,
    actual: &BTreeMap<String, Tensor>,
    expected: &BTreeMap<String, Tensor>,
    tolerance: f64,
) {
    assert_eq!(
        actual.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "{what}: weight names"
    );
    for (name, want) in expected {
        let diff = max_diff(&actual[name], want);
        assert!(diff <= tolerance, "{what}: `{name}` differs by {diff:e}");
    }
}

//! `precision = bf16` under the sharded layouts: each computes in bfloat16 what the whole
//! float32 model computes, to bfloat16's rounding, with log-probabilities in float32; the
//! gradients reach every parameter — bfloat16 on a tensor-parallel rank or a pipeline stage
//! (the optimizer keeps float32 master weights of them), float32 in an FSDP rank's shards
//! (which are the master weights), whose all-gathers carry half the bytes.

use std::collections::BTreeMap;

use rlc_runtime::model::{Heads, ModelConfig, token_logprobs};
use rlc_runtime::parallel::fsdp::Fsdp;
use rlc_runtime::parallel::pp::PipelineModel;
use rlc_runtime::parallel::tp::TpTransformer;
use rlc_runtime::parallel::{RankGroups, Tape};
use tch::{Device, Kind, Tensor, nn};

use crate::fixture;

/// What one rank computed: its log-probabilities of the fixture's batch and the kind of its
/// activations (`None` on a pipeline stage without the head), the kinds of its gradients
/// (sorted, each once), and whether every parameter it holds got a non-zero gradient.
type Computed = (Option<Tensor>, Option<String>, String, bool);

/// Asserts that `ranks`' log-probabilities are the whole float32 model's to bfloat16's
/// rounding and not equal to them, that the activations were `activations`, and that every
/// parameter got a gradient of kind `gradients`.
fn assert_bfloat16_close(what: &str, ranks: &[Computed], activations: &str, gradients: &str) {
    let config = fixture::config();
    let (ids, _) = fixture::batch();
    let expected = token_logprobs(&fixture::reference_logits(&config), &ids);
    let live = fixture::target_mask(&fixture::batch().1);
    let scale = (&expected * &live).abs().max().double_value(&[]);
    for (rank, (logprobs, kind, grads, every)) in ranks.iter().enumerate() {
        if let Some(kind) = kind {
            assert_eq!(kind, activations, "{what} rank {rank}: activations");
        }
        assert_eq!(grads, gradients, "{what} rank {rank}: gradients");
        assert!(every, "{what} rank {rank}: a parameter got no gradient");
        let Some(logprobs) = logprobs else { continue };
        assert_eq!(logprobs.kind(), Kind::Float, "{what} rank {rank}");
        let diff = ((logprobs - &expected) * &live)
            .abs()
            .max()
            .double_value(&[]);
        println!("{what} rank {rank}: log-probs within {diff:e} (up to {scale})");
        // Rounding, not another function: as the whole bfloat16 model (`model::tests`).
        assert!(diff > 0.0, "{what} rank {rank}: computed in float32");
        assert!(
            diff < 0.01 * scale.max(1.0),
            "{what} rank {rank}: log-probs differ by {diff}"
        );
    }
}

/// The kinds of `tensors`' defined elements, sorted and each once; and whether all are
/// defined and non-zero.
fn kinds_of(tensors: &[Tensor]) -> (String, bool) {
    let mut kinds: Vec<String> = tensors
        .iter()
        .filter(|t| t.defined())
        .map(|t| format!("{:?}", t.kind()))
        .collect();
    kinds.sort();
    kinds.dedup();
    let every = tensors
        .iter()
        .all(|t| t.defined() && t.abs().sum(Kind::Double).double_value(&[]) > 0.0);
    (kinds.join(","), every)
}

fn whole_weights(config: &ModelConfig) -> BTreeMap<String, Tensor> {
    fixture::named_weights(&fixture::model(config).0)
}

fn sum_of_live(logprobs: &Tensor) -> Tensor {
    (logprobs * fixture::target_mask(&fixture::batch().1)).sum(Kind::Float)
}

/// What a rank's body gives: its log-probabilities and the kind of its activations (where it
/// has the head) and its parameters' gradients.
type RankOutputs = (Option<Tensor>, Option<Kind>, Vec<Tensor>);

/// Runs `body` on every rank of `layout` (not at all where the job has too few ranks) and
/// checks what it computed with [`assert_bfloat16_close`].
fn check_ranks(
    what: &str,
    layout: rlc_plan::model::Layout,
    gradients: &str,
    body: impl Fn(&RankGroups) -> RankOutputs + Sync,
) {
    if !fixture::fits(layout) {
        return;
    }
    let ranks = fixture::run_ranks(layout, |groups: RankGroups| -> Computed {
        let (logprobs, kind, grads) = body(&groups);
        let (grads, every) = kinds_of(&grads);
        (
            logprobs.map(|t| t.detach()),
            kind.map(|k| format!("{k:?}")),
            grads,
            every,
        )
    });
    assert_bfloat16_close(what, &ranks, "BFloat16", gradients);
}

#[test]
fn tensor_parallel_ranks_compute_in_bfloat16() {
    let config = fixture::config();
    check_ranks("tp 2", fixture::layout(1, 1, 2, 1), "BFloat16", |groups| {
        let mut vs = nn::VarStore::new(Device::Cpu);
        let weights = whole_weights(&config);
        let model = TpTransformer::new(&vs.root(), &weights, &config, Heads::POLICY, &groups.tp)
            .expect("divisible layout");
        vs.set_kind(Kind::BFloat16);
        let (ids, mask) = fixture::batch();
        let tape = Tape::new();
        let kind = model
            .hidden_states(&tape, &ids, &mask, None)
            .unwrap()
            .kind();
        tape.clear();
        let logprobs = model.logprobs(&tape, &ids, &mask).unwrap();
        tape.backward(&[(&sum_of_live(&logprobs), None)]).unwrap();
        let grads = model.params().iter().map(|p| p.tensor.grad()).collect();
        (Some(logprobs), Some(kind), grads)
    });
}

#[test]
fn fsdp_ranks_gather_and_compute_in_bfloat16_into_float32_shards() {
    let config = fixture::config();
    check_ranks("fsdp 2", fixture::layout(1, 2, 1, 1), "Float", |groups| {
        let weights = whole_weights(&config);
        let build = || Fsdp::for_rank(&weights, &config, groups, fixture::adamw_config());
        let float_unit = build().expect("sharded model").largest_unit_bytes();
        let mut model = build().expect("sharded model").computing_in(Kind::BFloat16);
        assert_eq!(
            2 * model.largest_unit_bytes(),
            float_unit,
            "an all-gather's bytes"
        );
        let (ids, mask) = fixture::batch();
        let kind = model.logits(&ids, &mask).unwrap().kind();
        let pass = model.forward(&ids, &mask).unwrap();
        let logprobs = pass.logprobs().detach();
        let loss = sum_of_live(pass.logprobs());
        model.backward(pass, &loss).unwrap();
        let grads = model
            .optimizer()
            .params()
            .iter()
            .map(Tensor::grad)
            .collect();
        (Some(logprobs), Some(kind), grads)
    });
}

#[test]
fn pipeline_stages_compute_in_bfloat16() {
    let config = fixture::config();
    check_ranks("pp 2", fixture::layout(1, 1, 1, 2), "BFloat16", |groups| {
        let weights = whole_weights(&config);
        let mut model = PipelineModel::new(&weights, &config, &groups.pp).expect("stage");
        model.set_kind(Kind::BFloat16);
        let (ids, mask) = fixture::batch();
        let logits = model.logits(&ids, &mask).unwrap();
        let kind = logits.as_ref().map(Tensor::kind);
        let logprobs = logits.as_ref().map(|l| token_logprobs(l, &ids));
        model
            .forward_backward(&ids, &mask, 2, |logits, micro| {
                let live = fixture::target_mask(&micro.mask);
                (token_logprobs(logits, &micro.ids) * live).sum(Kind::Float)
            })
            .unwrap();
        let grads = model
            .var_store()
            .variables()
            .values()
            .map(Tensor::grad)
            .collect();
        (logprobs, kind, grads)
    });
}

//! The memory estimate and E0801, on programs built by hand. The expected figures are computed
//! here from first principles (not with the module's helpers), exact to the byte.

use rlc_check::checks::memory::*;
use rlc_check::program::*;
use rlc_diagnostics::{Code, Diagnostic, FileId, Span};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Llama-2-7B: 6,738,415,616 parameters.
const P7: f64 = 6_738_415_616.0;
/// Llama-2-70B: 68,976,648,192 parameters.
const P70: f64 = 68_976_648_192.0;
/// The small config: 8,192 embeddings + 2 × 246,016 per layer + 128 final norm + 8,192 head.
const P_SMALL: f64 = 508_544.0;

fn at(start: u32) -> Origin {
    Origin {
        file: FileId(0),
        span: Span {
            start,
            end: start + 4,
        },
    }
}

fn n<T>(value: T) -> Sourced<T> {
    Sourced {
        value,
        origin: Origin::default(),
    }
}

fn h100_cluster(nodes: u64) -> Cluster {
    Cluster {
        name: "big".into(),
        nodes: n(nodes),
        devices_per_node: n(8),
        device: DeviceSpec {
            name: "h100_80g".into(),
            memory: 80.0 * GIB,
            flops: 989e12,
            bandwidth: 3.35e12,
        },
        intra_bandwidth: 450e9,
        inter_bandwidth: 50e9,
        is_cpu: false,
        origin: at(0),
    }
}

fn llama7b() -> Arch {
    Arch {
        preset: Some("llama2_7b".into()),
        layers: 32,
        hidden: 4096,
        heads: 32,
        kv_heads: 32,
        ffn: 11008,
        vocab: 32000,
        max_len: 4096,
        tie_embeddings: false,
        rope_theta: None,
        norm_eps: None,
        positions: Default::default(),
    }
}

fn llama70b() -> Arch {
    Arch {
        preset: Some("llama2_70b".into()),
        layers: 80,
        hidden: 8192,
        heads: 64,
        kv_heads: 8,
        ffn: 28672,
        vocab: 32000,
        max_len: 4096,
        tie_embeddings: false,
        rope_theta: None,
        norm_eps: None,
        positions: Default::default(),
    }
}

fn small() -> Arch {
    Arch {
        preset: None,
        layers: 2,
        hidden: 128,
        heads: 4,
        kv_heads: 2,
        ffn: 512,
        vocab: 64,
        max_len: 64,
        tie_embeddings: false,
        rope_theta: None,
        norm_eps: None,
        positions: Default::default(),
    }
}

fn model(name: &str, kind: RoleKind, arch: Arch, precision: Precision) -> Model {
    Model {
        name: name.into(),
        kind,
        arch: Some(arch),
        arch_origin: at(100),
        init: Some(Init::Random { seed: 7 }),
        optimizer: Some(Optimizer::adamw(1e-6)),
        frozen: false,
        precision,
        recompute: false,
        origin: at(90),
    }
}

fn frozen(name: &str, arch: Arch) -> Model {
    Model {
        optimizer: None,
        frozen: true,
        init: Some(Init::CopyOf { model: 0 }),
        ..model(name, RoleKind::CausalLM, arch, Precision::Bf16)
    }
}

#[derive(Default)]
struct L {
    dp: u64,
    tp: u64,
    pp: u64,
    fsdp: u64,
    sp: u64,
    micro: Option<u64>,
}

fn layout(l: L) -> Layout {
    let f = |v: u64| (v > 1).then(|| n(v));
    Layout {
        dp: f(l.dp),
        tp: f(l.tp),
        pp: f(l.pp),
        fsdp: f(l.fsdp),
        sp: f(l.sp),
        micro: l.micro.map(n),
    }
}

fn place(model: usize, phase: Option<Phase>, devices: std::ops::Range<u64>, l: L) -> Placement {
    Placement {
        model,
        phase,
        cluster: 0,
        devices,
        devices_origin: at(200),
        layout: layout(l),
        auto: false,
        origin: at(300 + 10 * model as u32),
    }
}

/// A call with `batch` sequences of `prompt + response` tokens.
fn call(model: usize, op: Op, batch: i64, prompt: i64, response: i64) -> RoleCall {
    RoleCall {
        model,
        op,
        batch: Some(n(batch)),
        prompt_len: Some(n(prompt)),
        response_len: Some(n(response)),
        sampling: None,
        epochs: (op == Op::Update).then(|| n(1)),
        minibatch: None,
        reads_behaviour_logp: false,
        origin: at(500),
    }
}

fn update(model: usize, batch: i64, minibatch: i64, prompt: i64, response: i64) -> RoleCall {
    RoleCall {
        minibatch: Some(n(minibatch)),
        ..call(model, Op::Update, batch, prompt, response)
    }
}

fn program(
    nodes: u64,
    models: Vec<Model>,
    placements: Vec<Placement>,
    calls: Vec<RoleCall>,
) -> Program {
    Program {
        clusters: vec![h100_cluster(nodes)],
        models,
        placements,
        pipeline: Some(PipelineFacts {
            name: "train".into(),
            steps: Some(10),
            calls,
            origin: at(400),
            instance: None,
        }),
        ..Program::default()
    }
}

/// One node whose devices `devices` run `phase` of a bf16 `policy` (model 0) of `arch` with
/// layout `l`; the pipeline's one call is `call`.
fn one_policy(
    arch: Arch,
    phase: Phase,
    devices: std::ops::Range<u64>,
    l: L,
    call: RoleCall,
) -> Program {
    program(
        1,
        vec![model("policy", RoleKind::CausalLM, arch, Precision::Bf16)],
        vec![place(0, Some(phase), devices, l)],
        vec![call],
    )
}

/// The estimate of `(model, phase)` on its first device.
fn phase_of(p: &Program, model: usize, phase: Phase) -> Breakdown {
    estimate(p)
        .into_iter()
        .flat_map(|d| d.phases)
        .find(|m| m.model == model && m.phase == phase)
        .expect("the phase is estimated")
        .breakdown
}

fn diagnostics(p: &Program) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    check(p, &mut diags);
    diags
}

/// Korthikanti et al.'s per-layer activations at 16 bit, written out.
fn layer_16bit(s: f64, m: f64, h: f64, a: f64, tp: f64, sp: f64) -> f64 {
    s * m * h * (10.0 / sp + 24.0 / tp) + 5.0 * a * s * s * m / tp
}

#[test]
fn parameter_counts_match_the_published_models() {
    assert_eq!(llama7b().parameters() as f64, P7);
    assert_eq!(llama70b().parameters() as f64, P70);
    assert_eq!(small().parameters() as f64, P_SMALL);
    assert_eq!(role_parameters(RoleKind::CausalLM, &llama7b()) as f64, P7);
    // A value head is hidden×1 instead of the vocab×hidden LM head.
    assert_eq!(
        role_parameters(RoleKind::ValueModel, &llama7b()) as f64,
        P7 - 32000.0 * 4096.0 + 4096.0
    );
    assert_eq!(
        role_parameters(RoleKind::RewardModel, &small()) as f64,
        P_SMALL - 64.0 * 128.0 + 128.0
    );
    // Per layer: q, o (h²) + k, v (h × kv·d) + SwiGLU (3·h·ffn) + two norms.
    assert_eq!(
        layer_parameters(&llama7b()),
        2 * 4096 * 4096 + 2 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    );
}

#[test]
fn seven_b_adam_bf16_is_16_bytes_per_param_on_one_device() {
    let p = one_policy(
        llama7b(),
        Phase::Train,
        0..1,
        L::default(),
        update(0, 8, 8, 512, 512),
    );
    let b = phase_of(&p, 0, Phase::Train);
    assert_eq!(b.weights, 2.0 * P7);
    assert_eq!(b.gradients, 2.0 * P7);
    assert_eq!(b.optimizer_state, 8.0 * P7);
    assert_eq!(b.master_weights, 4.0 * P7);
    assert_eq!(b.model_state(), 16.0 * P7);
    assert_eq!(b.kv_cache, 0.0);
    // One micro-batch of 8 sequences of 1024 tokens, all 32 layers, plus fp32 logits.
    let (s, m) = (1024.0, 8.0);
    let expected = 32.0 * layer_16bit(s, m, 4096.0, 32.0, 1.0, 1.0) + 4.0 * m * s * 32000.0;
    assert_eq!(b.activations, expected);
    assert!(b.unknown.is_empty());
    assert_eq!(b.total(), 16.0 * P7 + expected);
}

#[test]
fn fsdp_8_divides_model_state_by_8() {
    let p = one_policy(
        llama7b(),
        Phase::Train,
        0..8,
        L {
            fsdp: 8,
            micro: Some(1),
            ..L::default()
        },
        update(0, 64, 64, 512, 512),
    );
    // One run: the eight devices hold the same phase.
    let devices = estimate(&p);
    assert_eq!(runs(&devices), [(0, 8)]);
    let b = &devices[0].phases[0].breakdown;
    assert_eq!(b.weights, 2.0 * P7 / 8.0);
    assert_eq!(b.gradients, 2.0 * P7 / 8.0);
    assert_eq!(b.optimizer_state, 8.0 * P7 / 8.0);
    assert_eq!(b.master_weights, 4.0 * P7 / 8.0);
    assert_eq!(b.model_state(), 2.0 * P7);
    // micro(1): one sequence of 1024 tokens per rank; and, while a layer runs, that layer
    // gathered whole and its whole gradient (bf16).
    let gathered = 2.0 * 2.0 * layer_parameters(&llama7b()) as f64;
    let expected =
        32.0 * layer_16bit(1024.0, 1.0, 4096.0, 32.0, 1.0, 1.0) + 4.0 * 1024.0 * 32000.0 + gathered;
    assert_eq!(b.activations, expected);
    assert!(devices.iter().all(|d| d.phases[0].breakdown == *b));
}

#[test]
fn dp_replicates_model_state() {
    let p = one_policy(
        small(),
        Phase::Train,
        0..8,
        L {
            dp: 8,
            ..L::default()
        },
        update(0, 64, 64, 8, 8),
    );
    assert_eq!(phase_of(&p, 0, Phase::Train).model_state(), 16.0 * P_SMALL);
}

#[test]
fn tp4_pp2_divides_weights_by_8() {
    let p = one_policy(
        llama7b(),
        Phase::Train,
        0..8,
        L {
            tp: 4,
            pp: 2,
            micro: Some(1),
            ..L::default()
        },
        update(0, 4, 4, 512, 512),
    );
    let b = phase_of(&p, 0, Phase::Train);
    assert_eq!(b.weights, 2.0 * P7 / 8.0);
    assert_eq!(b.model_state(), 16.0 * P7 / 8.0);
    // 4 micro-batches per step ≥ pp, so stage 0 holds pp = 2 in flight (1F1B), of 16 layers each;
    // tensor parallelism splits the 24 and the 5as/h terms, not the 10 (no sp).
    let (s, h) = (1024.0, 4096.0);
    let expected = 2.0 * 16.0 * layer_16bit(s, 1.0, h, 32.0, 4.0, 1.0) + 4.0 * s * 32000.0 / 4.0;
    assert_eq!(b.activations, expected);
}

#[test]
fn pipeline_in_flight_micro_batches_are_capped_by_the_accumulation_steps() {
    let arch = small();
    let go = |minibatch: i64| {
        let p = program(
            1,
            vec![model(
                "policy",
                RoleKind::CausalLM,
                arch.clone(),
                Precision::Bf16,
            )],
            vec![place(
                0,
                Some(Phase::Train),
                0..4,
                L {
                    pp: 2,
                    dp: 2,
                    micro: Some(2),
                    ..L::default()
                },
            )],
            vec![update(0, 16, minibatch, 8, 8)],
        );
        phase_of(&p, 0, Phase::Train).activations
    };
    let layer = layer_16bit(16.0, 2.0, 128.0, 4.0, 1.0, 1.0);
    let logits = 4.0 * 2.0 * 16.0 * 64.0;
    // minibatch 4 over 2 ranks: 2 sequences per rank, one micro-batch, one in flight.
    assert_eq!(go(4), layer + logits);
    // minibatch 16: 8 per rank, 4 micro-batches, pp = 2 in flight on the first stage.
    assert_eq!(go(16), 2.0 * layer + logits);
}

#[test]
fn fp32_training_is_16_bytes_per_param_without_a_master_copy() {
    let p = program(
        1,
        vec![model("policy", RoleKind::CausalLM, small(), Precision::F32)],
        vec![place(0, Some(Phase::Train), 0..1, L::default())],
        vec![update(0, 4, 4, 8, 8)],
    );
    let b = phase_of(&p, 0, Phase::Train);
    assert_eq!(b.weights, 4.0 * P_SMALL);
    assert_eq!(b.gradients, 4.0 * P_SMALL);
    assert_eq!(b.optimizer_state, 8.0 * P_SMALL);
    assert_eq!(b.master_weights, 0.0);
    assert_eq!(b.model_state(), 16.0 * P_SMALL);
    // f32 activations are twice the 16-bit figure; logits are fp32 either way.
    let expected =
        2.0 * 2.0 * layer_16bit(16.0, 4.0, 128.0, 4.0, 1.0, 1.0) + 4.0 * 4.0 * 16.0 * 64.0;
    assert_eq!(b.activations, expected);
}

#[test]
fn frozen_model_holds_weights_only() {
    let p = program(
        1,
        vec![
            model("policy", RoleKind::CausalLM, llama7b(), Precision::Bf16),
            frozen("reference", llama7b()),
        ],
        vec![
            place(
                0,
                None,
                0..8,
                L {
                    fsdp: 8,
                    ..L::default()
                },
            ),
            place(
                1,
                None,
                0..8,
                L {
                    tp: 8,
                    ..L::default()
                },
            ),
        ],
        vec![call(1, Op::Logprobs, 64, 512, 512)],
    );
    let b = phase_of(&p, 1, Phase::Logprobs);
    assert_eq!(b.weights, 2.0 * P7 / 8.0);
    assert_eq!(b.gradients, 0.0);
    assert_eq!(b.optimizer_state, 0.0);
    assert_eq!(b.master_weights, 0.0);
    assert_eq!(b.kv_cache, 0.0);
    // No micro: the whole batch (tp keeps one data rank), one layer at a time, plus the logits.
    let (s, m) = (1024.0, 64.0);
    let expected = layer_16bit(s, m, 4096.0, 32.0, 8.0, 1.0) + 4.0 * m * s * 32000.0 / 8.0;
    assert_eq!(b.activations, expected);
}

#[test]
fn fsdp_forward_gathers_one_layer() {
    let p = program(
        1,
        vec![frozen("reference", llama7b())],
        vec![place(
            0,
            None,
            0..8,
            L {
                fsdp: 8,
                micro: Some(2),
                ..L::default()
            },
        )],
        vec![call(0, Op::Logprobs, 64, 512, 512)],
    );
    let b = phase_of(&p, 0, Phase::Logprobs);
    let layer = 4.0 * 4096.0 * 4096.0 + 3.0 * 4096.0 * 11008.0 + 2.0 * 4096.0;
    assert_eq!(b.weights, 2.0 * P7 / 8.0 + 2.0 * layer);
}

#[test]
fn value_model_training_has_no_logits() {
    let p = program(
        1,
        vec![model(
            "critic",
            RoleKind::ValueModel,
            small(),
            Precision::Bf16,
        )],
        vec![place(0, Some(Phase::Train), 0..1, L::default())],
        vec![update(0, 4, 4, 8, 8)],
    );
    let b = phase_of(&p, 0, Phase::Train);
    let pv = P_SMALL - 64.0 * 128.0 + 128.0;
    assert_eq!(b.model_state(), 16.0 * pv);
    assert_eq!(
        b.activations,
        2.0 * layer_16bit(16.0, 4.0, 128.0, 4.0, 1.0, 1.0)
    );
}

#[test]
fn kv_cache_of_a_small_config() {
    // 2 layers, 2 KV heads of dimension 128/4 = 32, 8 + 8 tokens, 16 sequences over dp(2) = 8
    // per replica, bf16: 2 (K and V) · 2 · 2 · 32 · 16 · 8 · 2 = 65,536 bytes.
    let kv = |l: L| {
        let p = program(
            1,
            vec![model(
                "policy",
                RoleKind::CausalLM,
                small(),
                Precision::Bf16,
            )],
            vec![place(0, Some(Phase::Generate), 0..8, l)],
            vec![call(0, Op::Generate, 16, 8, 8)],
        );
        phase_of(&p, 0, Phase::Generate)
    };
    let b = kv(L {
        dp: 2,
        ..L::default()
    });
    assert_eq!(b.kv_cache, 65_536.0);
    assert_eq!(b.weights, 2.0 * P_SMALL);
    assert_eq!(b.gradients + b.optimizer_state + b.master_weights, 0.0);
    // One decode step's fp32 logits for the 8 sequences.
    assert_eq!(b.activations, 4.0 * 8.0 * 64.0);
    // tp(2) splits the 2 KV heads and the weights.
    let b = kv(L {
        dp: 2,
        tp: 2,
        ..L::default()
    });
    assert_eq!(b.kv_cache, 32_768.0);
    assert_eq!(b.weights, P_SMALL);
    // tp(4) > kv_heads: each rank still holds one (replicated) KV head.
    let b = kv(L {
        dp: 2,
        tp: 4,
        ..L::default()
    });
    assert_eq!(b.kv_cache, 32_768.0);
    // pp(2): one layer per stage.
    let b = kv(L {
        dp: 2,
        pp: 2,
        ..L::default()
    });
    assert_eq!(b.kv_cache, 32_768.0);
    // fsdp ranks are generation replicas: weights are not sharded by them.
    let b = kv(L {
        fsdp: 2,
        ..L::default()
    });
    assert_eq!(b.kv_cache, 65_536.0);
    assert_eq!(b.weights, 2.0 * P_SMALL);
}

#[test]
fn recompute_shrinks_activations() {
    let go = |recompute: bool| {
        let p = program(
            1,
            vec![Model {
                recompute,
                ..model("policy", RoleKind::CausalLM, small(), Precision::Bf16)
            }],
            vec![place(
                0,
                Some(Phase::Train),
                0..2,
                L {
                    dp: 2,
                    micro: Some(4),
                    ..L::default()
                },
            )],
            vec![update(0, 16, 8, 8, 8)],
        );
        phase_of(&p, 0, Phase::Train).activations
    };
    // s = 16, m = 4, h = 128, a = 4: one layer = 16·4·128·34 + 5·4·16²·4 = 299,008 bytes;
    // logits 4·4·16·64 = 16,384.
    assert_eq!(go(false), 2.0 * 299_008.0 + 16_384.0);
    // Recompute: each layer's input 2·16·4·128 = 16,384, plus one full layer.
    assert_eq!(go(true), 2.0 * 16_384.0 + 299_008.0 + 16_384.0);
    assert!(go(true) < go(false));
}

#[test]
fn sequence_parallelism_splits_the_remaining_activations() {
    let p = one_policy(
        small(),
        Phase::Train,
        0..2,
        L {
            tp: 2,
            sp: 2,
            micro: Some(4),
            ..L::default()
        },
        update(0, 4, 4, 8, 8),
    );
    // sp = tp is the paper's s·b·h·(34 + 5as/h)/t.
    let per_layer = 16.0 * 4.0 * 128.0 * (34.0 + 5.0 * 4.0 * 16.0 / 128.0) / 2.0;
    assert_eq!(
        phase_of(&p, 0, Phase::Train).activations,
        2.0 * per_layer + 4.0 * 4.0 * 16.0 * 64.0 / 2.0
    );
}

#[test]
fn colocated_phases_take_the_max_not_the_sum() {
    let p = program(
        1,
        vec![
            model("policy", RoleKind::CausalLM, llama7b(), Precision::Bf16),
            frozen("reference", llama7b()),
        ],
        vec![
            place(
                0,
                Some(Phase::Train),
                0..8,
                L {
                    fsdp: 8,
                    micro: Some(1),
                    ..L::default()
                },
            ),
            place(
                0,
                Some(Phase::Generate),
                0..8,
                L {
                    tp: 8,
                    ..L::default()
                },
            ),
            place(
                1,
                None,
                4..8,
                L {
                    dp: 4,
                    ..L::default()
                },
            ),
        ],
        vec![
            call(0, Op::Generate, 64, 512, 512),
            call(0, Op::Logprobs, 64, 512, 512),
            call(1, Op::Logprobs, 64, 512, 512),
            update(0, 64, 64, 512, 512),
        ],
    );
    let train = phase_of(&p, 0, Phase::Train).total();
    let generate = phase_of(&p, 0, Phase::Generate).total();
    let logprobs = phase_of(&p, 0, Phase::Logprobs).total();
    let reference = phase_of(&p, 1, Phase::Logprobs).total();
    let devices = estimate(&p);
    assert_eq!(runs(&devices), [(0, 4), (4, 8)]);
    // Devices 0..4: policy train, generate and logprobs (on the train placement).
    let d0 = &devices[0];
    assert_eq!(
        d0.phases
            .iter()
            .map(|m| (m.model, m.phase))
            .collect::<Vec<_>>(),
        vec![
            (0, Phase::Train),
            (0, Phase::Generate),
            (0, Phase::Logprobs)
        ]
    );
    assert_eq!(
        d0.phases[2].placement, 0,
        "logprobs falls back to the train placement"
    );
    let max = train.max(generate).max(logprobs);
    assert_eq!(d0.peak, max);
    assert!(d0.peak < train + generate + logprobs);
    assert_eq!(d0.capacity, 80.0 * GIB);
    // Devices 4..8 also hold the reference.
    let d7 = &devices[1];
    assert_eq!(d7.phases.len(), 4);
    assert_eq!(d7.peak, max.max(reference));
    assert_eq!(
        d7.peak_phase,
        Some(if reference > max {
            (1, Phase::Logprobs)
        } else {
            d0.peak_phase.unwrap()
        })
    );
    // The reference alone is 2·P7 bytes of weights plus one layer: the peak is not a sum.
    assert!(reference > 2.0 * P7 && reference < 80.0 * GIB);
    assert!(diagnostics(&p).is_empty());
}

fn seventy_b(fsdp: u64, devices: u64) -> Program {
    program(
        8,
        vec![Model {
            recompute: true,
            arch_origin: at(120),
            ..model("policy", RoleKind::CausalLM, llama70b(), Precision::Bf16)
        }],
        vec![place(
            0,
            Some(Phase::Train),
            0..devices,
            L {
                fsdp,
                tp: 8,
                micro: Some(1),
                ..L::default()
            },
        )],
        vec![update(0, 64, 64, 1024, 1024)],
    )
}

#[test]
fn seventy_b_fits_with_fsdp8_tp8() {
    let p = seventy_b(8, 64);
    let b = phase_of(&p, 0, Phase::Train);
    assert_eq!(b.model_state(), 16.0 * P70 / 64.0);
    // While a layer runs: that layer gathered whole and its gradient (bf16, split by tp 8).
    let layer = 2.0 * layer_parameters(&llama70b()) as f64 / 8.0;
    // Recompute: 80 layer inputs of 2·2048·8192 bytes, one full layer, the logits.
    let (s, h) = (2048.0, 8192.0);
    let expected = 80.0 * 2.0 * s * h
        + layer_16bit(s, 1.0, h, 64.0, 8.0, 1.0)
        + 4.0 * s * 32000.0 / 8.0
        + 2.0 * layer;
    assert_eq!(b.activations, expected);
    assert_eq!(b.total(), 20_347_160_576.0 + 2.0 * layer);
    assert_eq!(b.total(), 20_774_987_776.0);
    assert!(b.total() < 80.0 * GIB);
    assert!(diagnostics(&p).is_empty());
    let devices = estimate(&p);
    assert_eq!(runs(&devices), [(0, 64)]);
    assert!(devices.iter().all(|d| d.peak == b.total()));
}

#[test]
fn seventy_b_does_not_fit_with_tp8_alone() {
    let p = seventy_b(1, 8);
    let b = phase_of(&p, 0, Phase::Train);
    assert_eq!(b.model_state(), 16.0 * P70 / 8.0);
    let diags = diagnostics(&p);
    assert_eq!(
        diags.len(),
        1,
        "one diagnostic per placement, not per device"
    );
    let d = &diags[0];
    assert_eq!(d.code, Code::OutOfMemory);
    assert!(d.is_error());
    assert_eq!(
        d.message,
        format!(
            "`policy.train` needs {} per device on `big[0..8]` but an h100_80g has 80.0 GiB",
            format_bytes(b.total())
        )
    );
    assert_eq!(
        d.message,
        "`policy.train` needs 131.4 GiB per device on `big[0..8]` but an h100_80g has 80.0 GiB"
    );
    assert_eq!(d.primary().span, at(300).span);
    assert_eq!(d.labels[1].span, at(120).span);
    assert_eq!(d.labels[1].message, "69.0B parameters from here");
    let help = d.help.as_deref().unwrap();
    assert!(help.contains("fsdp("), "{help}");
    let table = &d.notes[0];
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(
        rows[0],
        "memory per device for `policy.train` on `big[0..8]` with tp(8) micro(1):"
    );
    let gib = |x: f64| format!("{:.1} GiB", x / GIB);
    let expect = [
        ("weights", b.weights),
        ("gradients", b.gradients),
        ("optimizer state", b.optimizer_state),
        ("fp32 master weights", b.master_weights),
        ("activations", b.activations),
        ("KV cache", 0.0),
    ];
    for (row, (label, value)) in rows[1..7].iter().zip(expect) {
        assert!(row.trim_start().starts_with(label), "{row}");
        assert!(row.ends_with(&gib(value)), "{row}");
    }
    assert!(rows[7].trim().chars().all(|c| c == '-'));
    assert!(rows[8].trim_start().starts_with("total") && rows[8].ends_with("131.4 GiB"));
    assert!(rows[9].trim_start().starts_with("capacity") && rows[9].ends_with("80.0 GiB"));
    // Fixed width: every number ends in the same column.
    assert!(
        rows[1..]
            .iter()
            .filter(|r| !r.contains('-'))
            .all(|r| r.len() == rows[1].len())
    );
    // Deterministic.
    assert_eq!(diagnostics(&p), diags);
}

#[test]
fn help_prefers_sharding_over_existing_data_ranks() {
    // dp(8) tp(8) replicates 70B state: fsdp over the same 64 devices is the fix.
    let mut p = seventy_b(1, 64);
    p.placements[0].layout.dp = Some(n(8));
    let diags = diagnostics(&p);
    assert_eq!(diags.len(), 1);
    let help = diags[0].help.as_deref().unwrap();
    assert!(help.starts_with("shard over the data ranks:"), "{help}");
    assert!(help.contains("the same 64 devices"), "{help}");
}

#[test]
fn help_suggests_recompute_when_activations_dominate() {
    let p = one_policy(
        llama7b(),
        Phase::Train,
        0..8,
        L {
            fsdp: 8,
            micro: Some(8),
            ..L::default()
        },
        update(0, 64, 64, 2048, 2048),
    );
    let diags = diagnostics(&p);
    assert_eq!(diags.len(), 1);
    let help = diags[0].help.as_deref().unwrap();
    assert!(
        help.starts_with("set `recompute = true` on `policy`"),
        "{help}"
    );
}

/// Generating `staleness` steps ahead keeps that many rollouts waiting: 16 rows of 8 + 8
/// positions, 31 bytes each (token 8, log-prob 4, version 8, three masks 3, target 8), per step ahead.
#[test]
fn rollouts_generated_ahead_count_in_the_generators_memory() {
    let with = |staleness: Option<i64>| {
        let mut c = call(0, Op::Generate, 16, 8, 8);
        c.sampling = Some(Sampling {
            n: n(1),
            max_new: n(8),
            temperature: n(1.0),
            top_p: n(1.0),
            top_k: None,
            env: None,
            staleness: staleness.map(n),
            pause_at: None,
        });
        let p = one_policy(small(), Phase::Generate, 0..1, L::default(), c);
        phase_of(&p, 0, Phase::Generate).activations
    };
    let synchronous = with(None);
    assert_eq!(with(Some(0)), synchronous);
    assert_eq!(with(Some(1)) - synchronous, 16.0 * 16.0 * 31.0);
    assert_eq!(with(Some(3)) - synchronous, 3.0 * 16.0 * 16.0 * 31.0);
}

#[test]
fn unknown_lengths_count_as_zero_and_are_reported() {
    let mut c = call(0, Op::Generate, 16, 8, 8);
    c.prompt_len = None;
    let p = one_policy(small(), Phase::Generate, 0..1, L::default(), c);
    let b = phase_of(&p, 0, Phase::Generate);
    // Only the 8 response tokens: 2·2·2·32·8·16·2.
    assert_eq!(b.kv_cache, 65_536.0);
    assert_eq!(b.unknown, vec![(Term::KvCache, Quantity::PromptLen)]);
    assert!(b.is_lower_bound());

    let mut c = update(0, 16, 16, 8, 8);
    c.batch = None;
    c.minibatch = None;
    let p = one_policy(small(), Phase::Train, 0..1, L::default(), c);
    let b = phase_of(&p, 0, Phase::Train);
    assert_eq!(b.activations, 0.0);
    assert_eq!(b.unknown, vec![(Term::Activations, Quantity::Batch)]);
}

#[test]
fn a_lower_bound_says_at_least() {
    let mut c = update(0, 64, 64, 2048, 2048);
    c.response_len = None;
    let p = one_policy(
        llama70b(),
        Phase::Train,
        0..8,
        L {
            tp: 8,
            ..L::default()
        },
        c,
    );
    let diags = diagnostics(&p);
    assert_eq!(diags.len(), 1);
    assert!(
        diags[0].message.contains("needs at least "),
        "{}",
        diags[0].message
    );
    assert!(diags[0].notes[0].contains("(response length unknown, counted as 0)"));
}

#[test]
fn a_model_without_an_arch_is_skipped() {
    let mut m = model("policy", RoleKind::CausalLM, small(), Precision::Bf16);
    m.arch = None;
    let p = program(
        1,
        vec![m],
        vec![place(0, None, 0..1, L::default())],
        vec![update(0, 4, 4, 8, 8)],
    );
    assert!(estimate(&p).is_empty());
    assert!(diagnostics(&p).is_empty());
}

#[test]
fn auto_placements_are_left_to_the_planner() {
    let mut p = seventy_b(1, 8);
    p.placements[0].auto = true;
    assert!(estimate(&p).is_empty());
    assert!(diagnostics(&p).is_empty());
}

#[test]
fn one_diagnostic_per_placement_naming_the_worst_phase() {
    // Policy train and logprobs both on the train placement, both over 80 GiB.
    let p = program(
        1,
        vec![Model {
            recompute: true,
            ..model("policy", RoleKind::CausalLM, llama70b(), Precision::Bf16)
        }],
        vec![place(
            0,
            Some(Phase::Train),
            0..8,
            L {
                tp: 8,
                ..L::default()
            },
        )],
        vec![
            call(0, Op::Logprobs, 256, 1024, 1024),
            update(0, 256, 64, 1024, 1024),
        ],
    );
    let train = phase_of(&p, 0, Phase::Train).total();
    let logprobs = phase_of(&p, 0, Phase::Logprobs).total();
    assert!(train > logprobs && logprobs > 80.0 * GIB);
    let diags = diagnostics(&p);
    assert_eq!(diags.len(), 1);
    assert!(diags[0].message.starts_with("`policy.train`"));
    assert!(
        diags[0]
            .notes
            .iter()
            .any(|n| n
                .starts_with("also over the device memory on this placement: `policy.logprobs`")),
        "{:?}",
        diags[0].notes
    );
}

#[test]
fn format_bytes_uses_binary_units() {
    assert_eq!(format_bytes(80.0 * GIB), "80.0 GiB");
    assert_eq!(format_bytes(512.0 * 1024.0 * 1024.0), "512.0 MiB");
    assert_eq!(format_bytes(1536.0), "1.5 KiB");
    assert_eq!(format_bytes(12.0), "12 B");
    assert_eq!(format_bytes(1024.0 * GIB), "1.0 TiB");
    // Rounding to 1024.0 moves to the next unit.
    assert_eq!(format_bytes(GIB - 1.0), "1.0 GiB");
}

/// A placement over every device of a cluster of 2³¹ − 1 devices is one run: the estimate's work
/// and memory are those of the placements (it used to hold an entry per device).
#[test]
fn a_huge_cluster_is_one_run() {
    let mut p = seventy_b(1, 8);
    let cluster = &mut p.clusters[0];
    cluster.nodes.value = i32::MAX as u64;
    cluster.devices_per_node.value = 1;
    p.placements[0].devices = 0..i32::MAX as u64;
    let devices = estimate(&p);
    assert_eq!(runs(&devices), [(0, i32::MAX as u64)]);
}

/// The device runs of an estimate, as `(first, end)`.
fn runs(devices: &[rlc_check::checks::memory::DeviceMemory]) -> Vec<(u64, u64)> {
    devices
        .iter()
        .map(|d| (d.devices.start, d.devices.end))
        .collect()
}

#[test]
fn learned_positions_count_a_max_len_by_hidden_table_in_every_kind() {
    let learned = Arch {
        positions: Positions::Learned,
        ..small()
    };
    let table = learned.max_len * learned.hidden;
    assert_eq!(learned.parameters(), small().parameters() + table);
    for kind in [
        RoleKind::CausalLM,
        RoleKind::ValueModel,
        RoleKind::RewardModel,
    ] {
        assert_eq!(
            role_parameters(kind, &learned),
            role_parameters(kind, &small()) + table,
            "{kind:?}"
        );
    }
    // Per layer nothing changes: the table belongs to the embedding.
    assert_eq!(layer_parameters(&learned), layer_parameters(&small()));
}

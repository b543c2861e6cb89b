//! The checker's per-device memory estimate of an FSDP rank, for the tests and the bench that
//! compare it with what the runtime's allocations add up to (`fsdp::MemoryReport`).

use rlc_check::checks::memory::{Breakdown, breakdown};
use rlc_check::program::{
    Arch, Layout as CheckLayout, Model, Op, Optimizer, Origin, Precision, RoleCall, RoleKind,
    Sourced,
};
use rlc_plan::model::Layout;
use rlc_runtime::model::ModelConfig;

/// The checker's per-device estimate (`rlc check`'s E0801 table, also the plan's `PhaseMemory`)
/// of an f32 `CausalLM` trained with AdamW and activation recomputation — what this module does,
/// keeping only each layer's input — on `rows` sequences of `seq_len` tokens with `layout`.
pub fn checker_estimate(
    config: &ModelConfig,
    layout: Layout,
    rows: i64,
    seq_len: i64,
) -> Breakdown {
    let count = |n: i64| (n.max(0)) as u64;
    let arch = Arch {
        preset: None,
        layers: count(config.layers),
        hidden: count(config.hidden),
        heads: count(config.heads),
        kv_heads: count(config.kv_heads),
        ffn: count(config.ffn),
        vocab: count(config.vocab),
        max_len: count(config.max_len),
        tie_embeddings: config.tie_embeddings,
        rope_theta: Some(config.rope_theta),
        norm_eps: Some(config.norm_eps),
        positions: match config.positions {
            rlc_runtime::model::Positions::Rope => rlc_check::program::Positions::Rope,
            rlc_runtime::model::Positions::Learned => rlc_check::program::Positions::Learned,
        },
    };
    let model = Model {
        name: "policy".into(),
        kind: RoleKind::CausalLM,
        arch: Some(arch.clone()),
        arch_origin: Origin::default(),
        init: None,
        optimizer: Some(Optimizer::adamw(1e-3)),
        frozen: false,
        precision: Precision::F32,
        recompute: true,
        origin: Origin::default(),
    };
    let sourced = |value: i64| {
        Some(Sourced {
            value,
            origin: Origin::default(),
        })
    };
    let factor = |value: u32| {
        Some(Sourced {
            value: u64::from(value),
            origin: Origin::default(),
        })
    };
    let check_layout = CheckLayout {
        dp: factor(layout.dp),
        tp: factor(layout.tp),
        pp: factor(layout.pp),
        fsdp: factor(layout.fsdp),
        sp: factor(layout.sp),
        micro: layout.micro.map(|m| Sourced {
            value: m,
            origin: Origin::default(),
        }),
    };
    let call = RoleCall {
        model: 0,
        op: Op::Update,
        batch: sourced(rows),
        prompt_len: sourced(seq_len),
        response_len: sourced(0),
        sampling: None,
        epochs: None,
        minibatch: None,
        reads_behaviour_logp: false,
        origin: Origin::default(),
    };
    breakdown(&model, &arch, Op::Update.phase(), &check_layout, &call)
}

//! Bytes a rank holds under FSDP, counted where they are allocated, and the checker's estimate of
//! the same.
//!
//! Counted: the sharded state (parameter shards, gradient shards, AdamW's two moments, padding
//! included) and, at every instant, the *unsharded working set* — gathered full parameters, the
//! all-gather's received parts while they are unpacked, the full gradients of the unit being
//! backpropagated and the reduce-scatter input built from them — plus the activations this module
//! keeps between units: each layer's saved input, the final hidden state and the head's logits.
//! The peak is the largest state + working set + activations at one instant. Unpacked full
//! parameters are counted without their storage's trailing padding (under `world` elements each).
//!
//! Not counted: what autograd saves *inside* the one unit being run (attention scores, MLP
//! intermediates: libtorch does not report CPU allocations), the KV cache of generation, and the
//! collectives' transport copies (the in-process group copies each deposit; NCCL would not).

use std::cell::Cell;
use std::rc::Rc;

use rlc_check::checks::memory::{Breakdown, breakdown};
use rlc_check::program::{
    Arch, Layout as CheckLayout, Model, Op, Optimizer, Origin, Precision, RoleCall, RoleKind,
    Sourced,
};
use rlc_plan::model::Layout;
use tch::Tensor;

use crate::model::ModelConfig;

/// What a held allocation is, for the per-kind peaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Account {
    Unsharded,
    Activations,
}

/// Running totals of the transient bytes of one rank.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    unsharded: Cell<u64>,
    activations: Cell<u64>,
    peak_unsharded: Cell<u64>,
    peak_activations: Cell<u64>,
    peak_transient: Cell<u64>,
}

impl Ledger {
    pub fn hold(self: &Rc<Self>, account: Account, bytes: u64) -> Held {
        let cell = self.cell(account);
        cell.set(cell.get() + bytes);
        let (u, a) = (self.unsharded.get(), self.activations.get());
        self.peak_unsharded.set(self.peak_unsharded.get().max(u));
        self.peak_activations
            .set(self.peak_activations.get().max(a));
        self.peak_transient
            .set(self.peak_transient.get().max(u + a));
        Held {
            ledger: Rc::clone(self),
            account,
            bytes,
        }
    }

    fn cell(&self, account: Account) -> &Cell<u64> {
        match account {
            Account::Unsharded => &self.unsharded,
            Account::Activations => &self.activations,
        }
    }

    /// Starts the peaks again from what is held now.
    pub fn reset_peaks(&self) {
        let (u, a) = (self.unsharded.get(), self.activations.get());
        self.peak_unsharded.set(u);
        self.peak_activations.set(a);
        self.peak_transient.set(u + a);
    }

    /// `(unsharded, activations, both at one instant)` peaks.
    pub fn peaks(&self) -> (u64, u64, u64) {
        (
            self.peak_unsharded.get(),
            self.peak_activations.get(),
            self.peak_transient.get(),
        )
    }
}

/// Bytes counted while this lives (keep it next to the tensors it accounts for).
#[derive(Debug)]
pub(super) struct Held {
    ledger: Rc<Ledger>,
    account: Account,
    bytes: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        let cell = self.ledger.cell(self.account);
        cell.set(cell.get() - self.bytes);
    }
}

/// Bytes of the elements of `tensors`.
pub(super) fn bytes_of<'t>(tensors: impl IntoIterator<Item = &'t Tensor>) -> u64 {
    tensors
        .into_iter()
        .filter(|t| t.defined())
        .map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64)
        .sum()
}

/// One rank's memory under FSDP, in bytes (see the module docs for what is counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryReport {
    pub parameter_shards: u64,
    pub gradient_shards: u64,
    /// AdamW's first and second moments of the shards.
    pub optimizer_state: u64,
    /// Largest working set of gathered parameters, full gradients and their collective buffers.
    pub peak_unsharded: u64,
    /// Largest total of the activations kept between units.
    pub peak_activations: u64,
    /// Sharded state plus the largest working set and activations alive at one instant.
    pub peak: u64,
}

impl MemoryReport {
    /// What stays between steps: shards of parameters and gradients, optimiser moments.
    pub fn state(&self) -> u64 {
        self.parameter_shards + self.gradient_shards + self.optimizer_state
    }
}

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
            crate::model::Positions::Rope => rlc_check::program::Positions::Rope,
            crate::model::Positions::Learned => rlc_check::program::Positions::Learned,
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
        origin: Origin::default(),
    };
    breakdown(&model, &arch, Op::Update.phase(), &check_layout, &call)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_are_taken_at_one_instant() {
        let ledger = Rc::new(Ledger::default());
        let a = ledger.hold(Account::Unsharded, 100);
        drop(a);
        let _b = ledger.hold(Account::Activations, 30);
        let _c = ledger.hold(Account::Unsharded, 50);
        // 100 alone, then 30 + 50: the joint peak is 100, not 130.
        assert_eq!(ledger.peaks(), (100, 30, 100));
        ledger.reset_peaks();
        assert_eq!(ledger.peaks(), (50, 30, 80));
    }
}

//! Bytes a rank holds under FSDP, counted where they are allocated (the tests compare them with
//! the checker's estimate, `tests/common/estimate.rs`).
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

use tch::Tensor;

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

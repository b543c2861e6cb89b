//! The C allocator's settings for the process that runs jobs. libtorch allocates and frees
//! every intermediate tensor of every step through `malloc`, and glibc's defaults hand freed
//! memory back to the kernel (a heap's top above 128 KiB is trimmed; a freed large chunk moves
//! the mmap threshold), so each step faults the same pages in again and the kernel zeroes them:
//! on the main job, 5.9% of the CPU samples were `clear_page` and a sixth of the CPU time was
//! system time (docs/benchmarks.md, "rlc against a hand-written PyTorch loop"). With the settings
//! below a run keeps freed memory for its next step: what it holds grows by the padding, not
//! with the number of steps. Settings only: no computed value changes.

use std::os::raw::c_int;

/// glibc's `mallopt` parameters (malloc.h).
const M_TRIM_THRESHOLD: c_int = -1;
const M_TOP_PAD: c_int = -2;
const M_MMAP_THRESHOLD: c_int = -3;

/// A heap is trimmed only when this much is free at its top.
const TRIM_THRESHOLD: c_int = 256 << 20;
/// Extra memory asked of the kernel whenever a heap grows, so that the next steps' tensors fit.
const TOP_PAD: c_int = 64 << 20;
/// Allocations from this size up get pages of their own, smaller ones come from the heaps: a
/// fixed threshold where glibc's default starts at 128 KiB and moves as chunks are freed.
const MMAP_THRESHOLD: c_int = 32 << 20;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe extern "C" {
    fn mallopt(param: c_int, value: c_int) -> c_int;
}

/// Applies the settings above to this process's allocator: `true` when glibc took all three
/// (it returns 0 for a value it rejects and keeps its default); on other C libraries nothing
/// is done (`false`).
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        [
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (M_TOP_PAD, TOP_PAD),
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        ]
        .into_iter()
        // SAFETY: `mallopt` sets allocator parameters under the allocator's own lock.
        .all(|(param, value)| unsafe { mallopt(param, value) } == 1)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlc_runtime::tch::{self, Device, Kind, Tensor};

    fn compute() -> Tensor {
        let _guard = tch::no_grad_guard();
        tch::manual_seed(3);
        let a = Tensor::randn([256, 640], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([640, 64], (Kind::Float, Device::Cpu));
        a.matmul(&b).log_softmax(-1, Kind::Float).sum_dim_intlist(
            [0i64].as_slice(),
            false,
            Kind::Float,
        )
    }

    /// glibc takes every setting (it rejects a value it cannot use, keeping its default
    /// silently), and tensors computed after the settings are bit-identical to those computed
    /// before.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_the_settings_and_results_are_unchanged() {
        let before = compute();
        assert!(keep_freed_memory());
        assert!(before.equal(&compute()));
    }
}

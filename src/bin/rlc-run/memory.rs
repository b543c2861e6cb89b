//! The allocator of the process that runs jobs: mimalloc, for Rust's allocations and, through
//! its `override` feature, for the C library's `malloc` family too — which libtorch allocates
//! and frees every intermediate tensor of every step through. At the main job's sizes a step
//! runs thousands of small tensor operations, and glibc's allocator took a twentieth of the CPU
//! samples (`_int_malloc`, `_int_free`, `malloc_consolidate`) even with its trimming turned off;
//! mimalloc's per-thread free lists make the step 7–10 % faster (docs/benchmarks.md, "The
//! allocator"). Allocation only: no computed value changes.
//!
//! The override works by symbol interposition: the `malloc` this executable defines is the one
//! the dynamic linker binds libtorch's calls to (`tests::libtorch_allocates_through_mimalloc`).

use mimalloc::MiMalloc;

#[global_allocator]
static ALLOCATOR: MiMalloc = MiMalloc;

#[cfg(test)]
mod tests {
    use rlc_runtime::tch::{self, Device, Kind, Tensor};
    use std::os::raw::c_void;

    unsafe extern "C" {
        /// mimalloc's own test for a pointer it handed out.
        fn mi_is_in_heap_region(p: *const c_void) -> bool;
    }

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

    /// A tensor's storage, which libtorch's CPU allocator takes from `posix_memalign`, comes
    /// from mimalloc; a Rust allocation too. Without the override, libtorch's memory is glibc's
    /// and the first check fails.
    #[test]
    fn libtorch_allocates_through_mimalloc() {
        let tensor = compute();
        // SAFETY: a query about an address, which mimalloc does not dereference.
        assert!(unsafe { mi_is_in_heap_region(tensor.data_ptr()) });
        let boxed = Box::new([0u8; 4096]);
        assert!(unsafe { mi_is_in_heap_region(boxed.as_ptr().cast()) });
        // The same values as any other run of the same computation.
        assert!(compute().equal(&tensor));
    }
}

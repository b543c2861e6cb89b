//! The executors of fused kernels: the kernel IR and pass schedule that `rlc-kernel` (the
//! compiler side) produces, compiled and run at run time.
//!
//! - [`jit`] compiles the passes with Cranelift and runs them over row ranges on threads.
//! - [`cuda`] compiles the passes' CUDA C (`rlc_kernel::cuda::emit`) with NVRTC and runs them
//!   through the CUDA driver, both loaded at run time.
//! - [`host`] finishes, on the host, the barriers between the JIT's passes (the CUDA C does the
//!   same math on the device, in f64 too).

pub mod cuda;
pub mod host;
pub mod jit;

//! Kernels: the per-token math of `fn`s on tensors.
//!
//! - [`reference`](mod@reference) evaluates a checked `fn` with one tch operation per builtin; it is what the
//!   fused back ends are compared with, and it is differentiable.
//! - [`fused`] runs the same `fn`s as fused kernels (`rlc_kernel`: kernel IR, Cranelift
//!   JIT), with derivatives; tested against the reference. [`fused_cuda`] runs them on CUDA
//!   tensors (CUDA C through NVRTC).
//! - [`oracle`] is the test support: the RL formulas of the design note (RL_MATH) written a
//!   second time, in plain `f64` Rust on rows, independently of the `.rl` code of `std`.

pub mod fused;
pub mod fused_cuda;
pub mod oracle;
pub mod reference;

//! Kernels: the per-token math of a plan's `fn`s and loss closures, as the kernel IR the plan
//! carries, on tensors.
//!
//! - [`fused`] compiles a kernel (and its derivative) with the Cranelift JIT and runs it on
//!   CPU tensors; [`fused_cuda`] runs it on CUDA tensors (CUDA C through NVRTC).
//! - [`eager`] runs a kernel one libtorch operation per node, on any device and with autograd:
//!   where the fused back ends do not cover a kernel or its derivative.
//! - [`args`]: the named arguments and loss scopes both take.
//! - [`oracle`] is the test support: the RL formulas of the design note (RL_MATH) written a
//!   second time, in plain `f64` Rust on rows, independently of the `.rl` code of `std`.
//!
//! The reference evaluator, which runs a `fn`'s AST on tensors and is what all of these are
//! tested against, is the `rlc-reference` crate: a test oracle, not part of the runtime.

pub mod args;
pub mod eager;
pub mod fused;
pub mod fused_cuda;
pub mod oracle;

//! Fused kernels: the per-token math of a `fn` as a few passes over memory.
//!
//! - [`lower`] turns a checked `fn` (calls inlined, defaults applied) into a [`ir::Kernel`]: an
//!   SSA graph whose values are tensors over a *prefix* of the kernel's axes (`[]`, `[B]`,
//!   `[B, T]`…), which is what the language's leading-axis broadcasting allows.
//! - [`grad`] appends the derivative of a scalar output with respect to chosen inputs
//!   (reverse mode on the graph), so one kernel gives a loss and the gradient that seeds the
//!   model's backward pass.
//! - [`schedule`] cuts the graph into passes over rows at the only places rows meet (a
//!   reduction to a scalar, a group reduction); everything else is fused into the row loop.
//! - [`cuda`] writes the passes as CUDA C for NVRTC.
//!
//! Nothing here runs a kernel: the executors (the Cranelift JIT on threads, CUDA through NVRTC
//! and the driver) are `rlc-kernel-exec`, with the runtime.

pub mod builtins;
pub mod cuda;
pub mod error;
pub mod grad;
pub mod ir;
#[cfg(feature = "lower")]
pub mod lower;
pub mod schedule;

pub use error::KernelError;

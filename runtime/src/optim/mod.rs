//! Optimisation: AdamW on plain tensors (so its state can be checkpointed), a warm-up + cosine
//! learning-rate schedule, and gradient-norm clipping.

mod adamw;
mod clip;
mod flat;
mod schedule;

pub use adamw::{AdamW, AdamWConfig, OptimError};
pub use clip::{clip_flat_to, clip_grad_norm, clip_to, grad_norm, scale_grads, sum_of_squares};
pub use schedule::Schedule;

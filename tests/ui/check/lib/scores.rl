//! A project's own reductions, one of which has the name of a `std.algo` function.

/// The mean over the sequences of each one's mean over its tokens.
pub fn token_mean(x: f32[B, T], m: Mask[B, T]) -> f32 {
  mean(sum(where(m, x, 0.0), axis: 1) / sum(where(m, 1.0, 0.0), axis: 1))
}

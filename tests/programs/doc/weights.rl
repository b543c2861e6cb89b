//! Weights for the rewards of `lib.rl`.

/// The weight of the penalty in [`net`](lib.rl), as in most recipes.
pub let beta = 0.1

/// A pair of per-sequence scores.
pub struct Scores {
  reward: f32[B],
  penalty: f32[B],
}

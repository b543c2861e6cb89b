//! Reward functions shared by the check cases: `exact` is public, its helper is not.

/// 1 where the response token matches the target, 0 elsewhere and on padding.
fn hits(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B, T] {
  where(mask, f32(resp == target), 0.0)
}

/// The fraction of response tokens that match the target.
pub fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(hits(resp, target, mask), over: T)
}

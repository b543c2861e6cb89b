import "./lib/rewards.rl" { exact }

/// The fraction of response tokens that match the target.
pub fn score(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  exact(resp, target, mask)
}

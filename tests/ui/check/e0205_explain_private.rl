import "./lib/rewards.rl" { hits }  //~ E0205

/// The fraction of response tokens that match the target.
pub fn score(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(hits(resp, target, mask), over: T)
}

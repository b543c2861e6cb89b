import std.algo { gae }

/// GAE with γ = 1 and λ = 0.95.
fn advantages(reward: f32[B, T], values: f32[B, T], mask: Mask[B, T]) -> f32[B, T] {
  gae(reward, values, mask, gamma: 1.0, lambda: 0.95)  //~ E0304
}

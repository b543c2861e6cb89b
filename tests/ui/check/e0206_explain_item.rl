import std.algo { grpo_adv }  //~ E0206

/// GRPO advantages of one score per sequence.
fn advantages(score: f32[B], group: i32[B], mask: Mask[B, T]) -> f32[B, T] {
  grpo_adv(score, group, mask)
}

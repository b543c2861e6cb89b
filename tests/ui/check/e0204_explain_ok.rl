/// A small bonus for any reward above one half.
fn bonus(reward: f32[B]) -> f32[B] {
  where(reward > 0.5, 0.1, 0.0)
}

/// The reward plus its bonus.
pub fn total(reward: f32[B]) -> f32[B] {
  reward + bonus(reward)
}

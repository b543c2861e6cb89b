/// A small bonus for any reward above one half.
pub fn bonus(reward: f32[B]) -> f32[B] {
  where(reward > 0.5, 0.1, 0.0)
}

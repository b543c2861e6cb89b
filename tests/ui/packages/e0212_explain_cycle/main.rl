import recipes.shaping { bonus }

/// The reward plus the recipe's bonus.
pub fn shaped(reward: f32[B]) -> f32[B] {
  reward + bonus(reward)
}

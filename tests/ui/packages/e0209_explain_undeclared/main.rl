import recipes.shaping { bonus }  //~ E0209

/// The reward plus a bonus from a package the manifest does not declare.
pub fn shaped(reward: f32[B]) -> f32[B] {
  reward + bonus(reward)
}

import "../e0204_explain_cycle.rl" { bonus }  //~ E0204

/// The reward plus the other module's bonus.
pub fn shaped(reward: f32[B]) -> f32[B] {
  reward + bonus(reward)
}

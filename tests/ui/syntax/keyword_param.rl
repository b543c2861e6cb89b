fn f(log: f32[B]) -> f32[B] {
  exp(log) //~ E0105
}

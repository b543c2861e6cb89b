fn f(x: f32[B]) -> f32[B] {
  exp(x * 2.0 //~ E0101
}

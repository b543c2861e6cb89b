fn f(x: f32[B]) -> f32[B] {
  return x //~ E0111
}

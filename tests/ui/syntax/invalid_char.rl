fn f(x: f32[B]) -> f32[B] {
  x @ x //~ E0116
}

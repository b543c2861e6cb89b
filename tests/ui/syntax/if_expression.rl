fn f(x: f32[B]) -> f32[B] {
  if x > 0.0 { x } else { 0.0 } //~ E0111
}

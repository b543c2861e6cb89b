fn f(x: f32[B, T) -> f32[B] { //~ E0101
  x
}

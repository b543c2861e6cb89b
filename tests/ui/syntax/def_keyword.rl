def f(x: f32[B]) -> f32[B] { //~ E0111
  x
}

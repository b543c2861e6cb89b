fn f(x: f32[B]) -> f32[B] {
  let model = x * 2.0
  model //~ E0105
}

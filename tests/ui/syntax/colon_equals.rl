fn f(x: f32[B]) -> f32[B] {
  let y := x //~ E0101
  y
}

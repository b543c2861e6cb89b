fn f(x: f32[B]) -> f32[B] {
  let y = x * 2.0; //~ E0110
  y
}

fn place(x: f32[B]) -> f32[B] { //~ E0105
  x
}

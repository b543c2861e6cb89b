fn inside(x: f32[B]) -> Mask[B] {
  0.0 < x < 1.0 //~ E0115
}

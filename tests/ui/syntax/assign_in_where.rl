fn pick(x: f32[B], m: Mask[B]) -> f32[B] {
  where(x = 0.0, 1.0, x) //~ E0104
}

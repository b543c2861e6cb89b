fn cumsum(x: f32[B, T]) -> f32[B, T] {
  scan forward over T with (acc = 0.0) {
    acc = acc + x[t] //~ E0101
    emit acc
  }
}

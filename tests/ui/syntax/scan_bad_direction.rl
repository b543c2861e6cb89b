fn cumsum(x: f32[B, T]) -> f32[B, T] {
  scan backward over T with (acc = 0.0) { t -> //~ E0101
    acc = acc + x[t]
    emit acc
  }
}

pipeline train(steps = 10) {
  loop step in 0..steps {
    log reward: 1.0 //~ E0101
  }
}

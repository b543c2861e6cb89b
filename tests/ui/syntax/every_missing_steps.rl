pipeline train(steps = 10) {
  loop step in 0..steps {
    every 5 { checkpoint policy } //~ E0101
  }
}

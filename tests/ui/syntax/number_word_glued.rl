pipeline train(steps = 10) {
  loop step in 0..steps {
    every 5steps { checkpoint policy } //~ E0108
  }
}

pipeline train(steps = 10) {
  for step in 0..steps { //~ E0111
    log { step: step }
  }
}

// A pipeline parameter's default written like a YAML key.
pipeline train(steps: 300) { //~ E0103
  loop step in 0..steps {
    log { step: step }
  }
}

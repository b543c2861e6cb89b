pipeline train(steps = 1) {
  loop step in 0..steps {
    policy.update(rollout) { logp => mean(logp) } //~ E0101
  }
}

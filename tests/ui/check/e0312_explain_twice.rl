import std.algo { adaptive_kl_beta }

pipeline train(steps = 100) {
  loop step in 0..steps with (beta = 0.1) {
    let kl = 0.3
    beta = adaptive_kl_beta(beta, kl, target: 0.2, n_steps: 1.0, horizon: 20.0)
    beta = clamp(beta, 0.01, 1.0)  //~ E0312
    log { beta: beta }
  }
}

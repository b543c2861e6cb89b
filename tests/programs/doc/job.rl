//! A job for `rlc doc`'s tests: its pipeline is documented though it is not `pub`.

import "./lib.rl" { width }
import "./weights.rl" { beta }

/// Logs its scale, `steps` times.
pipeline train(steps = width, scale: f32 = beta) {
  loop step in 0..steps {
    log { x: scale }
  }
}

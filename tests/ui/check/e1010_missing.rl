//! A multi-turn `generate` without its budgets: how many turns, how long an observation.

import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)
environment calc = program("python3", "calc.py")

pipeline train(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(8), n: 4, max_new: 8, env: calc)  //~ E1010
    log { reward: mean(rollout.env_reward) }
  }
}

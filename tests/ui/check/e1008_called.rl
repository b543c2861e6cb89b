//! An environment called on a rollout like a verifier: it answers turns during `generate`.

import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)
environment calc = program("python3", "calc.py")

pipeline train(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(8), n: 4, max_new: 8)
    log { reward: mean(calc(rollout)) }  //~ E1008
  }
}

//! `env:` is a string, not an environment item.

import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)

pipeline train(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(8), n: 4, max_new: 8,
                                  env: "calc.py", max_turns: 3, max_obs: 6)  //~ E1009
    log { turns: mean(f32(rollout.turns)) }
  }
}

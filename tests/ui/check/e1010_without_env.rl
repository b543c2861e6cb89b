//! Turn budgets on a single-turn `generate` mean nothing: refused, not ignored. Each budget
//! must also be a whole number of at least 1.

import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)
environment calc = program("python3", "calc.py")

pipeline train(steps = 10) {
  loop step in 0..steps {
    let single = policy.generate(reverse.sample(8), n: 4, max_new: 8, max_turns: 3)  //~ E1010
    let multi = policy.generate(reverse.sample(8), n: 4, max_new: 8,
                                env: calc, max_turns: 0, max_obs: 1.5)  //~ E1010 E1010
    log { reward: mean(multi.env_reward) }
  }
}

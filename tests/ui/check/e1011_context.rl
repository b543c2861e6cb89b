//! Three turns of 8 tokens with two observations of 6 between them, after the prompt, need
//! more positions than the model's context of 32.

import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab, max_len: 32)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)
environment calc = program("python3", "calc.py")

pipeline train(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(8), n: 4, max_new: 8,  //~ E1011
                                  env: calc, max_turns: 3, max_obs: 6)
    log { reward: mean(rollout.env_reward) }
  }
}

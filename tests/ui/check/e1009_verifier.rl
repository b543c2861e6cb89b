//! `env:` names a verifier: it scores a finished rollout, it does not answer turns.

import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)
verifier calc = program("python3", "calc.py")

pipeline train(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(8), n: 4, max_new: 8,
                                  env: calc, max_turns: 3, max_obs: 6)  //~ E1009
    log { reward: mean(rollout.env_reward) }
  }
}

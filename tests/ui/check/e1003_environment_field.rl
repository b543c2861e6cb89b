//! An environment asks for a row field the sampled dataset does not keep.

import std.models { tiny_gpt }

dataset questions = jsonl("questions.jsonl", field: "question")
environment calc = program("python3", "calc.py", fields: ["answer"])

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: 256)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)

pipeline train(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(questions.sample(8), n: 4, max_new: 8,  //~ E1003
                                  env: calc, max_turns: 2, max_obs: 4)
    log { reward: mean(rollout.env_reward) }
  }
}

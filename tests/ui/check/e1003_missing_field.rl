//! A verifier asks for a row field the sampled dataset does not keep.

import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }

dataset questions = jsonl("questions.jsonl", field: "question")
verifier answer = program("python3", "answer.py", fields: ["answer"])

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: 256)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)

pipeline train(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(questions.sample(8), n: 4, max_new: 8)
    let old_logp = policy.logprobs(rollout)
    let reward = answer(rollout)  //~ E1003
    let adv = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout) { logp -> token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask) }
  }
}

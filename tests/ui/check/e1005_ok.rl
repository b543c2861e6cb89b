//! The sequence reward placed on the last token, as REINFORCE++ returns want.

import std.algo { reinforce_pp_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)

verifier answer = program("python3", "answer.py", fields: ["answer"])

pipeline train(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(8), n: 4, max_new: 8)
    let old_logp = policy.logprobs(rollout)
    let reward = answer(rollout)
    let adv = reinforce_pp_advantage(where(rollout.last, reward, 0.0), rollout.mask, 1.0)
    policy.update(rollout) { logp -> token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask) }
  }
}

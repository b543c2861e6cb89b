//! A multi-turn GRPO step: the environment answers each turn; the advantage comes from the
//! summed environment reward; the loss covers the policy's own tokens (`mask`), and `turn`
//! says which turn each of them belongs to.

import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)
environment calc = program("python3", "calc.py", workers: 2, timeout: 10s, on_error: zero,
                           fields: ["answer"])

pipeline train(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(8), n: 4, max_new: 8,
                                  env: calc, max_turns: 3, max_obs: 6)
    let old_logp = policy.logprobs(rollout)
    let adv = grpo_advantage(rollout.env_reward, rollout.group, rollout.mask)
    policy.update(rollout) { logp -> token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask) }
    let first = where(rollout.turn == 0, 1.0, 0.0)
    log { reward: mean(rollout.env_reward), turns: mean(f32(rollout.turns)), first: mean(first) }
  }
}

//! `arch(positions:)` takes one of a closed set of names; `rope_theta` beside learned positions
//! would be ignored, so it is refused too.

import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = arch(layers: 2, hidden: 64, heads: 4, vocab: 16, max_len: 16, positions: "absolute") //~ E0307
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3)
}

model critic: CausalLM {
  arch  = arch(layers: 1, hidden: 8, heads: 2, vocab: 16, max_len: 16, rope_theta: 1.0, positions: "learned") //~ E0307
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3)
}

place policy.train    on local[0..2] with dp(2)
place policy.generate on local[0..2] with dp(2)
place critic.train    on local[0..2] with dp(2)

fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(where(mask, f32(resp == target), 0.0), over: T)
}

pipeline train(steps = 100, prompts_per_step = 16, group = 8) {
  loop step in 0..steps {
    let prompts  = reverse.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: 4, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let reward   = exact(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 64) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask)
    }
    log { reward: mean(reward) }
  }
}

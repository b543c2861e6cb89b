//! A positional argument after a named one that took its parameter: `exact(resp: …, …)` gives `resp` twice.

import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 32)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3)
}

place policy.train    on local[0..2] with dp(2)
place policy.generate on local[0..2] with dp(2)

fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(where(mask, f32(resp == target), 0.0), over: T)
}

pipeline train(steps = 100, prompts_per_step = 16, group = 8) {
  loop step in 0..steps {
    let prompts  = reverse.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: 8, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let reward   = exact(resp: rollout.response, rollout.target, mask: rollout.mask)  //~ E0304
    let adv      = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 64) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv), rollout.mask)
    }
    log { reward: mean(reward) }
  }
}

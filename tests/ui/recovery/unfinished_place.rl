//! A `place` line being typed (unfinished) does not hide a placement error on another line:
//! `tp(3)` does not divide the 4 heads. The phase the broken line would have placed is not
//! reported as unplaced.

import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 3)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 32)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3)
}

place policy.train    on local[0..3] with
place policy.generate on local[0..3] with tp(3)  //~ E0119 E0503

fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(where(mask, f32(resp == target), 0.0), over: T)
}

pipeline train(steps = 100, prompts_per_step = 16, group = 8) {
  loop step in 0..steps {
    let prompts  = reverse.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: 8, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let reward   = exact(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 64) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask)
    }
    log { reward: mean(reward) }
  }
}

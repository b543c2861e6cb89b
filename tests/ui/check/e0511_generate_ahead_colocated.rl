//! Generation one update ahead on the devices that train: the two cannot overlap.

import std.algo { decoupled_ppo_clip, grpo_advantage, token_mean }
import std.models { tiny_gpt_abs }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)
cluster local = cpu(devices: 2)
model policy: CausalLM {
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 24)
  optim = adamw(lr: 3e-3)
}
place policy on local[0..2] with dp(2)

pipeline train(steps = 100) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(16), n: 8, max_new: 8, staleness: 1)  //~ E0511
    let adv = grpo_advantage(reverse.score(rollout), rollout.group, rollout.mask)
    let old = policy.logprobs(rollout)
    policy.update(rollout, minibatch: 64) { logp ->
      token_mean(decoupled_ppo_clip(logp, old, rollout.logp, adv), rollout.mask)
    }
  }
}

//! The main job with generation and training on devices of their own, overlapped: the policy
//! generates step k + 1 (one CPU) while step k trains (the other), with the weights of one
//! update before (`staleness: 1`, exactly). The loss corrects for it with the decoupled PPO
//! objective, weighing each token by the ratio of the proximal policy (`old_logp`, training's
//! weights) to the behaviour policy that sampled it (`rollout.logp`). Responses may run to 12
//! tokens, so that generation is a large part of the step. `bash scripts/async-bench.sh`
//! measures it against `staleness: 0` on the same placement.

import std.algo { decoupled_ppo_clip, grpo_advantage, kl_k3, token_mean }
import std.models { tiny_gpt_abs }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 24)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3, warmup: 10)
}
model reference: CausalLM = frozen(policy)

// Generation and the reference's log-probs on one device, training on the other.
place policy.generate on local[0..1] with dp(1)
place reference       on local[0..1] with dp(1)
place policy.train    on local[1..2] with dp(1)

/// The fraction of the answer's tokens the response got right.
fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(f32(resp == target), over: T, mask: mask)
}

pipeline train(steps = 500, prompts_per_step = 16, group = 16) {
  loop step in 0..steps {
    let prompts  = reverse.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: 12, temperature: 1.0, staleness: 1)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let score    = exact(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(score, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 128) { logp ->
      let pg = decoupled_ppo_clip(logp, old_logp, rollout.logp, adv)
      token_mean(pg + 0.05 * kl_k3(logp, ref_logp) + 0.05 * stop_grad(logp) * logp, rollout.mask)
    }
    log {
      reward: mean(score),
      version: token_mean(f32(rollout.version), rollout.mask),
      kl: token_mean(kl_k3(old_logp, ref_logp), rollout.mask),
    }
    every 100 steps { checkpoint policy }
  }
}

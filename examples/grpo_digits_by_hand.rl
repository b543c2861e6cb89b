//! The main job (`examples/grpo_digits.rl`: GRPO learns to reverse a string of
//! four digits, `^1234=` → `4321`) with its loop written out instead of called from
//! `std.recipes.grpo`: the same plan, value for value (`tests/plans.rs` checks it), so the same
//! run with a seed. A starting point for a loop of one's own.

import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.models { tiny_gpt_abs }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3, warmup: 10)
}
model reference: CausalLM = frozen(policy)

place policy.train    on local[0..2] with dp(2)
place policy.generate on local[0..2] with dp(2)
place reference       on local[0..2] with dp(2)

/// The fraction of the answer's tokens the response got right.
fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(f32(resp == target), over: T, mask: mask)
}

pipeline train(steps = 500, prompts_per_step = 16, group = 16) {
  loop step in 0..steps {
    let prompts = reverse.sample(prompts_per_step)
    // Responses as long as the answer: four digits.
    let rollout  = policy.generate(prompts, n: group, max_new: 4, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let score    = exact(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(score, rollout.group, rollout.mask)
    // Clipped policy loss, a KL penalty to the reference, and an entropy bonus estimated from
    // the sampled tokens (`stop_grad(logp) * logp` has the entropy's gradient in expectation):
    // without the last two the policy turns greedy before it has found the far digits.
    policy.update(rollout, epochs: 1, minibatch: 128) { logp ->
      token_mean(
        ppo_clip(logp, old_logp, adv, eps: 0.2) + 0.05 * kl_k3(logp, ref_logp) + 0.05 * stop_grad(logp) * logp,
        rollout.mask,
      )
    }
    log {
      reward: mean(score),
      kl: token_mean(kl_k3(old_logp, ref_logp), rollout.mask),
      entropy: token_mean(0.0 - old_logp, rollout.mask),
    }
    every 100 steps { checkpoint policy }
  }
}

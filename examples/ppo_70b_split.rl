//! PPO for a 70B-class policy on 16 nodes of 8 H100s, with split pools: training on nodes
//! 0–7, generation on nodes 8–11, reference and reward model on nodes 12–13, critic on 14–15.
//! Plan only (`rlc build`): this cluster is not here.

import std.algo { gae, whiten, ppo_clip, value_loss, kl_k1, token_mean }
import std.hardware { h100_80g }
import std.models { llama3_70b }

cluster big {
  nodes            = 16
  devices_per_node = 8
  device           = h100_80g
  intra_bandwidth  = 450GBps
  inter_bandwidth  = 50GBps
}

dataset prompts = jsonl("data/prompts.jsonl", field: "prompt")

model policy: CausalLM {
  arch      = llama3_70b
  init      = hf("/models/llama3-70b-sft")
  optim     = adamw(lr: 1e-6, warmup: 20)
  precision = bf16
  recompute = true
}
model reference: CausalLM = frozen(policy)
model critic: ValueModel {
  arch      = llama3_70b
  init      = hf("/models/llama3-70b-rm")
  optim     = adamw(lr: 5e-6)
  precision = bf16
  recompute = true
}
model scorer: RewardModel {
  arch      = llama3_70b
  init      = hf("/models/llama3-70b-rm")
  frozen    = true
  precision = bf16
}

place policy.train    on big[0..64]    with fsdp(8), tp(8), micro(1)
place policy.generate on big[64..96]   with dp(4), tp(8)
place reference       on big[96..104]  with tp(8), micro(16)
place scorer          on big[104..112] with tp(8), micro(16)
place critic.train    on big[112..128] with fsdp(2), tp(8), micro(1)
place critic.values   on big[112..128] with dp(2), tp(8), micro(16)

fn shaped_reward(score: f32[B], kl: f32[B, T], mask: Mask[B, T], last: Mask[B, T], beta: f32) -> f32[B, T] {
  where(last, score, 0.0) - beta * where(mask, kl, 0.0)
}

pipeline train(steps = 1000, prompts_per_step = 512, beta = 0.02) {
  loop step in 0..steps {
    let batch    = prompts.sample(prompts_per_step)
    let rollout  = policy.generate(batch, n: 1, max_new: 1024, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let old_v    = critic.values(rollout)
    let score    = scorer.score(rollout)
    let reward   = shaped_reward(score, kl_k1(old_logp, ref_logp), rollout.mask, rollout.last, beta)
    let adv      = gae(reward, old_v, rollout.mask, gamma: 1.0, lam: 0.95)
    let ret      = adv + old_v
    policy.update(rollout, epochs: 1, minibatch: 128) { logp ->
      token_mean(ppo_clip(logp, old_logp, whiten(adv, rollout.mask), eps: 0.2), rollout.mask)
    }
    critic.update(rollout, epochs: 1, minibatch: 128) { v ->
      token_mean(value_loss(v, old_v, ret, clip: 0.5), rollout.mask)
    }
    log { score: mean(score), kl: token_mean(kl_k1(old_logp, ref_logp), rollout.mask) }
    every 100 steps { checkpoint policy, critic }
  }
}

import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3, warmup: 20) }
place policy on local[0..2] with dp(2)

pipeline train(steps = 100) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(16), n: 8, max_new: 8)
    let adv = grpo_advantage(reverse.score(rollout), rollout.group, rollout.mask)
    let old = policy.logprobs(rollout)
    policy.update(rollout, epochs: 1, minibatch: 64) { logp -> token_mean(ppo_clip(logp, old, adv), rollout.mask) }
  }
}

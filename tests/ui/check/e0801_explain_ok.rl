import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.hardware { h100_80g }
import std.models { qwen2_72b }
import std.task.digits { reverse }
cluster node { nodes = 4  devices_per_node = 8  device = h100_80g }
model actor: CausalLM { arch = qwen2_72b  optim = adamw(lr: 1e-6) }
place actor.train    on node[0..32] with fsdp(32), micro(1)
place actor.generate on node[0..32] with dp(4), tp(8)
pipeline train(steps = 500) {
  loop step in 0..steps {
    let rollout = actor.generate(reverse.sample(64), n: 8, max_new: 512)
    let adv = grpo_advantage(reverse.score(rollout), rollout.group, rollout.mask)
    let old = actor.logprobs(rollout)
    actor.update(rollout, epochs: 1, minibatch: 128) { logp -> token_mean(ppo_clip(logp, old, adv), rollout.mask) }
  }
}

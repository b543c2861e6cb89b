import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.hardware { h100_80g }
import std.models { qwen2_72b }
import std.task.digits { reverse }
cluster node { nodes = 1  devices_per_node = 8  device = h100_80g }
model actor: CausalLM { arch = qwen2_72b  optim = adamw(lr: 1e-6) }
place actor.train    on node[0..8] with fsdp(8), micro(1)  //~ E0801
place actor.generate on node[0..8] with tp(8)
pipeline train(steps = 500) {
  loop step in 0..steps {
    let rollout = actor.generate(reverse.sample(64), n: 8, max_new: 512)
    let adv = grpo_advantage(reverse.score(rollout), rollout.group, rollout.mask)
    let old = actor.logprobs(rollout)
    actor.update(rollout, epochs: 1, minibatch: 128) { logp -> token_mean(ppo_clip(logp, old, adv), rollout.mask) }
  }
}

import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.hardware { h100_80g }
import std.models { qwen2_7b }

cluster node {  //~ W0301
  nodes            = 10000000
  devices_per_node = 8
  device           = h100_80g
}

dataset math = jsonl("data/math.jsonl", field: "question")

model actor: CausalLM {
  arch      = qwen2_7b
  init      = hf("/models/qwen2-7b-instruct")
  optim     = adamw(lr: 1e-6)
}
model reference: CausalLM = frozen(actor)

place actor.train    on node[0..8] with fsdp(8), micro(2)
place actor.generate on node[0..8] with dp(2), tp(4)
place reference      on node[0..8] with fsdp(8)

pipeline train(steps = 500, prompts_per_step = 64, group = 8) {
  loop step in 0..steps {
    let batch    = math.sample(prompts_per_step)
    let rollout  = actor.generate(batch, n: group, max_new: 512, temperature: 0.9)
    let old_logp = actor.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let reward   = math.score(rollout)
    let adv      = grpo_advantage(reward, rollout.group, rollout.mask)
    actor.update(rollout, epochs: 1, minibatch: 128) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2) + 0.001 * kl_k3(logp, ref_logp), rollout.mask)
    }
    log { reward: mean(reward) }
  }
}

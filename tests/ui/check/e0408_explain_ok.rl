import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }

cluster local = cpu(devices: 2)

dataset questions = jsonl("data/questions.jsonl", field: "prompt", tokenizer: "hf/llama_tiny")

model policy: CausalLM {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: questions.vocab, max_len: 64)
  optim = adamw(lr: 1e-3)
}

place policy on local[0..2] with dp(2)

pipeline train(steps = 100) {
  loop step in 0..steps {
    let prompts = questions.sample(8)
    let rollout = policy.generate(prompts, n: 4, max_new: 16)
    let reward  = questions.score(rollout)
    let adv     = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout) { logp -> token_mean(ppo_clip(logp, logp, adv, eps: 0.2), rollout.mask) }
  }
}

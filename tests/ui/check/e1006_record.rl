//! A verifier with metrics returns a record: its reward is `.reward`.
import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)

verifier answer = program("python3", "answer.py", fields: ["answer"], metrics: ["format"])

pipeline train(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(8), n: 4, max_new: 8)
    let old_logp = policy.logprobs(rollout)
    let scores = answer(rollout)
    let adv = grpo_advantage(scores, rollout.group, rollout.mask)  //~ E1006
    policy.update(rollout) { logp -> token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask) }
    log { reward: mean(scores), format: mean(scores.format) }  //~ E1006
    log { scores: scores }  //~ E1006
  }
}

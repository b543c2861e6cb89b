//! GRPO on digit reversal whose reward is an external verifier (#24): the Python example
//! verifier compares the decoded response with the row's `answer` and reports a `format` metric.
//! `tests/plans.rs::verifier_plan` builds it with `rlc build`.

import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt_abs }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

/// Scores each response against its row's `answer`.
verifier answer = program("python3", "../../examples/verifiers/answer.py", workers: 2, batch: 16,
                          timeout: 10s, memory: 512MiB, on_error: zero, fields: ["answer"],
                          metrics: ["format"])

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3, warmup: 10)
}

place policy on local[0..2] with dp(2)

pipeline train(steps = 100, prompts_per_step = 16, group = 8) {
  loop step in 0..steps {
    let rollout  = policy.generate(reverse.sample(prompts_per_step), n: group, max_new: 4)
    let old_logp = policy.logprobs(rollout)
    let scores   = answer(rollout)
    let adv      = grpo_advantage(scores.reward, rollout.group, rollout.mask)
    policy.update(rollout) { logp -> token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask) }
    log { reward: mean(scores.reward), format: mean(scores.format) }
  }
}

//! The main job (examples/grpo_digits.rl) with its reward computed by your own program: a Python
//! verifier (`verifiers/digits.py`, written with `python/rlc_verifier.py`) scores each decoded
//! response against its row's `answer` — the fraction of the answer's digits it got right — in a
//! pool of two sandboxed worker processes. `bash scripts/verifier-job.sh` runs it.

import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.models { tiny_gpt_abs }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

/// Partial credit for a reversal, and whether it is entirely right (`solved`).
verifier digits = program(
  "python3",
  "verifiers/digits.py",
  workers: 2,
  batch: 64,
  timeout: 30s,
  fields: ["answer"],
  metrics: ["solved"],
)

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

pipeline train(steps = 500, prompts_per_step = 16, group = 16) {
  loop step in 0..steps {
    let prompts  = reverse.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: 4, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let scores   = digits(rollout)
    let adv      = grpo_advantage(scores.reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 128) { logp ->
      token_mean(
        ppo_clip(logp, old_logp, adv, eps: 0.2) + 0.05 * kl_k3(logp, ref_logp) + 0.05 * stop_grad(logp) * logp,
        rollout.mask,
      )
    }
    log {
      reward: mean(scores.reward),
      solved: mean(scores.solved),
      kl: token_mean(kl_k3(old_logp, ref_logp), rollout.mask),
    }
    every 100 steps { checkpoint policy }
  }
}

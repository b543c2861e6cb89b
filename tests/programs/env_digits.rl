//! GRPO on two-digit additions in up to three turns (#24 item 4) with the calculator environment
//! of examples/envs/calc.py: a turn `12+34` gets the observation `=046` (at most 4 tokens), any
//! other turn is the final answer, rewarded 1 when it is the row's `answer`; the advantage comes
//! from the sum of the rewards (`env_reward`) and the loss covers the policy's own tokens
//! (`mask`). `tests/plans.rs::environment_plan` and
//! `compiler/plan/tests/meaning.rs::environment_settings_and_generate_env` build it.

import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt_abs }
import std.task.digits { add_task }

dataset add = add_task(digits: 2)

/// Computes a turn's sum, or scores the final answer against the row's `answer`.
environment calc = program("python3", "../../examples/envs/calc.py", workers: 2, batch: 16,
                           timeout: 10s, memory: 512MiB, on_error: zero, fields: ["answer"])

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: add.vocab, max_len: 32)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3, warmup: 10)
}

place policy on local[0..2] with dp(2)

pipeline train(steps = 100, prompts_per_step = 16, group = 4) {
  loop step in 0..steps {
    let rollout  = policy.generate(add.sample(prompts_per_step), n: group, max_new: 5,
                                   env: calc, max_turns: 3, max_obs: 4)
    let old_logp = policy.logprobs(rollout)
    let adv      = grpo_advantage(rollout.env_reward, rollout.group, rollout.mask)
    policy.update(rollout) { logp -> token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask) }
    log { reward: mean(rollout.env_reward), turns: mean(f32(rollout.turns)) }
  }
}

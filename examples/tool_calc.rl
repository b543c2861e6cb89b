//! Tool use, stage 2 of 2: GRPO on four-digit additions in up to two turns against a
//! calculator (`envs/calc.py`): a turn `1234+5678` gets the observation `=6912`, any other turn
//! is the final answer, rewarded 1 when it is the row's `answer`. The policy starts from the
//! warm-up of `examples/tool_calc_sft.rl`; the observations are masked out of the loss and the
//! ids trained on are the ids it sampled. With `max_turns: 1` (no tool: the first turn is the
//! answer) the same policy scores below 0.3. `bash scripts/tool-job.sh` runs both stages.

import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt_abs }
import std.task.digits { add_with_tool_task }

dataset sums = add_with_tool_task(digits: 4)

/// Computes a turn's sum, or scores the final answer against the row's `answer`.
environment calc = program(
  "python3",
  "envs/calc.py",
  workers: 2,
  batch: 64,
  timeout: 10s,
  on_error: zero,
  fields: ["answer"],
)

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: sums.vocab, max_len: 48)
  init  = load("../runs/tool_calc/sft/checkpoints/policy/step-000400")
  optim = adamw(lr: 1e-3, warmup: 5)
}

place policy on local[0..2] with dp(2)

pipeline train(steps = 100, prompts_per_step = 16, group = 8, turns = 2) {
  loop step in 0..steps {
    let rollout  = policy.generate(
      sums.sample(prompts_per_step),
      n: group,
      max_new: 10,
      temperature: 1.0,
      env: calc,
      max_turns: turns,
      max_obs: 6,
    )
    let old_logp = policy.logprobs(rollout)
    let adv      = grpo_advantage(rollout.env_reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 128) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask)
    }
    log { reward: mean(rollout.env_reward), turns: mean(f32(rollout.turns)) }
  }
}

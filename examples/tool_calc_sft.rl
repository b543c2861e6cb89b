//! Tool use, stage 1 of 2: a supervised warm-up on demonstrations of addition with a calculator.
//! A demonstration is a whole episode written as one sequence — the call (`1234+5678$`), the
//! tool's reply (`=6912`, masked out of the loss: the policy reads it, it does not write it) and
//! the answer copied from it (`6912$`) — the tokens a multi-turn rollout of stage 2
//! (`examples/tool_calc.rl`) holds, in the order the policy sees them. `bash scripts/tool-job.sh`
//! runs both stages.

import std.algo { token_mean }
import std.models { tiny_gpt_abs }
import std.task.digits { add_with_tool_task }

dataset sums = add_with_tool_task(digits: 4)

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: sums.vocab, max_len: 48)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3, warmup: 10)
}

place policy on local[0..2] with dp(2)

pipeline sft(steps = 400, demos_per_step = 32) {
  loop step in 0..steps {
    let demos = sums.demonstrations(demos_per_step)
    policy.update(demos, epochs: 1, minibatch: demos_per_step) { logp ->
      token_mean(0.0 - logp, demos.mask)
    }
    log { loss: token_mean(0.0 - policy.logprobs(demos), demos.mask) }
    every 400 steps { checkpoint policy }
  }
}

//! RLHF, stage 1 of 3: supervised fine-tuning. A small policy imitates demonstrations of a
//! synthetic task — reverse four digits (`^1234=` → `4321$`) — by cross-entropy on the answer
//! tokens. `bash scripts/rlhf.sh` runs the three stages in order; each later stage starts from
//! this one's checkpoint (`runs/rlhf/sft/checkpoints/policy/step-000060`).

import std.algo { token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3, warmup: 10)
}

place policy on local[0..2] with dp(2)

pipeline sft(steps = 60, demos_per_step = 32) {
  loop step in 0..steps {
    // Prompts followed by their answers: `demos.mask` covers the answer and its EOS.
    let demos = reverse.demonstrations(demos_per_step)
    // The same loss on held-out prompts, before this step's update.
    let held      = reverse.demonstrations(64, split: "test")
    let held_logp = policy.logprobs(held)
    policy.update(demos, epochs: 1, minibatch: demos_per_step) { logp ->
      token_mean(0.0 - logp, demos.mask)
    }
    log { loss: token_mean(0.0 - held_logp, held.mask) }
    every 60 steps { checkpoint policy }
  }
}

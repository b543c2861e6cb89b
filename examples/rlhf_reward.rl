//! RLHF, stage 2 of 3: a reward model trained on preference pairs (Bradley–Terry). It starts
//! from the supervised policy of stage 1 (`rlhf_sft.rl`; its LM head is dropped, the score head
//! starts fresh) and learns to score the task's answer (chosen) above a copy with one to four
//! digits changed (rejected). Pair accuracy is measured on held-out prompts, which training
//! never draws.

import std.algo { bradley_terry, pair_accuracy }
import std.models { tiny_gpt }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

cluster local = cpu(devices: 2)

model rm: RewardModel {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)
  init  = hf("../runs/rlhf/sft/checkpoints/policy/step-000060")
  optim = adamw(lr: 5e-4, warmup: 10)
}

place rm on local[0..2] with dp(2)

pipeline reward(steps = 300, pairs_per_step = 64) {
  loop step in 0..steps {
    // 2 × pairs_per_step rows: rows of a pair share `group`, `chosen` marks the answer.
    let pairs = reverse.preferences(pairs_per_step)
    // A fixed held-out set of pairs, scored before this step's update.
    let held       = reverse.preferences(128, split: "test")
    let held_score = rm.score(held)
    rm.update(pairs, epochs: 1) { s ->
      bradley_terry(s, pairs.group, pairs.chosen)
    }
    log {
      accuracy: pair_accuracy(held_score, held.group, held.chosen),
      loss: bradley_terry(held_score, held.group, held.chosen),
    }
    every 300 steps { checkpoint rm }
  }
}

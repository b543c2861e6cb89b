//! Two roles on their own devices: `big` (rank 0) computes `bonus`, which `small` (rank 1)
//! needs, then trains for a long time on its own. Each rank's program follows the critical path,
//! so rank 0 computes and sends `bonus` before `big.update` (tests/plans.rs, tests/run.rs).

import std.algo { bradley_terry }
import std.models { tiny_gpt }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

cluster local = cpu(devices: 2)

model big: RewardModel {
  arch  = tiny_gpt(layers: 4, hidden: 128, heads: 4, vocab: reverse.vocab, max_len: 16)
  init  = random(seed: 0)
  optim = adamw(lr: 1e-4)
}
model small: RewardModel {
  arch  = tiny_gpt(layers: 1, hidden: 16, heads: 2, vocab: reverse.vocab, max_len: 16)
  init  = random(seed: 1)
  optim = adamw(lr: 1e-4)
}

place big   on local[0..1] with dp(1)
place small on local[1..2] with dp(1)

pipeline split(steps = 2) {
  loop step in 0..steps {
    let pairs = reverse.preferences(32)
    let hint  = big.score(pairs)
    let bonus = hint * 2.0
    big.update(pairs, epochs: 8) { s ->
      bradley_terry(s, pairs.group, pairs.chosen)
    }
    small.update(pairs, epochs: 1) { s ->
      bradley_terry(s + bonus, pairs.group, pairs.chosen)
    }
    log { hint: mean(hint) }
  }
}

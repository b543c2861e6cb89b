//! A split that is neither "train" nor "test".

import std.algo { bradley_terry, pair_accuracy }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model rm: RewardModel { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 1e-3) }
place rm on local[0..2] with dp(2)

pipeline reward(steps = 100) {
  loop step in 0..steps {
    let pairs = reverse.preferences(32)
    rm.update(pairs) { s -> bradley_terry(s, pairs.group, pairs.chosen) }
    let held = reverse.preferences(64, split: "validation")  //~ E0706
    log { accuracy: pair_accuracy(rm.score(held), held.group, held.chosen) }
  }
}

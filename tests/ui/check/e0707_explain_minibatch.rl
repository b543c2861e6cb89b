import std.algo { bradley_terry }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model rm: RewardModel { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 1e-3) }
place rm on local[0..2] with dp(2)

pipeline reward(steps = 100) {
  loop step in 0..steps {
    let pairs = reverse.preferences(32)
    rm.update(pairs, epochs: 2, minibatch: 16) { s -> bradley_terry(s, pairs.group, pairs.chosen) }  //~ E0707
  }
}

import std.models { tiny_gpt }

model scorer: RewardModel {
  arch   = tiny_gpt(hidden: 64)
  init   = random(seed: 1)
  frozen = true
}

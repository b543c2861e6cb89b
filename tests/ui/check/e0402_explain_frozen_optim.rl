import std.models { tiny_gpt }

model scorer: RewardModel {
  arch   = tiny_gpt(hidden: 64)
  init   = hf("/models/reward")
  frozen = true
  optim  = adamw(lr: 1e-5)  //~ E0402
}

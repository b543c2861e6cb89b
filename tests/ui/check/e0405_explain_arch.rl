model scorer: RewardModel {  //~ E0405
  init   = hf("/models/reward")
  frozen = true
}

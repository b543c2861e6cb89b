model scorer: RewardModel {  //~ E0405
  init   = random(seed: 1)
  frozen = true
}

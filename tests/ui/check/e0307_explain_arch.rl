model policy: CausalLM {
  arch  = 64  //~ E0307
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3)
}

model policy: CausalLM { //~ E0102
  arch = tiny_gpt(layers: 2)

place policy.train on local[0..2] with dp(2)

model policy: CausalLM {
  arch = tiny_gpt(layers: 2), //~ E0118
  init = random(seed: 1)
}

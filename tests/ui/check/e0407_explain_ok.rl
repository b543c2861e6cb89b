model policy: CausalLM {
  init  = hf("hf/tiny_llama")
  optim = adamw(lr: 1e-5)
}

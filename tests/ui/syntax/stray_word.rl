modle policy: CausalLM { //~ E0117
  arch = tiny_gpt(layers: 2)
}

// A YAML habit: `key: value` in a definition block.
model policy: CausalLM {
  arch: tiny_gpt(layers: 2) //~ E0103
  init = random(seed: 1)
}

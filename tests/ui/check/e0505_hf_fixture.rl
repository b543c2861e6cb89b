//! The fixture Llama model's config.json gives 3 layers, which `pp(2)` does not split.

cluster local = cpu(devices: 2)

model policy: CausalLM {
  init  = hf("hf/llama_tiny")
  optim = adamw(lr: 1e-5)
}

place policy on local[0..2] with pp(2)  //~ E0505

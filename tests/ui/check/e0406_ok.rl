//! The architecture comes from `hf/tiny_llama/config.json`: 6 heads split over dp only.

cluster local = cpu(devices: 2)

model policy: CausalLM {
  init  = hf("hf/tiny_llama")
  optim = adamw(lr: 1e-5)
}

place policy on local[0..2] with dp(2)

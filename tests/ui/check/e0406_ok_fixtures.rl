//! Both fixture models' config.json files give an architecture whose heads, key/value heads and
//! vocabulary split over the tensor-parallel groups: Qwen2 (4 heads, 2 KV) over tp(2), Llama
//! (8 heads, 4 KV) over tp(4).

cluster local = cpu(devices: 4)

model policy: CausalLM {
  init  = hf("hf/qwen2_tiny")
  optim = adamw(lr: 1e-5)
}

model reference: CausalLM {
  init   = hf("hf/llama_tiny")
  frozen = true
}

place policy    on local[0..2] with tp(2)
place reference on local[0..4] with tp(4)

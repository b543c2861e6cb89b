//! The fixture Qwen2 model's config.json (4 heads, 2 key/value heads, vocabulary 320) read
//! through `hf(…)`: none of them splits over `tp(3)`.

cluster local = cpu(devices: 3)

model policy: CausalLM {
  init  = hf("hf/qwen2_tiny")
  optim = adamw(lr: 1e-5)
}

place policy on local[0..3] with tp(3)  //~ E0503 E0504 E0506

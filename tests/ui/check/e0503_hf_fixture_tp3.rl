//! The fixture Qwen2 model's config.json (4 heads, 2 key/value heads, vocabulary 320) read
//! through `hf(…)`: none of them splits over `tp(3)`. One mistake (the degree), one E0503; the
//! key/value heads and the vocabulary are its notes, not E0504 and E0506 of their own.

cluster local = cpu(devices: 3)

model policy: CausalLM {
  init  = hf("hf/qwen2_tiny")
  optim = adamw(lr: 1e-5)
}

place policy on local[0..3] with tp(3)  //~ E0503

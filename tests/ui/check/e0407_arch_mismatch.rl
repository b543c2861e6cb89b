//! The `arch` written beside `hf(…)` is not the model in the folder: the runtime would build the
//! config.json's model (4 heads, vocabulary 320), so the checks must not pass on this one.

import std.models { tiny_gpt }

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 8, vocab: 16, max_len: 32)  //~ E0407
  init  = hf("hf/qwen2_tiny")
  optim = adamw(lr: 1e-5)
}

place policy on local[0..2] with tp(2)

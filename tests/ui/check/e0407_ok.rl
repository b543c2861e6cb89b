//! An `arch` that says what the folder's config.json says; a folder that is not here to read
//! (it may be on the cluster) is taken on the `arch`'s word.

import std.models { qwen2_7b }

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = arch(layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn: 128, vocab: 320, max_len: 128)
  init  = hf("hf/qwen2_tiny")
  optim = adamw(lr: 1e-5)
}

model reference: CausalLM {
  arch   = qwen2_7b
  init   = hf("hf/not_on_this_machine")
  frozen = true
}

place policy    on local[0..2] with tp(2)
place reference on local[0..2] with dp(2)

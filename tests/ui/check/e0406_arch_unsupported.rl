//! An `arch` is given, but the folder behind `hf(…)` is there and holds a model family the
//! runtime cannot load.

import std.models { tiny_gpt }

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: 16, max_len: 32)
  init  = hf("hf/bert")  //~ E0406
  optim = adamw(lr: 1e-5)
}

place policy on local[0..2] with dp(2)

//! `hf(…)` points at a model family the runtime cannot load.

cluster local = cpu(devices: 2)

model policy: CausalLM {
  init  = hf("hf/bert")  //~ E0406
  optim = adamw(lr: 1e-5)
}

place policy on local[0..2] with dp(2)

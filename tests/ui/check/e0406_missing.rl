//! A model with neither `arch` nor a readable `config.json` behind `hf(…)`.

cluster local = cpu(devices: 2)

model policy: CausalLM {
  init  = hf("hf/absent")  //~ E0406
  optim = adamw(lr: 1e-5)
}

place policy on local[0..2] with dp(2)

//! The heads of a model read from its `config.json` (6) do not split over `tp(4)`.

cluster local = cpu(devices: 4)

model policy: CausalLM {
  init  = hf("hf/tiny_llama")
  optim = adamw(lr: 1e-5)
}

place policy on local[0..4] with tp(4)  //~ E0503

import std.models { tiny_gpt }

model policy: CausalLM {
  arch  = tiny_gpt(hidden: 64)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3)
}

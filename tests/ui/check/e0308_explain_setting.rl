import std.models { tiny_gpt }

model policy: CausalLM {
  arch = tiny_gpt(hidden: 64)
  lr   = 3e-3  //~ E0308
}

import std.models { qwen2_7b }

model policy: CausalLM {
  arch  = qwen2_7b  //~ E0407
  init  = hf("hf/tiny_llama")
  optim = adamw(lr: 1e-5)
}

import std.models { qwen2_0_5b }

dataset math = jsonl("data/math.jsonl", field: "question")

model policy: CausalLM {
  arch  = qwen2_0_5b
  optim = adamw(lr: 1e-6)
}

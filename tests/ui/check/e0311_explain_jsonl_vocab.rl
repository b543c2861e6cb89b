import std.models { tiny_gpt }

dataset math = jsonl("data/math.jsonl", field: "question")

model policy: CausalLM {
  arch  = tiny_gpt(vocab: math.vocab)  //~ E0311
  optim = adamw(lr: 1e-6)
}

//! A tokenizer folder that exists only where the job runs: its vocabulary is unknown here.

import std.models { tiny_gpt }

dataset questions = jsonl("data/questions.jsonl", field: "prompt", tokenizer: "/models/qwen2-7b")

model policy: CausalLM {
  arch = tiny_gpt(vocab: questions.vocab)  //~ E0311
}

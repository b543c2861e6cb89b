import std.models { tiny_gpt }

dataset questions = jsonl("data/questions.jsonl", field: "prompt", tokenizer: "hf/broken_tokenizer")  //~ E0408

model policy: CausalLM {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: questions.vocab, max_len: 64)
  optim = adamw(lr: 1e-3)
}

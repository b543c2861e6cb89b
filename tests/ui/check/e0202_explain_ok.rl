import std.models { tiny_gpt }
import std.task.digits { reverse }

model policy: CausalLM {
  arch  = tiny_gpt(vocab: reverse.vocab)
  optim = adamw(lr: 3e-3)
}
model reference: CausalLM = frozen(policy)

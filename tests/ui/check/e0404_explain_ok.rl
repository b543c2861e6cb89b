import std.models { tiny_gpt }

model critic: ValueModel {
  arch  = tiny_gpt(hidden: 64)
  optim = adamw(lr: 1e-3)
}

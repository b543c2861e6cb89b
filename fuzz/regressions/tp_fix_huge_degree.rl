// rlc-fuzz finding (seed 5): E0503's fix searched every degree below tp(2147483647) one by one
// (over 20 s); it now takes the divisors of gcd(tp, heads).
import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.hardware { h100_80g }
import std.models { qwen2_7b }

cluster node {
  nodes            = 1
  devices_per_node = 8
  device           = h100_80g
}

model actor: CausalLM {
  arch      = qwen2_7b
  init      = hf("/models/qwen2-7b-instruct")
  optim     = adamw(lr: 1e-6)
}
model reference: CausalLM = frozen(actor)

place actor.train    on node[0..8] with fsdp(8), sp(4), micro(2)
place actor.generate on node[0..8] with dp(2), tp(2147483647)

import std.hardware { h100_80g }
import std.models { qwen2_7b }

cluster node {
  nodes            = 1
  devices_per_node = 8
  device           = h100_80g
}

model actor: CausalLM {
  arch  = qwen2_7b
  optim = adamw(lr: 1e-6)
}

place actor.train    on node[0..8] with fsdp(8)
place actor.generate on node[0..8] with dp(2), tp(4)

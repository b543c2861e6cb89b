import std.hardware { h100_80g }

cluster node {
  nodes            = 1
  devices_per_node = 8
  device           = h100_80g
}

model actor: CausalLM {
  arch  = arch(layers: 24, hidden: 2048, heads: 16, kv_heads: 16, ffn: 8192, vocab: 50257, max_len: 2048)
  optim = adamw(lr: 1e-6)
}

place actor.train    on node[0..8] with fsdp(8)
place actor.generate on node[0..8] with dp(4), tp(2)  //~ E0506

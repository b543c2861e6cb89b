import std.hardware { h100_80g }

cluster node {
  nodes            = 1
  devices_per_node = 8
  device           = h100_80g
}

model actor: CausalLM {
  arch  = arch(layers: 24, hidden: 1536, heads: 12, kv_heads: 4, ffn: 6144, vocab: 49152, max_len: 4096)
  optim = adamw(lr: 1e-6)
}

place actor.train    on node[0..8] with fsdp(8)
place actor.generate on node[0..8] with dp(2), tp(4)

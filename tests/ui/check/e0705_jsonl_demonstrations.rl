//! A prompt file has no answers to build demonstrations from.

import std.algo { token_mean }
import std.models { tiny_gpt }

dataset prompts = jsonl("prompts.jsonl", field: "prompt")
cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: 16)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)

pipeline sft(steps = 100) {
  loop step in 0..steps {
    let demos = prompts.demonstrations(32)  //~ E0705
    policy.update(demos) { logp -> token_mean(0.0 - logp, demos.mask) }
  }
}

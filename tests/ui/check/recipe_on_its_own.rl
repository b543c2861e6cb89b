//! A recipe checked on its own, before any job calls it: names resolve (a misspelling is found,
//! imports used in its loss count as used); what depends on its roles waits for an instance.

import std.algo { token_mean }

/// Supervised fine-tuning on the dataset's demonstrations.
pub pipeline sft(policy: CausalLM, data: Dataset, steps = 10, n = 8) {
  loop step in 0..steps {
    let batch = data.demonstrations(n)
    policy.update(batch) { logp -> token_mean(0.0 - logp, batch.mask) }
    log { loss: mean(batchh.mask) }  //~ E0201
  }
}

import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 4)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
model reference: CausalLM = frozen(policy)
place policy on local[0..4] with dp(4)
place reference on local[0..4] with dp(4)

pipeline evaluate(steps = 10) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(16), n: 8, max_new: 8)
    log { kl: mean(policy.logprobs(rollout) - reference.logprobs(rollout)) }
  }
}

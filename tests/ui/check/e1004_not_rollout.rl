//! A verifier scores rollouts, not prompts.
import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)

verifier answer = program("python3", "answer.py")

pipeline train(steps = 10) {
  loop step in 0..steps {
    let prompts = reverse.sample(8)
    let reward = answer(prompts)  //~ E1004
    log { reward: mean(reward) }
  }
}

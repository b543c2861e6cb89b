//! Every construct of grammar/rl.pest once, for the editor grammar tests (editors/). It only
//! has to parse: names and types need not check.

// Imports: a module, renamed, with a list, and a file.
import std.algo
import std.algo.grpo as g
import std.algo { grpo_advantage, ppo_clip as clip, }
import "./lib/rewards.rl" as rewards

pub cluster local = cpu(devices: 2)
cluster big {
  nodes    = 16
  device   = device(memory: 80GiB, flops: 989TFLOPS, bandwidth: 3.35TBps, net: 400Gbps)
  host     = 512MiB + 1_000KB + 2MB + 3GB + 4TB + 5KiB + 6TiB
  links    = 1GBps + 2TBps + 3Gbps
  compute  = 1GFLOPS + 2PFLOPS
}

dataset prompts = jsonl("data/prompts.jsonl", field: "prompt")
dataset quoted = text("a \"quoted\" word\\n")

/// An external reward: a program, its workers and limits.
verifier answer = program("python3", "verifiers/answer.py", workers: 2, timeout: 10s,
  cpu: 2min, memory: 512MiB, on_error: zero, fields: ["answer"], metrics: ["format"])
verifier rm = http("http://127.0.0.1:8000/score", timeout: 500ms)

/// A multi-turn environment: the other side of `generate(…, env: calc, max_turns:, max_obs:)`.
environment calc = program("python3", "envs/calc.py", workers: 2, fields: ["answer"])

/// The policy.
model policy: CausalLM {
  init  = random(seed: 7)
  optim = adamw(lr: 3e-4, eps: 1E+8, decay: 0.2)
}
model critic: ValueModel = frozen(policy)
model scorer: RewardModel { frozen = true  recompute = false }

struct Sample { tokens: Tokens[B, T], score: f32[B], mask: Mask[B, 8], }
struct Empty {}

pub let limit: i64 = 8
let scale = -2.5 * (1 + 2) % 3

place policy.train on local[0..2] with dp(2), micro(4),
place critic on big[64..128] auto
place scorer with tp(8), pp(2), fsdp(1), sp(1)
place auto on big
place auto

fn exact(resp: Tokens[B, T], mask: Mask[B, T], flag: bool, n: i32 = 1,) -> f32[B] {
  let same: bf16[B, T] = f16(resp == target)
  let ok = !flag && n != 0 || n <= 1 && n >= 2 && n < 3 && n > 4
  ok = ok
  mean(where(mask, same, 0.0), over: T)[0, 1,].value
}

fn gae(r: f32[B, T], v: f32[B, T]) -> f32[B, T] {
  scan reverse over T with (next_v = 0.0, last = 0.0,) { t ->
    let delta = r[t] + next_v - v[t]
    last = delta / 2
    emit last
  }
}

fn cumsum(x: f32[B, T]) -> f32[B, T] {
  scan forward over T { t -> emit x[t] }
}

pipeline warmup {
  log {}
}

pipeline train(steps = 300, group: i64 = 8) {
  loop step in 0..steps {
    let rollout = policy.generate(prompts.sample(16), n: group)
    policy.update(rollout) { logp ->
      clip(logp, logp)
    }
    critic.update(rollout) { v, w -> v - w }
    log { reward: mean(rollout.reward), kl: 0.1, }
    every 50 steps { checkpoint policy }
    every 1 step { checkpoint policy, critic }
  }
}

/// A recipe: generic over its roles, data and reward.
pub pipeline tune(
  actor: CausalLM,
  judge: RewardModel,
  prompts: Dataset,
  checker: Verifier,
  sandbox: Environment,
  reward: Fn,
  steps = 10,
) {
  loop step in 0..steps {
    let rollout = actor.generate(prompts.sample(4), n: 2)
    log { reward: mean(reward(rollout.response, rollout.target, rollout.mask)) }
  }
}

//! What the benchmarks of the compiler share: the PPO job with a 70B-class policy, critic,
//! reference and reward model, at any number of 8-GPU nodes, and checking it.

use rlc_diagnostics::Files;

struct NoImports;

impl rlc_check::SourceLoader for NoImports {
    fn read(&self, path: &str) -> Result<String, String> {
        Err(format!("no module `{path}` in the benchmark"))
    }
}

/// The checked program of `text`; panics with the errors if it has any.
pub fn check(text: &str) -> rlc_check::Checked {
    let mut files = Files::new();
    let checked = rlc_check::check(&NoImports, &mut files, "bench.rl", text.to_string());
    let errors: Vec<String> = checked
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.message.clone())
        .collect();
    assert!(
        errors.is_empty(),
        "the generated program has errors: {errors:#?}"
    );
    checked
}

/// PPO on `nodes` nodes of 8 H100s with the given `place` lines.
pub fn ppo_70b(nodes: u64, placement: &str) -> String {
    let prompts = nodes * 8 * 4;
    format!(
        r#"import std.algo {{ gae, whiten, ppo_clip, value_loss, kl_k1, token_mean }}
import std.hardware {{ h100_80g }}
import std.models {{ llama3_70b }}

cluster big {{
  nodes            = {nodes}
  devices_per_node = 8
  device           = h100_80g
  intra_bandwidth  = 450GBps
  inter_bandwidth  = 50GBps
}}

dataset prompts = jsonl("data/prompts.jsonl", field: "prompt")

model policy: CausalLM {{
  arch      = llama3_70b
  init      = hf("/models/llama3-70b-sft")
  optim     = adamw(lr: 1e-6, warmup: 20)
  precision = bf16
  recompute = true
}}
model reference: CausalLM = frozen(policy)
model critic: ValueModel {{
  arch      = llama3_70b
  init      = hf("/models/llama3-70b-rm")
  optim     = adamw(lr: 5e-6)
  precision = bf16
  recompute = true
}}
model scorer: RewardModel {{
  arch      = llama3_70b
  init      = hf("/models/llama3-70b-rm")
  frozen    = true
  precision = bf16
}}

{placement}

fn shaped_reward(score: f32[B], kl: f32[B, T], mask: Mask[B, T], last: Mask[B, T], beta: f32) -> f32[B, T] {{
  where(last, score, 0.0) - beta * where(mask, kl, 0.0)
}}

pipeline train(steps = 1000, prompts_per_step = {prompts}, beta = 0.02) {{
  loop step in 0..steps {{
    let batch    = prompts.sample(prompts_per_step)
    let rollout  = policy.generate(batch, n: 1, max_new: 1024, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let old_v    = critic.values(rollout)
    let score    = scorer.score(rollout)
    let reward   = shaped_reward(score, kl_k1(old_logp, ref_logp), rollout.mask, rollout.last, beta)
    let adv      = gae(reward, old_v, rollout.mask, gamma: 1.0, lam: 0.95)
    let ret      = adv + old_v
    policy.update(rollout, epochs: 1, minibatch: {minibatch}) {{ logp ->
      token_mean(ppo_clip(logp, old_logp, whiten(adv, rollout.mask), eps: 0.2), rollout.mask)
    }}
    critic.update(rollout, epochs: 1, minibatch: {minibatch}) {{ v ->
      token_mean(value_loss(v, old_v, ret, clip: 0.5), rollout.mask)
    }}
    log {{ score: mean(score), kl: token_mean(kl_k1(old_logp, ref_logp), rollout.mask) }}
    every 100 steps {{ checkpoint policy, critic }}
  }}
}}
"#,
        minibatch = prompts / 4,
    )
}

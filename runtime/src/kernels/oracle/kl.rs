//! KL estimators per token, `Δ = logp − logp_ref`, and the KL-shaped reward.

/// k1: `Δ`.
pub fn k1(logp: f64, ref_logp: f64) -> f64 {
    logp - ref_logp
}

/// abs: `|Δ|`.
pub fn abs(logp: f64, ref_logp: f64) -> f64 {
    (logp - ref_logp).abs()
}

/// k2: `½Δ²`.
pub fn k2(logp: f64, ref_logp: f64) -> f64 {
    0.5 * (logp - ref_logp).powi(2)
}

/// k3: `k = clamp(logp_ref − logp, −20, 20)`, `clamp(e^k − k − 1, −10, 10)`.
pub fn k3(logp: f64, ref_logp: f64) -> f64 {
    let k = (ref_logp - logp).clamp(-20.0, 20.0);
    (k.exp() - k - 1.0).clamp(-10.0, 10.0)
}

/// `r = score_at_last_token − β·kl·m`.
pub fn shaped_reward(score: f64, kl: f64, real: bool, last: bool, beta: f64) -> f64 {
    let s = if last { score } else { 0.0 };
    s - if real { beta * kl } else { 0.0 }
}

/// `β·(1 + clip(kl/target − 1, −0.2, 0.2)·n_steps/horizon)`.
pub fn adaptive_beta(beta: f64, kl: f64, target: f64, n_steps: f64, horizon: f64) -> f64 {
    beta * (1.0 + (kl / target - 1.0).clamp(-0.2, 0.2) * n_steps / horizon)
}

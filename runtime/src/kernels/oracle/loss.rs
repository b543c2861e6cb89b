//! Policy loss (PPO with dual clip, GSPO), value loss, entropy and the loss aggregations.

use super::{MaskRows, Rows};

/// PPO with dual clip at one token.
#[derive(Clone, Copy, Debug)]
pub struct Ppo {
    /// `Δ = clamp(logp − logp_old, −20, 20)`
    pub delta: f64,
    /// `L1 = −A·ρ`
    pub l1: f64,
    /// `L2 = −A·clamp(ρ, 1 − ε_low, 1 + ε_high)`
    pub l2: f64,
    /// `Lc = max(L1, L2)`
    pub lc: f64,
    /// `L3 = −A·c`
    pub l3: f64,
    /// `where(A < 0, min(L3, Lc), Lc)`
    pub loss: f64,
    /// `dL/dlogp`: 0 where a clip holds the loss constant.
    pub grad: f64,
}

pub fn ppo(logp: f64, old: f64, adv: f64, eps_low: f64, eps_high: f64, c: f64) -> Ppo {
    let raw = logp - old;
    let delta = raw.clamp(-20.0, 20.0);
    let rho = delta.exp();
    let d_delta = if (-20.0..=20.0).contains(&raw) {
        1.0
    } else {
        0.0
    };
    let l1 = -adv * rho;
    let d1 = -adv * rho * d_delta;
    let (lo, hi) = (1.0 - eps_low, 1.0 + eps_high);
    let l2 = -adv * rho.clamp(lo, hi);
    let d2 = if rho > lo && rho < hi { d1 } else { 0.0 };
    let (lc, dc) = if l1 >= l2 { (l1, d1) } else { (l2, d2) };
    let l3 = -adv * c;
    let (loss, grad) = if adv < 0.0 && l3 < lc {
        (l3, 0.0)
    } else {
        (lc, dc)
    };
    Ppo {
        delta,
        l1,
        l2,
        lc,
        l3,
        loss,
        grad,
    }
}

/// GSPO per token. `ℓ_i = Σ_t m·(logp − logp_old) / max(Σ_t m, 1)` (the unclamped log-ratio, as
/// the reference trainer), every token's ratio `ρ = exp(min(ℓ_i, 10))`, loss
/// `max(−A·ρ, −A·clamp(ρ, 1 − ε_low, 1 + ε_high))`.
pub fn gspo(
    logp: &Rows,
    old: &Rows,
    adv: &Rows,
    m: &MaskRows,
    eps_low: f64,
    eps_high: f64,
) -> Rows {
    (0..logp.len())
        .map(|i| {
            let n = m[i].iter().filter(|b| **b).count() as f64;
            let s: f64 = (0..logp[i].len())
                .filter(|&t| m[i][t])
                .map(|t| logp[i][t] - old[i][t])
                .sum();
            let rho = (s / n.max(1.0)).min(10.0).exp();
            adv[i]
                .iter()
                .map(|a| (-a * rho).max(-a * rho.clamp(1.0 - eps_low, 1.0 + eps_high)))
                .collect()
        })
        .collect()
}

/// The clipped value loss per token: `½·max((v − R)², (v̂ − R)²)`, `v̂ = clamp(v, v_old ∓ c)`,
/// and whether the clipped term is the larger (for the clip fraction).
pub fn value_loss(v: f64, old_v: f64, ret: f64, clip: f64) -> (f64, bool) {
    let vc = v.clamp(old_v - clip, old_v + clip);
    let (e1, e2) = ((v - ret).powi(2), (vc - ret).powi(2));
    (0.5 * e1.max(e2), e2 > e1)
}

/// `H = logsumexp(z) − Σ softmax(z)·z` of one position's logits.
pub fn entropy(z: &[f64]) -> f64 {
    let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let sum_exp: f64 = z.iter().map(|x| (x - max).exp()).sum();
    let lse = max + sum_exp.ln();
    let expected: f64 = z.iter().map(|x| (x - lse).exp() * x).sum();
    lse - expected
}

fn row_stats(loss: &[f64], m: &[bool]) -> (f64, f64) {
    let real = loss.iter().zip(m).filter(|(_, b)| **b);
    real.fold((0.0, 0.0), |(s, n), (l, _)| (s + l, n + 1.0))
}

/// token-mean: `Σ m·L / Σ m`.
pub fn token_mean(loss: &Rows, m: &MaskRows) -> f64 {
    let (s, n) = loss
        .iter()
        .zip(m)
        .map(|(l, m)| row_stats(l, m))
        .fold((0.0, 0.0), |(a, b), (s, n)| (a + s, b + n));
    s / n
}

/// The mean over non-empty sequences of `f(Σ_t m·L, Σ_t m)`; 0 when every row is empty.
fn seq_mean(loss: &Rows, m: &MaskRows, f: impl Fn(f64, f64) -> f64) -> f64 {
    let per_seq: Vec<f64> = loss
        .iter()
        .zip(m)
        .map(|(l, m)| row_stats(l, m))
        .filter(|(_, n)| *n > 0.0)
        .map(|(s, n)| f(s, n))
        .collect();
    if per_seq.is_empty() {
        0.0
    } else {
        per_seq.iter().sum::<f64>() / per_seq.len() as f64
    }
}

/// seq-mean-token-sum: the mean over non-empty sequences of `Σ_t m·L`.
pub fn seq_mean_token_sum(loss: &Rows, m: &MaskRows) -> f64 {
    seq_mean(loss, m, |s, _| s)
}

/// seq-mean-token-mean: the mean over non-empty sequences of `Σ_t m·L / (Σ_t m + 1e-8)`.
pub fn seq_mean_token_mean(loss: &Rows, m: &MaskRows) -> f64 {
    seq_mean(loss, m, |s, n| s / (n + 1e-8))
}

/// seq-mean-token-sum-norm: `Σ m·L / T` with `T` the padded length.
pub fn seq_mean_token_sum_norm(loss: &Rows, m: &MaskRows) -> f64 {
    let t = loss.first().map_or(1, Vec::len) as f64;
    let s: f64 = loss.iter().zip(m).map(|(l, m)| row_stats(l, m).0).sum();
    s / t
}

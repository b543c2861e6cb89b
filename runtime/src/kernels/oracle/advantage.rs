//! Advantage estimators.

use super::masked::masked_whiten;
use super::{MaskRows, Rows, per_token};

/// GAE before whitening: reverse over `t`, from `next_v = 0`, `last = 0`,
/// `δ = r_t + γ·next_v − V_t`, `g = δ + γ·λ·last`, `next_v = m_t·V_t + (1−m_t)·next_v`,
/// `last = m_t·g + (1−m_t)·last`, `A_t = last`.
pub fn gae(r: &Rows, v: &Rows, m: &MaskRows, gamma: f64, lam: f64) -> Rows {
    let mut out = Vec::with_capacity(r.len());
    for i in 0..r.len() {
        let t_len = r[i].len();
        let mut a = vec![0.0; t_len];
        let (mut next_v, mut last) = (0.0, 0.0);
        for t in (0..t_len).rev() {
            if m[i][t] {
                let delta = r[i][t] + gamma * next_v - v[i][t];
                last = delta + gamma * lam * last;
                next_v = v[i][t];
            }
            a[t] = last;
        }
        out.push(a);
    }
    out
}

/// `R = A + V` with `A` from [`gae`].
pub fn gae_returns(r: &Rows, v: &Rows, m: &MaskRows, gamma: f64, lam: f64) -> Rows {
    let a = gae(r, v, m, gamma, lam);
    a.iter()
        .zip(v)
        .map(|(a, v)| a.iter().zip(v).map(|(a, v)| a + v).collect())
        .collect()
}

/// The members of each row's group (rows with the same id), row indices.
fn groups(ids: &[i64]) -> Vec<Vec<usize>> {
    ids.iter()
        .map(|g| (0..ids.len()).filter(|&j| ids[j] == *g).collect())
        .collect()
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// GRPO: `(s_i − μ)/(σ + 1e-6)` with the group's mean and unbiased std, `μ = 0, σ = 1` for a
/// group of one; `normalize_std = false` is Dr. GRPO, `s_i − μ`.
pub fn grpo(scores: &[f64], ids: &[i64], normalize_std: bool) -> Vec<f64> {
    groups(ids)
        .iter()
        .enumerate()
        .map(|(i, members)| {
            let s: Vec<f64> = members.iter().map(|&j| scores[j]).collect();
            let (mu, sigma) = if s.len() == 1 {
                (0.0, 1.0)
            } else {
                let mu = mean(&s);
                let var = s.iter().map(|x| (x - mu) * (x - mu)).sum::<f64>() / (s.len() - 1) as f64;
                (mu, var.sqrt())
            };
            if normalize_std {
                (scores[i] - mu) / (sigma + 1e-6)
            } else {
                scores[i] - mu
            }
        })
        .collect()
}

/// RLOO: the score minus the mean of the other `n − 1` scores of its group. RL_MATH leaves
/// `n = 1` open; the reference trainer keeps the score (its group mean is taken as 0 and the
/// rescaling is skipped).
pub fn rloo(scores: &[f64], ids: &[i64]) -> Vec<f64> {
    groups(ids)
        .iter()
        .enumerate()
        .map(|(i, members)| {
            if members.len() == 1 {
                return scores[i];
            }
            let others: Vec<f64> = members
                .iter()
                .filter(|&&j| j != i)
                .map(|&j| scores[j])
                .collect();
            scores[i] - mean(&others)
        })
        .collect()
}

/// REINFORCE++ returns: reverse, `G_t = r_t + γ·running`, then `running = G_t·m_t`.
pub fn reinforce_pp_returns(r: &Rows, m: &MaskRows, gamma: f64) -> Rows {
    r.iter()
        .zip(m)
        .map(|(r, m)| {
            let mut g = vec![0.0; r.len()];
            let mut running = 0.0;
            for t in (0..r.len()).rev() {
                g[t] = r[t] + gamma * running;
                running = if m[t] { g[t] } else { 0.0 };
            }
            g
        })
        .collect()
}

fn times_mask(x: Rows, m: &MaskRows) -> Rows {
    x.into_iter()
        .zip(m)
        .map(|(x, m)| {
            x.into_iter()
                .zip(m)
                .map(|(v, &b)| if b { v } else { 0.0 })
                .collect()
        })
        .collect()
}

/// REINFORCE++: `masked_whiten(G, m)·m`; `None` with fewer than two real tokens.
pub fn reinforce_pp(r: &Rows, m: &MaskRows, gamma: f64) -> Option<Rows> {
    let g = reinforce_pp_returns(r, m, gamma);
    Some(times_mask(masked_whiten(&g, m)?, m))
}

/// REINFORCE++ with a group baseline: `a = (s_i − group mean)·m` (mean 0 for a group of one,
/// as GRPO), then `masked_whiten(a, m)·m`.
pub fn reinforce_pp_baseline(scores: &[f64], ids: &[i64], m: &MaskRows) -> Option<Rows> {
    let centred = grpo(scores, ids, false);
    let a = per_token(&centred, m);
    Some(times_mask(masked_whiten(&a, m)?, m))
}

/// ReMax: `R_t = Σ_{t' ≥ t} r_{t'}·m_{t'}`, `A = R − b_i·m`.
pub fn remax(r: &Rows, baseline: &[f64], m: &MaskRows) -> Rows {
    r.iter()
        .zip(m)
        .zip(baseline)
        .map(|((r, m), b)| {
            let mut out = vec![0.0; r.len()];
            let mut acc = 0.0;
            for t in (0..r.len()).rev() {
                if m[t] {
                    acc += r[t];
                }
                out[t] = acc - if m[t] { *b } else { 0.0 };
            }
            out
        })
        .collect()
}

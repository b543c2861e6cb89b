//! Masked statistics over every real token of a batch.

use super::{MaskRows, Rows};

/// The values at real tokens, in row order.
fn real(x: &Rows, m: &MaskRows) -> Vec<f64> {
    x.iter()
        .zip(m)
        .flat_map(|(x, m)| x.iter().zip(m).filter(|(_, b)| **b).map(|(v, _)| *v))
        .collect()
}

/// `Σ x·m`.
pub fn masked_sum(x: &Rows, m: &MaskRows) -> f64 {
    real(x, m).iter().sum()
}

/// `Σ x·m / (Σ m + 1e-8)`.
pub fn masked_mean(x: &Rows, m: &MaskRows) -> f64 {
    let v = real(x, m);
    v.iter().sum::<f64>() / (v.len() as f64 + 1e-8)
}

/// The unbiased masked variance; `None` when there are fewer than two real tokens (RL_MATH:
/// an error).
pub fn masked_var(x: &Rows, m: &MaskRows) -> Option<f64> {
    let v = real(x, m);
    let n = v.len() as f64;
    if v.len() <= 1 {
        return None;
    }
    let mu = masked_mean(x, m);
    let biased = v.iter().map(|x| (x - mu) * (x - mu)).sum::<f64>() / (n + 1e-8);
    Some(biased * n / (n - 1.0))
}

/// `(x − μ) / sqrt(var + 1e-8)` at every position (padded ones included).
pub fn masked_whiten(x: &Rows, m: &MaskRows) -> Option<Rows> {
    let mu = masked_mean(x, m);
    let scale = 1.0 / (masked_var(x, m)? + 1e-8).sqrt();
    Some(
        x.iter()
            .map(|row| row.iter().map(|v| (v - mu) * scale).collect())
            .collect(),
    )
}

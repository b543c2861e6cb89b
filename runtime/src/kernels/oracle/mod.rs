//! Test support: the formulas of the design note RL_MATH written out in plain `f64` Rust on
//! rows (`[B][T]` as `Vec<Vec<f64>>`), independently of `std`'s `.rl` code, so that the two can
//! be compared on random inputs. Where RL_MATH leaves a case open, the function's doc says
//! which convention it takes (that of the most widely used open-source trainer).
//!
//! Nothing here is fast or differentiable; it is meant to be obviously right.

pub mod advantage;
pub mod dapo;
pub mod kl;
pub mod loss;
pub mod masked;
pub mod off_policy;
pub mod preference;

/// A `[B, T]` tensor as rows.
pub type Rows = Vec<Vec<f64>>;
/// A `[B, T]` mask as rows (true = a real token).
pub type MaskRows = Vec<Vec<bool>>;

/// `x_i · m_{i,t}`: a per-sequence value on every real token, 0 elsewhere.
pub fn per_token(a: &[f64], m: &MaskRows) -> Rows {
    m.iter()
        .zip(a)
        .map(|(row, &a)| row.iter().map(|&b| if b { a } else { 0.0 }).collect())
        .collect()
}

/// `Σ_t r_{i,t}·m_{i,t}`: the score of each sequence.
pub fn seq_score(r: &Rows, m: &MaskRows) -> Vec<f64> {
    r.iter()
        .zip(m)
        .map(|(r, m)| r.iter().zip(m).filter(|(_, b)| **b).map(|(x, _)| x).sum())
        .collect()
}

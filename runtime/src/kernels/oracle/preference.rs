//! Reward-model losses on preference pairs: Bradley–Terry, `P(chosen ≻ rejected) =
//! σ(s_chosen − s_rejected)`.

use std::collections::BTreeMap;

/// `(s_chosen − s_rejected)` of every pair, by pair id; each id must have exactly one chosen and
/// one rejected row.
fn margins(s: &[f64], pair: &[i64], chosen: &[bool]) -> BTreeMap<i64, f64> {
    let mut rows: BTreeMap<i64, (Option<f64>, Option<f64>)> = BTreeMap::new();
    for ((&x, &p), &c) in s.iter().zip(pair).zip(chosen) {
        let entry = rows.entry(p).or_default();
        let slot = if c { &mut entry.0 } else { &mut entry.1 };
        assert!(slot.is_none(), "pair {p} has two rows of one side");
        *slot = Some(x);
    }
    rows.into_iter()
        .map(|(p, (c, r))| (p, c.expect("a chosen row") - r.expect("a rejected row")))
        .collect()
}

/// `−log σ(d)` in a form that neither overflows nor loses the small values.
fn neg_log_sigmoid(d: f64) -> f64 {
    if d > 0.0 {
        (-d).exp().ln_1p()
    } else {
        -d + d.exp().ln_1p()
    }
}

/// The mean over pairs of `−log σ(s_chosen − s_rejected)`.
pub fn bradley_terry(s: &[f64], pair: &[i64], chosen: &[bool]) -> f64 {
    let m = margins(s, pair, chosen);
    m.values().map(|&d| neg_log_sigmoid(d)).sum::<f64>() / m.len() as f64
}

/// The fraction of pairs whose chosen row scores strictly higher.
pub fn pair_accuracy(s: &[f64], pair: &[i64], chosen: &[bool]) -> f64 {
    let m = margins(s, pair, chosen);
    m.values().filter(|&&d| d > 0.0).count() as f64 / m.len() as f64
}

/// Each row's pair margin.
pub fn pair_margin(s: &[f64], pair: &[i64], chosen: &[bool]) -> Vec<f64> {
    let m = margins(s, pair, chosen);
    pair.iter().map(|p| m[p]).collect()
}

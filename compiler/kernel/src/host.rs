//! The host's part of a kernel: finishing barriers from the level-1 values a pass stored
//! (one value per row, so this is O(B) work next to the passes' O(B·T)). Sums are taken in
//! `f64`.

use crate::ir::{GroupOp, Red};
use std::collections::HashMap;

/// A reduction over rows of `x`, where `mask` is true (nonzero); an empty selection gives 0.
pub fn reduce_rows(op: Red, x: &[f32], mask: Option<&[u8]>) -> f32 {
    let selected = |i: usize| mask.is_none_or(|m| m[i] != 0);
    match op {
        Red::Sum => x
            .iter()
            .enumerate()
            .filter(|&(i, _)| selected(i))
            .map(|(_, &v)| f64::from(v))
            .sum::<f64>() as f32,
        Red::Max | Red::Min => {
            let mut acc: Option<f32> = None;
            for (i, &v) in x.iter().enumerate() {
                if !selected(i) {
                    continue;
                }
                acc = Some(match acc {
                    None => v,
                    // NaN wins, as in torch's amax/amin.
                    Some(a) if a.is_nan() || v.is_nan() => f32::NAN,
                    Some(a) if op == Red::Max => a.max(v),
                    Some(a) => a.min(v),
                });
            }
            acc.unwrap_or(0.0)
        }
    }
}

/// Group statistics: rows with equal ids form a group; each row gets its group's value.
/// The standard deviation is unbiased and 0 for a group of one; deviations are taken from
/// the group's first member so that a group of equal values has a std of exactly 0.
pub fn group(op: GroupOp, x: Option<&[f32]>, by: &[i32], out: &mut [f32]) {
    let mut first: HashMap<i32, usize> = HashMap::new();
    let mut count: HashMap<i32, f64> = HashMap::new();
    let mut sum: HashMap<i32, f64> = HashMap::new();
    for (i, &g) in by.iter().enumerate() {
        first.entry(g).or_insert(i);
        *count.entry(g).or_default() += 1.0;
    }
    let value = |i: usize| x.map_or(0.0, |x| f64::from(x[i]));
    for (i, &g) in by.iter().enumerate() {
        let shift = value(first[&g]);
        *sum.entry(g).or_default() += value(i) - shift;
    }
    let mut sq: HashMap<i32, f64> = HashMap::new();
    if op == GroupOp::Std {
        for (i, &g) in by.iter().enumerate() {
            let mean_d = sum[&g] / count[&g];
            let d = value(i) - value(first[&g]) - mean_d;
            *sq.entry(g).or_default() += d * d;
        }
    }
    for (i, &g) in by.iter().enumerate() {
        let n = count[&g];
        let shift = value(first[&g]);
        out[i] = match op {
            GroupOp::Count => n,
            GroupOp::Sum => sum[&g] + shift * n,
            GroupOp::Mean => sum[&g] / n + shift,
            GroupOp::Std if n > 1.0 => (sq[&g] / (n - 1.0)).sqrt(),
            GroupOp::Std => 0.0,
        } as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_max_skips_unselected_and_gives_zero_when_empty() {
        let x = [1.0, 5.0, 3.0];
        assert_eq!(reduce_rows(Red::Max, &x, Some(&[1, 0, 1])), 3.0);
        assert_eq!(reduce_rows(Red::Max, &x, Some(&[0, 0, 0])), 0.0);
        assert_eq!(reduce_rows(Red::Sum, &x, None), 9.0);
    }

    #[test]
    fn group_statistics() {
        let x = [1.0, 2.0, 10.0, 3.0, 0.1];
        let by = [7, 7, 3, 7, 9];
        let mut out = [0.0; 5];
        group(GroupOp::Mean, Some(&x), &by, &mut out);
        assert_eq!(out, [2.0, 2.0, 10.0, 2.0, 0.1]);
        group(GroupOp::Std, Some(&x), &by, &mut out);
        assert_eq!(out, [1.0, 1.0, 0.0, 1.0, 0.0]);
        group(GroupOp::Count, None, &by, &mut out);
        assert_eq!(out, [3.0, 3.0, 1.0, 3.0, 1.0]);
        let same = [0.1, 0.1, 0.1];
        let mut out = [1.0; 3];
        group(GroupOp::Std, Some(&same), &[1, 1, 1], &mut out);
        assert_eq!(out, [0.0; 3]);
    }
}

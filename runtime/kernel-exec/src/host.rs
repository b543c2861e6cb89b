//! The host's part of a kernel: finishing barriers from the level-1 values a pass stored
//! (one value per row, so this is O(B) work next to the passes' O(B·T)). Sums are taken in
//! `f64`.

use rlc_kernel::ir::{GroupOp, Red};

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
/// O(B): groups are numbered by a table over the ids' range when it is small (prompts' ids are
/// consecutive), by sorting otherwise; sums run in row order, in `f64`.
pub fn group(op: GroupOp, x: Option<&[f32]>, by: &[i32], out: &mut [f32]) {
    group_in(op, x, &Groups::of(by), out);
}

/// Rows numbered by group: each row's group as a dense number, each group's size and first
/// row. Several statistics over the same ids (a mean and a std) share one numbering.
pub struct Groups {
    slot: Vec<usize>,
    count: Vec<f64>,
    first: Vec<usize>,
}

impl Groups {
    pub fn of(by: &[i32]) -> Groups {
        let (slot, groups) = slots(by);
        let mut first = vec![usize::MAX; groups];
        for (i, &g) in slot.iter().enumerate().rev() {
            first[g] = i;
        }
        let mut count = vec![0f64; groups];
        accumulate_in_runs(&slot, &mut count, |_, _| 1.0);
        Groups { slot, count, first }
    }
}

/// [`group`] over rows already numbered by group. Each group's statistic is computed once
/// (groups are far fewer than rows) and then handed to its rows.
pub fn group_in(op: GroupOp, x: Option<&[f32]>, numbered: &Groups, out: &mut [f32]) {
    let Groups { slot, count, first } = numbered;
    let value = |i: usize| x.map_or(0.0, |x| f64::from(x[i]));
    let shift: Vec<f64> = first.iter().map(|&i| value(i)).collect();
    let mut sum = vec![0f64; count.len()];
    if op != GroupOp::Count {
        accumulate_in_runs(slot, &mut sum, |i, g| value(i) - shift[g]);
    }
    let mean: Vec<f64> = sum.iter().zip(count).map(|(s, n)| s / n).collect();
    let mut sq = vec![0f64; count.len()];
    if op == GroupOp::Std {
        accumulate_in_runs(slot, &mut sq, |i, g| {
            let d = value(i) - shift[g] - mean[g];
            d * d
        });
    }
    let statistic: Vec<f32> = (0..count.len())
        .map(|g| {
            let n = count[g];
            (match op {
                GroupOp::Count => n,
                GroupOp::Sum => sum[g] + shift[g] * n,
                GroupOp::Mean => mean[g] + shift[g],
                GroupOp::Std if n > 1.0 => (sq[g] / (n - 1.0)).sqrt(),
                GroupOp::Std => 0.0,
            }) as f32
        })
        .collect();
    for (o, &g) in out.iter_mut().zip(slot) {
        *o = statistic[g];
    }
}

/// `acc[g] += term(i, g)` for every row `i` of group `g`, in row order. A group's rows are
/// usually adjacent, so the running sum stays in a register through each run of equal groups
/// instead of going through memory at every row; the additions and their order are the same.
fn accumulate_in_runs(slot: &[usize], acc: &mut [f64], term: impl Fn(usize, usize) -> f64) {
    let mut i = 0;
    while i < slot.len() {
        let g = slot[i];
        let mut running = acc[g];
        while i < slot.len() && slot[i] == g {
            running += term(i, g);
            i += 1;
        }
        acc[g] = running;
    }
}

/// Each row's group as a dense number `0..groups`, and the number of groups.
fn slots(by: &[i32]) -> (Vec<usize>, usize) {
    let (Some(&lo), Some(&hi)) = (by.iter().min(), by.iter().max()) else {
        return (Vec::new(), 0);
    };
    let range = (i64::from(hi) - i64::from(lo) + 1) as usize;
    if range <= 4 * by.len() + 64 {
        // A table over the ids' range: groups numbered by first appearance.
        let mut table = vec![usize::MAX; range];
        let mut groups = 0;
        let slot = by
            .iter()
            .map(|&g| {
                let e = &mut table[(i64::from(g) - i64::from(lo)) as usize];
                if *e == usize::MAX {
                    *e = groups;
                    groups += 1;
                }
                *e
            })
            .collect();
        return (slot, groups);
    }
    let mut order: Vec<usize> = (0..by.len()).collect();
    order.sort_by_key(|&i| by[i]);
    let mut slot = vec![0; by.len()];
    let mut groups = 0;
    for (k, &i) in order.iter().enumerate() {
        if k > 0 && by[i] != by[order[k - 1]] {
            groups += 1;
        }
        slot[i] = groups;
    }
    (slot, groups + 1)
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

    #[test]
    fn group_ids_far_apart_are_sorted_into_groups() {
        let x = [1.0, 2.0, 10.0, 3.0, 0.1];
        let by = [i32::MAX, i32::MAX, i32::MIN, i32::MAX, -5];
        let mut out = [0.0; 5];
        group(GroupOp::Mean, Some(&x), &by, &mut out);
        assert_eq!(out, [2.0, 2.0, 10.0, 2.0, 0.1]);
        group(GroupOp::Std, Some(&x), &by, &mut out);
        assert_eq!(out, [1.0, 1.0, 0.0, 1.0, 0.0]);
        group(GroupOp::Sum, Some(&x), &by, &mut out);
        assert_eq!(out, [6.0, 6.0, 10.0, 6.0, 0.1]);
        group(GroupOp::Count, None, &[], &mut []);
    }
}

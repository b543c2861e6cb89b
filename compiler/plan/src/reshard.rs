//! The moves of a weight sync (3D re-sharding, `docs/plan.md`): which source rank sends which
//! piece of a role's weights to which destination ranks. Data only, shared by the lowering that
//! writes them into the plan and the runtime that executes them.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Instance, RankSet, ShardMove, Slice};

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

pub fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b).max(1) * b
}

/// Block `i` of `parts` over `n` units: `[i·n/parts, (i+1)·n/parts)`.
pub fn block(n: u64, parts: u32, i: u32) -> (u64, u64) {
    let p = u64::from(parts.max(1));
    (u64::from(i) * n / p, (u64::from(i) + 1) * n / p)
}

/// The moves that take a role's weights from `src`'s layout to `dst`'s (see `docs/plan.md`).
pub fn moves(src: &Instance, dst: &Instance, layers: u64) -> Vec<ShardMove> {
    let (s, d) = (src.layout, dst.layout);
    let n = lcm(u64::from(s.tp), u64::from(d.tp));
    let mut moves: BTreeMap<(u32, Slice, Slice, Slice), BTreeSet<u32>> = BTreeMap::new();
    for replica in 0..d.data_ranks() {
        let (rd, rf) = (replica / d.fsdp, replica % d.fsdp);
        let source_dp = replica % s.dp;
        for pg in 0..d.pp {
            let (la, lb) = block(layers, d.pp, pg);
            for j in 0..d.tp {
                let Some(to) = dst.rank_at(pg, rd, rf, j) else {
                    continue;
                };
                let (ta, tb) = block(n, d.tp, j);
                for ps in 0..s.pp {
                    let (sa, sb) = block(layers, s.pp, ps);
                    let (a, b) = (la.max(sa), lb.min(sb));
                    if a >= b {
                        continue;
                    }
                    for i in 0..s.tp {
                        let (ia, ib) = block(n, s.tp, i);
                        let (x, y) = (ta.max(ia), tb.min(ib));
                        if x >= y {
                            continue;
                        }
                        for f in 0..s.fsdp {
                            let Some(from) = src.rank_at(ps, source_dp, f, i) else {
                                continue;
                            };
                            let key = (
                                from,
                                Slice {
                                    start: a,
                                    end: b,
                                    of: layers,
                                },
                                Slice {
                                    start: x,
                                    end: y,
                                    of: n,
                                },
                                Slice {
                                    start: u64::from(f),
                                    end: u64::from(f) + 1,
                                    of: u64::from(s.fsdp),
                                },
                            );
                            moves.entry(key).or_default().insert(to);
                        }
                    }
                }
            }
        }
    }
    moves
        .into_iter()
        .map(|((from, layers, tp, rows), to)| ShardMove {
            from,
            to: RankSet::from_ranks(to),
            layers,
            tp,
            rows,
        })
        .collect()
}

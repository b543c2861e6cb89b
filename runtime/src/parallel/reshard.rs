//! Weight re-sharding between two layouts of one role (training → generation), executed from
//! the plan's moves.
//!
//! The plan says which source rank feeds which destination rank (`ShardMove::from` → `to`);
//! what moves is computed from the two layouts' [`Holding`]s: each destination element is taken
//! from the first listed source (in rank order) that holds it, so a piece held by several
//! sources (a replicated norm, another replica) travels once, and a piece a rank already holds
//! under both layouts is copied locally, never sent. Each (source, destination) pair exchanges
//! one packed buffer.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use rlc_plan::model::{Instance, ShardMove};
use tch::{Kind, Tensor};

use super::shards::{Coord, Holding, Overlap, holding};
use crate::collectives::{CollectiveError, Communicator};
use crate::model::ModelConfig;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReshardError {
    #[error(
        "the plan's moves leave {missing} elements of `{name}` on rank {rank} without a source"
    )]
    Uncovered {
        name: String,
        rank: u32,
        missing: i64,
    },
    #[error("rank {rank} holds `{name}` with {found} elements, its layout gives it {expected}")]
    LocalSize {
        name: String,
        rank: u32,
        expected: i64,
        found: i64,
    },
    #[error("rank {rank} has no shard of `{name}`, which its layout gives it")]
    MissingShard { name: String, rank: u32 },
    #[error("rank {rank} is in neither layout")]
    NotInLayout { rank: u32 },
    #[error("re-sharding: {0}")]
    Collective(#[from] CollectiveError),
}

/// Elements a rank received from other ranks and copied locally in one re-shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReshardStats {
    pub received: i64,
    pub local: i64,
}

/// Where the pieces of one destination rank's parameters come from.
struct Claims {
    /// For each source rank (ascending) and parameter (name order): overlaps, `at_a` in the
    /// destination's local storage, `at_b` in the source's.
    by_source: BTreeMap<u32, Vec<(String, Vec<Overlap>)>>,
}

fn coord(instance: &Instance, rank: u32) -> Option<Coord> {
    instance.coord_of(rank).map(|(p, d, f, t)| Coord {
        pp: i64::from(p),
        dp: i64::from(d),
        fsdp: i64::from(f),
        tp: i64::from(t),
    })
}

/// What `rank` holds of `name` under `instance`'s layout (`None`: not in the instance, or nothing).
pub fn holding_of(
    instance: &Instance,
    rank: u32,
    name: &str,
    shape: &[i64],
    config: &ModelConfig,
) -> Option<Holding> {
    holding(
        name,
        shape,
        config,
        &instance.layout,
        coord(instance, rank)?,
    )
}

/// The sources the plan lists for destination rank `rank`, ascending.
fn sources_of(moves: &[ShardMove], rank: u32) -> Vec<u32> {
    moves
        .iter()
        .filter(|m| m.to.contains(rank))
        .map(|m| m.from)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Destination ranks the plan lists for source rank `rank`, ascending.
fn destinations_of(moves: &[ShardMove], rank: u32) -> Vec<u32> {
    moves
        .iter()
        .filter(|m| m.from == rank)
        .flat_map(|m| m.to.iter())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// `[start, end)` minus the sorted, disjoint `covered` ranges.
fn uncovered(start: i64, end: i64, covered: &[Range<i64>]) -> Vec<Range<i64>> {
    let mut out = Vec::new();
    let mut at = start;
    for c in covered {
        if c.end <= at || c.start >= end {
            continue;
        }
        if c.start > at {
            out.push(at..c.start);
        }
        at = at.max(c.end);
    }
    if at < end {
        out.push(at..end);
    }
    out
}

fn insert_sorted(covered: &mut Vec<Range<i64>>, r: Range<i64>) {
    let at = covered.partition_point(|c| c.start < r.start);
    covered.insert(at, r);
}

/// Every piece destination `rank` takes from each of its sources.
fn claims(
    src: &Instance,
    dst: &Instance,
    moves: &[ShardMove],
    rank: u32,
    shapes: &BTreeMap<String, Vec<i64>>,
    config: &ModelConfig,
) -> Result<Claims, ReshardError> {
    let sources = sources_of(moves, rank);
    let mut by_source: BTreeMap<u32, Vec<(String, Vec<Overlap>)>> = BTreeMap::new();
    for (name, shape) in shapes {
        let Some(need) = holding_of(dst, rank, name, shape, config) else {
            continue;
        };
        let mut covered: Vec<Range<i64>> = Vec::new();
        for &source in &sources {
            let Some(have) = holding_of(src, source, name, shape, config) else {
                continue;
            };
            let mut pieces = Vec::new();
            for o in need.overlaps(&have) {
                for r in uncovered(o.at_a, o.at_a + o.len, &covered) {
                    pieces.push(Overlap {
                        at_a: r.start,
                        at_b: o.at_b + r.start - o.at_a,
                        len: r.end - r.start,
                    });
                }
            }
            for p in &pieces {
                insert_sorted(&mut covered, p.at_a..p.at_a + p.len);
            }
            if !pieces.is_empty() {
                by_source
                    .entry(source)
                    .or_default()
                    .push((name.clone(), pieces));
            }
        }
        let got: i64 = covered.iter().map(|r| r.end - r.start).sum();
        if got != need.numel() {
            return Err(ReshardError::Uncovered {
                name: name.clone(),
                rank,
                missing: need.numel() - got,
            });
        }
    }
    Ok(Claims { by_source })
}

/// The source-side pieces `pieces` of the flat local tensors, packed into one buffer.
fn pack(
    local: &BTreeMap<String, Tensor>,
    pieces: &[(String, Vec<Overlap>)],
    rank: u32,
) -> Result<Tensor, ReshardError> {
    let mut parts = Vec::new();
    for (name, overlaps) in pieces {
        let flat = local
            .get(name)
            .ok_or_else(|| ReshardError::MissingShard {
                name: name.clone(),
                rank,
            })?
            .reshape([-1]);
        parts.extend(overlaps.iter().map(|o| flat.narrow(0, o.at_b, o.len)));
    }
    Ok(Tensor::cat(&parts, 0))
}

/// Writes a packed buffer into the destination's flat tensors.
fn unpack(buffer: &Tensor, pieces: &[(String, Vec<Overlap>)], out: &mut BTreeMap<String, Tensor>) {
    let mut at = 0;
    for (name, overlaps) in pieces {
        let flat = &out[name];
        for o in overlaps {
            flat.narrow(0, o.at_a, o.len)
                .copy_(&buffer.narrow(0, at, o.len));
            at += o.len;
        }
    }
}

/// Re-lays out a role's weights from `src`'s layout to `dst`'s as the plan's `moves` say.
///
/// Every rank of either instance calls this with `world`, a communicator whose rank `r` is global
/// rank `r`. `local` holds this rank's source shards (any shape; read flattened) when it is a
/// source rank. Returns this rank's destination shards, flat (1-D, in [`Holding`] order; empty
/// when it is not a destination rank), and what it received.
#[allow(clippy::too_many_arguments)]
pub fn reshard(
    src: &Instance,
    dst: &Instance,
    moves: &[ShardMove],
    shapes: &BTreeMap<String, Vec<i64>>,
    config: &ModelConfig,
    world: &Communicator,
    local: &BTreeMap<String, Tensor>,
) -> Result<(BTreeMap<String, Tensor>, ReshardStats), ReshardError> {
    let rank = world.rank() as u32;
    if !src.ranks.contains(rank) && !dst.ranks.contains(rank) {
        return Err(ReshardError::NotInLayout { rank });
    }
    // Check the source shards against the layout before anything is sent.
    if src.ranks.contains(rank) {
        for (name, shape) in shapes {
            if let Some(have) = holding_of(src, rank, name, shape, config) {
                let found = local
                    .get(name)
                    .ok_or_else(|| ReshardError::MissingShard {
                        name: name.clone(),
                        rank,
                    })?
                    .numel() as i64;
                if found != have.numel() {
                    return Err(ReshardError::LocalSize {
                        name: name.clone(),
                        rank,
                        expected: have.numel(),
                        found,
                    });
                }
            }
        }
        // Sends are buffered: every source sends before anyone receives, so no order deadlocks.
        for to in destinations_of(moves, rank) {
            if to == rank {
                continue;
            }
            let theirs = claims(src, dst, moves, to, shapes, config)?;
            if let Some(pieces) = theirs.by_source.get(&rank) {
                world.send(&pack(local, pieces, rank)?, to as usize)?;
            }
        }
    }
    let mut out = BTreeMap::new();
    let mut stats = ReshardStats::default();
    if dst.ranks.contains(rank) {
        let kind = local.values().next().map_or(Kind::Float, Tensor::kind);
        for (name, shape) in shapes {
            if let Some(need) = holding_of(dst, rank, name, shape, config) {
                out.insert(
                    name.clone(),
                    Tensor::zeros([need.numel()], (kind, tch::Device::Cpu)),
                );
            }
        }
        let mine = claims(src, dst, moves, rank, shapes, config)?;
        tch::no_grad(|| -> Result<(), ReshardError> {
            for (&source, pieces) in &mine.by_source {
                let buffer = if source == rank {
                    let buffer = pack(local, pieces, rank)?;
                    stats.local += buffer.numel() as i64;
                    buffer
                } else {
                    let buffer = world.recv(source as usize)?;
                    stats.received += buffer.numel() as i64;
                    buffer
                };
                unpack(&buffer, pieces, &mut out);
            }
            Ok(())
        })?;
    }
    Ok((out, stats))
}

#[cfg(test)]
mod tests;

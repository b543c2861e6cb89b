//! The search over placements: which free units share a pool (a set partition), how the free
//! cluster's blocks are split among the pools (a composition), and which layout each unit
//! takes (its Pareto set on its pool). Branch and bound: a partial split is dropped when a
//! lower bound on every completion — the longest dependency chain at the fastest layouts the
//! remaining devices allow, or all the work spread over all the devices — is no better than the
//! `K`-th best step found. The bound never overestimates, so the best step is the best of the
//! whole space ([`brute_force`] checks that on small clusters).
//!
//! Blocks are whole nodes (single devices on a one-node cluster); with more than
//! [`MAX_BLOCKS`] nodes a block is several nodes, and the result is stated against a lower
//! bound over every node-aligned split ([`SearchResult::bound`]).

use super::objective::{Assigned, Evaluation, critical_path, evaluate};
use super::options::{Choice, Rejections, choices};
use super::units::{Job, UnitKind};
use crate::cost::{CostParams, Hardware, Placed, work};
use rlc_check::checks::memory;
use rlc_check::program::Program;

/// At most this many blocks: 16 blocks and 5 free units make about 9 000 splits.
pub const MAX_BLOCKS: u64 = 16;
/// How many distinct placements the search keeps (the best and the runners-up).
pub const KEEP: usize = 4;

/// One complete placement.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Devices of each unit (in its cluster), indexed like `job.units`.
    pub ranges: Vec<(u64, u64)>,
    pub choices: Vec<Choice>,
    pub eval: Evaluation,
}

#[derive(Clone, Debug)]
pub struct SearchResult {
    /// Best first; at most [`KEEP`].
    pub candidates: Vec<Candidate>,
    /// Complete placements evaluated.
    pub evaluated: u64,
    /// A lower bound on the step time of any placement with node-aligned pools.
    pub bound: f64,
    /// Whether the space searched is every node-aligned split (blocks of one node or device).
    pub exact: bool,
    /// Devices per block.
    pub block: u64,
    /// Per unit: why layouts were refused.
    pub rejections: Vec<Rejections>,
}

/// Why no placement exists.
#[derive(Clone, Debug, PartialEq)]
pub struct Infeasible {
    pub unit: usize,
    pub rejections: Rejections,
    pub devices: u64,
}

/// The search's inputs, precomputed.
pub struct Space<'a> {
    pub job: &'a Job,
    program: &'a Program,
    pub hardware: Vec<Hardware>,
    pub params: CostParams,
    /// Per unit: its devices when fixed.
    fixed_range: Vec<Option<(u64, u64)>>,
    /// Per unit, per size in blocks (index 0 unused; fixed units use index 1): its choices.
    options: Vec<Vec<Vec<Choice>>>,
    free: Vec<usize>,
    pub block: u64,
    blocks: u64,
    cluster_devices: u64,
    rejections: Vec<Rejections>,
}

fn block_size(devices: u64, per_node: u64) -> u64 {
    if devices <= per_node {
        return 1;
    }
    let nodes = devices / per_node;
    let group = (1..=nodes)
        .find(|d| nodes.is_multiple_of(*d) && nodes / d <= MAX_BLOCKS)
        .unwrap_or(nodes);
    group * per_node
}

fn manual_choice(
    job: &Job,
    program: &Program,
    u: usize,
    hw: &Hardware,
    layout: crate::model::Layout,
    params: &CostParams,
) -> Choice {
    let unit = &job.units[u];
    let model = &program.models[unit.model];
    let pipeline = program.pipeline.as_ref().expect("a job has a pipeline");
    let cl = super::options::check_layout(&layout);
    let placed = Placed::aligned(*hw, layout);
    let (mut peak, mut state, mut seconds) = (0.0f64, 0.0f64, Vec::new());
    for c in job.calls.iter().filter(|c| c.unit == u) {
        if let Some(arch) = &model.arch {
            let b = memory::breakdown(model, arch, c.phase, &cl, &pipeline.calls[c.call]);
            peak = peak.max(b.total());
            state = state.max(b.model_state());
        }
        seconds.push(work::seconds(params, &unit.shape, &placed, &c.work) + params.op_overhead);
    }
    Choice {
        layout,
        seconds,
        state_bytes: state,
        peak_bytes: peak,
    }
}

impl<'a> Space<'a> {
    /// Costs every unit's layouts on every size it may take; `all` keeps dominated layouts
    /// (for [`brute_force`]).
    pub fn new(
        job: &'a Job,
        program: &'a Program,
        hardware: Vec<Hardware>,
        params: &CostParams,
        all: bool,
    ) -> Result<Space<'a>, Infeasible> {
        let n = job.units.len();
        let free: Vec<usize> = (0..n)
            .filter(|&u| job.units[u].kind == UnitKind::Free)
            .collect();
        let (cluster_devices, per_node) = match job.free_cluster {
            Some(c) => {
                let cl = &program.clusters[c];
                (cl.device_count(), cl.devices_per_node.value.max(1))
            }
            None => (0, 1),
        };
        let block = block_size(cluster_devices, per_node).max(1);
        let blocks = cluster_devices / block;
        let mut fixed_range = vec![None; n];
        let mut options = vec![Vec::new(); n];
        let mut rejections = vec![Rejections::default(); n];
        for u in 0..n {
            let unit = &job.units[u];
            let hw = &hardware[unit.cluster];
            match &unit.kind {
                UnitKind::Manual { layout, .. } => {
                    fixed_range[u] = Some((unit.devices.start, unit.devices.end));
                    let c = manual_choice(job, program, u, hw, *layout, params);
                    options[u] = vec![Vec::new(), vec![c]];
                }
                UnitKind::AutoLayout { .. } => {
                    fixed_range[u] = Some((unit.devices.start, unit.devices.end));
                    let devices = unit.devices.end - unit.devices.start;
                    let (c, r) = choices(job, program, u, hw, devices, params, all);
                    if c.is_empty() {
                        return Err(Infeasible {
                            unit: u,
                            rejections: r,
                            devices,
                        });
                    }
                    rejections[u] = r;
                    options[u] = vec![Vec::new(), c];
                }
                UnitKind::Free => {
                    let mut per_size = vec![Vec::new()];
                    let mut any = false;
                    let mut all_rej = Rejections::default();
                    for size in 1..=blocks {
                        let (c, r) = choices(job, program, u, hw, size * block, params, all);
                        any |= !c.is_empty();
                        all_rej.memory += r.memory;
                        all_rej.arithmetic += r.arithmetic;
                        all_rej.least_memory = match (all_rej.least_memory, r.least_memory) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                        per_size.push(c);
                    }
                    if !any {
                        return Err(Infeasible {
                            unit: u,
                            rejections: all_rej,
                            devices: cluster_devices,
                        });
                    }
                    rejections[u] = all_rej;
                    options[u] = per_size;
                }
            }
        }
        Ok(Space {
            job,
            program,
            hardware,
            params: params.clone(),
            fixed_range,
            options,
            free,
            block,
            blocks,
            cluster_devices,
            rejections,
        })
    }

    fn calls_of(&self, u: usize) -> impl Iterator<Item = usize> + '_ {
        self.job
            .calls
            .iter()
            .enumerate()
            .filter(move |(_, c)| c.unit == u)
            .map(|(i, _)| i)
    }

    /// Componentwise fastest seconds of unit `u`'s calls over sizes `sizes`.
    fn fastest(&self, u: usize, sizes: std::ops::RangeInclusive<u64>, out: &mut [f64]) {
        let calls: Vec<usize> = self.calls_of(u).collect();
        for &i in &calls {
            out[i] = f64::INFINITY;
        }
        for s in sizes {
            for c in self.options[u].get(s as usize).into_iter().flatten() {
                for (k, &i) in calls.iter().enumerate() {
                    out[i] = out[i].min(c.seconds[k]);
                }
            }
        }
    }

    /// Least device-seconds of unit `u` over `sizes` (free units: devices × seconds).
    fn least_work(&self, u: usize, sizes: std::ops::RangeInclusive<u64>) -> f64 {
        let mut best = f64::INFINITY;
        for s in sizes {
            for c in self.options[u].get(s as usize).into_iter().flatten() {
                let t: f64 = c.seconds.iter().sum();
                best = best.min(t * (s * self.block) as f64);
            }
        }
        best
    }

    /// A lower bound when the free units have `sizes` (blocks; 0 = not decided, at most
    /// `max_size`).
    fn lower_bound(&self, sizes: &[u64], max_size: u64) -> f64 {
        let mut fastest = vec![0.0; self.job.calls.len()];
        let mut work = 0.0;
        for u in 0..self.job.units.len() {
            if let Some((a, b)) = self.fixed_range[u] {
                self.fastest(u, 1..=1, &mut fastest);
                if Some(self.job.units[u].cluster) == self.job.free_cluster {
                    let t: f64 = self.options[u][1]
                        .iter()
                        .map(|c| c.seconds.iter().sum::<f64>())
                        .fold(f64::INFINITY, f64::min);
                    work += t * (b - a) as f64;
                }
            }
        }
        for (k, &u) in self.free.iter().enumerate() {
            let range = match sizes.get(k).copied().unwrap_or(0) {
                0 => 1..=max_size.max(1),
                s => s..=s,
            };
            self.fastest(u, range.clone(), &mut fastest);
            work += self.least_work(u, range);
        }
        let spread = if self.cluster_devices > 0 {
            work / self.cluster_devices as f64
        } else {
            0.0
        };
        critical_path(self.job, &fastest).max(spread)
    }

    /// The best layouts for fixed ranges: branch and bound over each unit's choices.
    fn best_layouts(&self, ranges: &[(u64, u64)], sizes: &[u64], keep: f64) -> Option<Candidate> {
        let n = self.job.units.len();
        let mut lists: Vec<Vec<&Choice>> = Vec::with_capacity(n);
        for u in 0..n {
            let size = match self.fixed_range[u] {
                Some(_) => 1,
                None => sizes[self.free.iter().position(|&f| f == u).expect("free")],
            };
            let all: Vec<&Choice> = self.options[u]
                .get(size as usize)
                .map(|v| v.iter().collect())
                .unwrap_or_default();
            if all.is_empty() {
                return None;
            }
            // A unit alone on its devices never offloads: only its seconds matter.
            let alone = !(0..n).any(|v| {
                v != u
                    && self.job.units[v].cluster == self.job.units[u].cluster
                    && ranges[v].0 < ranges[u].1
                    && ranges[u].0 < ranges[v].1
            });
            let mut list = all;
            if alone {
                let mut kept: Vec<&Choice> = Vec::new();
                for c in list {
                    if !kept
                        .iter()
                        .any(|k| k.seconds.iter().zip(&c.seconds).all(|(a, b)| a <= b))
                    {
                        kept.retain(|k| !c.seconds.iter().zip(&k.seconds).all(|(a, b)| a <= b));
                        kept.push(c);
                    }
                }
                list = kept;
            }
            lists.push(list);
        }
        let mut best: Option<Candidate> = None;
        let mut pick = vec![0usize; n];
        self.layouts_rec(0, ranges, &lists, &mut pick, keep, &mut best);
        best
    }

    #[allow(clippy::too_many_arguments)]
    fn layouts_rec(
        &self,
        u: usize,
        ranges: &[(u64, u64)],
        lists: &[Vec<&Choice>],
        pick: &mut Vec<usize>,
        keep: f64,
        best: &mut Option<Candidate>,
    ) {
        let threshold = best.as_ref().map_or(keep, |b| b.eval.seconds.min(keep));
        if u < lists.len() {
            // Bound: decided units at their pick, the others at their fastest.
            let mut fastest = vec![f64::INFINITY; self.job.calls.len()];
            for v in 0..lists.len() {
                let calls: Vec<usize> = self.calls_of(v).collect();
                let chosen: Vec<&&Choice> = if v < u {
                    vec![&lists[v][pick[v]]]
                } else {
                    lists[v].iter().collect()
                };
                for c in chosen {
                    for (k, &i) in calls.iter().enumerate() {
                        fastest[i] = fastest[i].min(c.seconds[k]);
                    }
                }
            }
            if critical_path(self.job, &fastest) >= threshold {
                return;
            }
            for k in 0..lists[u].len() {
                pick[u] = k;
                self.layouts_rec(u + 1, ranges, lists, pick, keep, best);
            }
            return;
        }
        let assign: Vec<Assigned> = (0..lists.len())
            .map(|v| Assigned {
                start: ranges[v].0,
                end: ranges[v].1,
                choice: lists[v][pick[v]],
            })
            .collect();
        let eval = evaluate(self.job, &self.hardware, &assign, &self.params);
        if eval.seconds < threshold {
            *best = Some(Candidate {
                ranges: ranges.to_vec(),
                choices: assign.iter().map(|a| a.choice.clone()).collect(),
                eval,
            });
        }
    }

    /// The free units' ranges for a partition (`group[k]` of free unit `k`) and group sizes.
    fn ranges_for(&self, group: &[usize], sizes: &[u64]) -> (Vec<(u64, u64)>, Vec<u64>) {
        let mut starts = Vec::with_capacity(sizes.len());
        let mut at = 0;
        for &s in sizes {
            starts.push(at);
            at += s;
        }
        let mut ranges: Vec<(u64, u64)> = self
            .fixed_range
            .iter()
            .map(|r| r.unwrap_or((0, 0)))
            .collect();
        let mut unit_sizes = Vec::with_capacity(self.free.len());
        for (k, &u) in self.free.iter().enumerate() {
            let g = group[k];
            ranges[u] = (starts[g] * self.block, (starts[g] + sizes[g]) * self.block);
            unit_sizes.push(sizes[g]);
        }
        (ranges, unit_sizes)
    }
}

/// Every set partition of `n` items as restricted growth strings (`group[i]` ≤ 1 + max before).
pub fn partitions(n: usize) -> Vec<Vec<usize>> {
    fn rec(i: usize, n: usize, cur: &mut Vec<usize>, max: usize, out: &mut Vec<Vec<usize>>) {
        if i == n {
            out.push(cur.clone());
            return;
        }
        for g in 0..=max.min(n) {
            cur.push(g);
            rec(i + 1, n, cur, max.max(g + 1), out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    rec(0, n, &mut Vec::new(), 0, &mut out);
    out
}

struct Best {
    list: Vec<Candidate>,
    evaluated: u64,
}

impl Best {
    fn threshold(&self) -> f64 {
        if self.list.len() < KEEP {
            f64::INFINITY
        } else {
            self.list[KEEP - 1].eval.seconds
        }
    }

    fn offer(&mut self, c: Candidate) {
        let at = self
            .list
            .iter()
            .position(|x| c.eval.seconds < x.eval.seconds)
            .unwrap_or(self.list.len());
        if at < KEEP {
            self.list.insert(at, c);
            self.list.truncate(KEEP);
        }
    }
}

/// Branch and bound over partitions, splits and layouts.
pub fn search(space: &Space) -> SearchResult {
    let mut best = Best {
        list: Vec::new(),
        evaluated: 0,
    };
    let free = space.free.len();
    if free == 0 || space.blocks == 0 {
        let (ranges, sizes) = space.ranges_for(&[], &[]);
        if let Some(c) = space.best_layouts(&ranges, &sizes, f64::INFINITY) {
            best.evaluated += 1;
            best.offer(c);
        }
    } else {
        for group in partitions(free) {
            let groups = group.iter().max().map_or(0, |m| m + 1) as u64;
            if groups > space.blocks {
                continue;
            }
            let mut sizes = Vec::with_capacity(groups as usize);
            split_rec(space, &group, groups, &mut sizes, &mut best);
        }
    }
    let bound = root_bound(space);
    let first = best.list.first().map_or(f64::INFINITY, |c| c.eval.seconds);
    SearchResult {
        candidates: best.list,
        evaluated: best.evaluated,
        bound: bound.min(first),
        exact: space.block <= space.hardware_per_node(),
        block: space.block,
        rejections: space.rejections.clone(),
    }
}

impl Space<'_> {
    fn hardware_per_node(&self) -> u64 {
        self.job
            .free_cluster
            .map_or(1, |c| self.hardware[c].devices_per_node)
    }

    /// Per free unit: its group's size (blocks), or 0 while undecided.
    fn unit_sizes(&self, group: &[usize], sizes: &[u64]) -> Vec<u64> {
        group
            .iter()
            .map(|&g| sizes.get(g).copied().unwrap_or(0))
            .collect()
    }
}

fn split_rec(space: &Space, group: &[usize], groups: u64, sizes: &mut Vec<u64>, best: &mut Best) {
    let used: u64 = sizes.iter().sum();
    let left_groups = groups - sizes.len() as u64;
    if left_groups == 0 {
        if used != space.blocks {
            return;
        }
        let (ranges, unit_sizes) = space.ranges_for(group, sizes);
        best.evaluated += 1;
        if let Some(c) = space.best_layouts(&ranges, &unit_sizes, best.threshold()) {
            best.offer(c);
        }
        return;
    }
    let remaining = space.blocks - used;
    let max_size = remaining - (left_groups - 1);
    if space.lower_bound(&space.unit_sizes(group, sizes), max_size) >= best.threshold() {
        return;
    }
    let range: Vec<u64> = if left_groups == 1 {
        vec![remaining]
    } else {
        (1..=max_size).collect()
    };
    for s in range {
        sizes.push(s);
        split_rec(space, group, groups, sizes, best);
        sizes.pop();
    }
}

/// A lower bound over every node-aligned split. When blocks are single nodes (or devices) the
/// searched sizes are all of them; otherwise each free unit is costed on every whole number of
/// nodes, and the bound takes its fastest calls and least device-seconds over them.
fn root_bound(space: &Space) -> f64 {
    let exact = space.block <= space.hardware_per_node();
    if exact {
        return space.lower_bound(&vec![0; space.free.len()], space.blocks);
    }
    let calls = space.job.calls.len();
    let mut fastest = vec![0.0; calls];
    let mut work = 0.0;
    for u in 0..space.job.units.len() {
        if let Some((a, b)) = space.fixed_range[u] {
            space.fastest(u, 1..=1, &mut fastest);
            if Some(space.job.units[u].cluster) == space.job.free_cluster {
                let t: f64 = space.options[u][1]
                    .iter()
                    .map(|c| c.seconds.iter().sum::<f64>())
                    .fold(f64::INFINITY, f64::min);
                work += t * (b - a) as f64;
            }
        }
    }
    let per_node = space.hardware_per_node();
    let nodes = space.cluster_devices / per_node;
    for &u in &space.free {
        let hw = &space.hardware[space.job.units[u].cluster];
        let mine: Vec<usize> = space.calls_of(u).collect();
        for &i in &mine {
            fastest[i] = f64::INFINITY;
        }
        let mut least = f64::INFINITY;
        for k in 1..=nodes {
            let devices = k * per_node;
            let (list, _) = choices(
                space.job,
                space.program,
                u,
                hw,
                devices,
                &space.params,
                false,
            );
            for c in &list {
                for (j, &i) in mine.iter().enumerate() {
                    fastest[i] = fastest[i].min(c.seconds[j]);
                }
                least = least.min(c.seconds.iter().sum::<f64>() * devices as f64);
            }
        }
        work += least;
    }
    let spread = if space.cluster_devices > 0 {
        work / space.cluster_devices as f64
    } else {
        0.0
    };
    critical_path(space.job, &fastest).max(spread)
}

/// Every placement of the space, every layout of every unit (dominated ones too): the
/// best step time and how many placements there were. Exponential: for tests on small
/// clusters.
pub fn brute_force(space: &Space) -> Option<(f64, u64)> {
    let free = space.free.len();
    let mut best: Option<f64> = None;
    let mut count = 0u64;
    let mut visit = |ranges: &[(u64, u64)], unit_sizes: &[u64]| {
        let n = space.job.units.len();
        let lists: Vec<&Vec<Choice>> = (0..n)
            .map(|u| {
                let size = match space.fixed_range[u] {
                    Some(_) => 1,
                    None => unit_sizes[space.free.iter().position(|&f| f == u).expect("free")],
                };
                &space.options[u][size as usize]
            })
            .collect();
        if lists.iter().any(|l| l.is_empty()) {
            return;
        }
        let mut pick = vec![0usize; n];
        loop {
            let assign: Vec<Assigned> = (0..n)
                .map(|u| Assigned {
                    start: ranges[u].0,
                    end: ranges[u].1,
                    choice: &lists[u][pick[u]],
                })
                .collect();
            let t = evaluate(space.job, &space.hardware, &assign, &space.params).seconds;
            best = Some(best.map_or(t, |b: f64| b.min(t)));
            count += 1;
            let mut k = 0;
            loop {
                if k == n {
                    return;
                }
                pick[k] += 1;
                if pick[k] < lists[k].len() {
                    break;
                }
                pick[k] = 0;
                k += 1;
            }
        }
    };
    if free == 0 {
        let (ranges, sizes) = space.ranges_for(&[], &[]);
        visit(&ranges, &sizes);
        return best.map(|b| (b, count));
    }
    for group in partitions(free) {
        let groups = group.iter().max().map_or(0, |m| m + 1);
        for sizes in compositions(space.blocks, groups) {
            let (ranges, unit_sizes) = space.ranges_for(&group, &sizes);
            visit(&ranges, &unit_sizes);
        }
    }
    best.map(|b| (b, count))
}

/// Every way to write `total` as `parts` positive numbers in order.
pub fn compositions(total: u64, parts: usize) -> Vec<Vec<u64>> {
    if parts == 0 {
        return if total == 0 {
            vec![Vec::new()]
        } else {
            Vec::new()
        };
    }
    let mut out = Vec::new();
    for first in 1..=total {
        for mut rest in compositions(total - first, parts - 1) {
            rest.insert(0, first);
            out.push(rest);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_and_compositions_count() {
        // Bell numbers and binomials.
        assert_eq!(partitions(3).len(), 5);
        assert_eq!(partitions(5).len(), 52);
        assert_eq!(compositions(5, 2).len(), 4);
        assert_eq!(compositions(16, 5).len(), 1365);
    }
}

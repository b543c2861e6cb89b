//! The per-rank schedules: the finished graph (ops, instances, clusters) → each rank's
//! program, the order it runs its ops in and its memory along the step.

use super::*;

/// Each rank's program for `plan`'s graph, ops weighed by `seconds` (the cost model's).
pub(super) fn programs(plan: &Plan, seconds: &[f64]) -> Vec<RankProgram> {
    Graph {
        ops: &plan.ops,
        instances: &plan.instances,
        clusters: &plan.clusters,
    }
    .programs(seconds)
}

/// What the schedule reads of the plan.
struct Graph<'p> {
    ops: &'p [Op],
    instances: &'p [Instance],
    clusters: &'p [Cluster],
}

impl Graph<'_> {
    /// The order the ranks run the step's ops in, one sequence for all (each rank runs its own
    /// ops in this order, so ops that span ranks come in the same order on each of them): list
    /// scheduling on the cost model's `seconds`. Ranks that run the same ops form one timeline;
    /// again and again, the op that can start first (its dependencies done, its ranks free) is
    /// placed, ties going to (1) an op that keeps the instances a shared device holds, (2) one
    /// that spans several timelines (a transfer or weight sync that feeds other ranks: it costs
    /// its sender little and lets the receiver start), (3) the smallest bound on the step it
    /// leaves, (4) the lower op id. The bound of placing `i` before the other ready ops of its
    /// timelines is `max(tail(i), time(i) + max tail(j))`, where `tail` is the longest remaining
    /// path to the end of the step (the op's own time included): the exchange argument for two
    /// ops, which puts a short op whose path continues on other ranks (a kernel whose result is
    /// sent) before a long one that ends here, even when the long one's path is longer. So a rank
    /// sends what another waits for before its own long, unrelated work. A `verify` op is host
    /// work the rank hands to the verifier's workers and runs on from (the runtime scores on a
    /// background thread): it keeps its time on the path to what reads its results but does not
    /// hold its timelines, and among ops that could start first it goes first, so the forward
    /// passes that do not read the reward run while the verifier scores. Deterministic: no
    /// clock, no hash.
    fn schedule(&self, seconds: &[f64], world: u32) -> Vec<usize> {
        let n = self.ops.len();
        let mut timelines: BTreeMap<Vec<usize>, u32> = BTreeMap::new();
        for (rank, _) in self.uniform_ranks(world) {
            let mine: Vec<usize> = (0..n)
                .filter(|&i| self.ops[i].ranks.contains(rank))
                .collect();
            timelines.entry(mine).or_insert(rank);
        }
        let mut lines_of: Vec<Vec<usize>> = vec![Vec::new(); n];
        // The instances of each timeline's devices, when there are several (else none: nothing
        // to keep).
        let mut shared: Vec<BTreeSet<&str>> = Vec::new();
        for (t, (mine, &rank)) in timelines.iter().enumerate() {
            for &i in mine {
                lines_of[i].push(t);
            }
            let here: BTreeSet<&str> = self
                .instances
                .iter()
                .filter(|i| i.ranks.contains(rank))
                .map(|i| i.id.as_str())
                .collect();
            shared.push(if here.len() > 1 {
                here
            } else {
                BTreeSet::new()
            });
        }
        let duration = |i: usize| {
            if lines_of[i].is_empty() {
                0.0
            } else {
                seconds.get(i).copied().unwrap_or(1.0)
            }
        };
        // Dependencies come first (`levels` relies on it too), so one backward pass suffices.
        let mut tail = vec![0.0f64; n];
        for i in (0..n).rev() {
            let after = (i + 1..n)
                .filter(|&j| self.ops[j].deps.contains(&(i as u32)))
                .map(|j| tail[j])
                .fold(0.0, f64::max);
            tail[i] = duration(i) + after;
        }
        // Ops the rank hands off and runs on from.
        let overlaps = |i: usize| matches!(self.ops[i].kind, OpKind::Verify { .. });
        let mut free = vec![0.0f64; timelines.len()];
        let mut holds: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); timelines.len()];
        let mut finish: Vec<Option<f64>> = vec![None; n];
        let mut order = Vec::with_capacity(n);
        while order.len() < n {
            // The ready ops and when each could start.
            let mut ready: Vec<(usize, f64)> = Vec::new();
            for i in 0..n {
                if finish[i].is_some() {
                    continue;
                }
                let mut start = 0.0f64;
                let mut deps_done = true;
                for &d in &self.ops[i].deps {
                    match finish.get(d as usize).copied().flatten() {
                        Some(t) => start = start.max(t),
                        None => deps_done = false,
                    }
                }
                if deps_done {
                    for &t in &lines_of[i] {
                        start = start.max(free[t]);
                    }
                    ready.push((i, start));
                }
            }
            // Only ops that could start first compete; per timeline, the two longest tails
            // among them (the longest other than `i` is one of the two).
            let first = ready.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
            let mut longest: Vec<[Option<usize>; 2]> = vec![[None, None]; timelines.len()];
            for &(i, start) in &ready {
                if start > first {
                    continue;
                }
                for &t in &lines_of[i] {
                    let top = &mut longest[t];
                    if top[0].is_none_or(|a| tail[i] > tail[a]) {
                        top[1] = top[0];
                        top[0] = Some(i);
                    } else if top[1].is_none_or(|b| tail[i] > tail[b]) {
                        top[1] = Some(i);
                    }
                }
            }
            let bound = |i: usize| -> f64 {
                let others = lines_of[i]
                    .iter()
                    .filter_map(|&t| longest[t].into_iter().flatten().find(|&j| j != i))
                    .map(|j| tail[j])
                    .fold(0.0, f64::max);
                tail[i].max(duration(i) + others)
            };
            let mut best: Option<(f64, bool, u8, bool, f64, usize)> = None;
            for &(i, start) in &ready {
                let mut switch = 0u8;
                for &t in &lines_of[i] {
                    let need: Vec<&str> = self.ops[i]
                        .uses
                        .iter()
                        .map(String::as_str)
                        .filter(|u| shared[t].contains(u))
                        .collect();
                    if !need.is_empty() && !need.iter().all(|u| holds[t].contains(u)) {
                        switch = 1;
                    }
                }
                let key = (
                    start,
                    !overlaps(i),
                    switch,
                    lines_of[i].len() <= 1,
                    bound(i),
                    i,
                );
                let better = best.is_none_or(|b| {
                    key.0
                        .total_cmp(&b.0)
                        .then(key.1.cmp(&b.1))
                        .then(key.2.cmp(&b.2))
                        .then(key.3.cmp(&b.3))
                        .then(key.4.total_cmp(&b.4))
                        .then(key.5.cmp(&b.5))
                        .is_lt()
                });
                if better {
                    best = Some(key);
                }
            }
            // Dependencies always point to earlier ops, so some op is always ready.
            let Some((start, _, _, _, _, i)) = best else {
                break;
            };
            let end = start + duration(i);
            finish[i] = Some(end);
            for &t in &lines_of[i] {
                free[t] = if overlaps(i) { start } else { end };
                let need: BTreeSet<&str> = self.ops[i]
                    .uses
                    .iter()
                    .map(String::as_str)
                    .filter(|u| shared[t].contains(u))
                    .collect();
                if !need.is_empty() {
                    holds[t] = need;
                }
            }
            order.push(i);
        }
        order
    }

    /// The ranks `0..world` cut where any op's, instance's or cluster's ranks start or end:
    /// `(first, end)` runs whose ranks all run the same ops on the same instances of the same
    /// cluster, so per-rank work is per run (a cluster of millions of idle devices is one run).
    fn uniform_ranks(&self, world: u32) -> Vec<(u32, u32)> {
        let sets = self
            .ops
            .iter()
            .map(|o| &o.ranks)
            .chain(self.instances.iter().map(|i| &i.ranks))
            .chain(self.clusters.iter().map(|c| &c.ranks));
        let mut cuts: BTreeSet<u32> = [0, world].into();
        for set in sets {
            for &(a, b) in set.ranges() {
                cuts.extend([a.min(world), b.min(world)]);
            }
        }
        let cuts: Vec<u32> = cuts.into_iter().collect();
        cuts.windows(2).map(|w| (w[0], w[1])).collect()
    }

    fn programs(&self, seconds: &[f64]) -> Vec<RankProgram> {
        let world = self.clusters.last().map_or(0, |c| c.ranks.end());
        let order: Vec<&Op> = self
            .schedule(seconds, world)
            .into_iter()
            .map(|i| &self.ops[i])
            .collect();
        // Weights and training state per device of each instance.
        let sizes: BTreeMap<&str, (u64, u64)> = self
            .instances
            .iter()
            .map(|i| (i.id.as_str(), crate::cost::plan_ops::instance_state(i)))
            .collect();
        let held = |id: &str, part: Part| -> u64 {
            let (w, t) = sizes.get(id).copied().unwrap_or((0, 0));
            if part == Part::All { w + t } else { w }
        };
        let level = |id: &str, want: Part| -> Part {
            if want == Part::All && sizes.get(id).is_some_and(|s| s.1 > 0) {
                Part::All
            } else {
                Part::Weights
            }
        };
        type Key = (Vec<(String, Part)>, Vec<Step>, u64, u64, bool);
        let mut grouped: BTreeMap<Key, Vec<(u32, u32)>> = BTreeMap::new();
        for (rank, end) in self.uniform_ranks(world) {
            let ops: Vec<&Op> = order
                .iter()
                .copied()
                .filter(|o| o.ranks.contains(rank))
                .collect();
            let here: Vec<&Instance> = self
                .instances
                .iter()
                .filter(|i| i.ranks.contains(rank))
                .collect();
            let here_ids: BTreeSet<&str> = here.iter().map(|i| i.id.as_str()).collect();
            let share = here.len() > 1;
            let capacity = self
                .clusters
                .iter()
                .find(|c| c.ranks.contains(rank))
                .map_or(0, |c| c.memory);
            let lower_bound = here
                .iter()
                .any(|i| i.memory.values().any(|m| m.lower_bound));
            let simulate =
                |start: &BTreeMap<String, Part>| -> (BTreeMap<String, Part>, Vec<Step>, u64) {
                    let mut resident = start.clone();
                    let mut steps = Vec::new();
                    let mut peak = 0u64;
                    let sum = |res: &BTreeMap<String, Part>| {
                        res.iter().map(|(r, p)| held(r, *p)).sum::<u64>()
                    };
                    let need_of = |op: &Op| -> BTreeMap<String, Part> {
                        let want = if matches!(op.kind, OpKind::Update { .. }) {
                            Part::All
                        } else {
                            Part::Weights
                        };
                        op.uses
                            .iter()
                            .filter(|u| here_ids.contains(u.as_str()))
                            .map(|u| (u.clone(), level(u, want)))
                            .collect()
                    };
                    // In the schedule's order (which already prefers what the device holds).
                    for op in ops.iter().copied() {
                        let need = need_of(op);
                        if share && !need.is_empty() {
                            for (r, _) in resident.clone() {
                                if !need.contains_key(&r) {
                                    resident.remove(&r);
                                    steps.push(Step::Offload {
                                        instance: r,
                                        part: Part::All,
                                        bytes: sum(&resident),
                                    });
                                }
                            }
                            // Offloads first (they free memory), then onloads.
                            let mut moves: Vec<(bool, &String, Part)> = need
                                .iter()
                                .map(|(n, &w)| (resident.get(n).is_none_or(|&c| c < w), n, w))
                                .collect();
                            moves.sort_by_key(|(onload, n, _)| (*onload, (*n).clone()));
                            for (_, n, want) in moves {
                                let step = match (resident.get(n).copied(), want) {
                                    (None, w) => Some((true, w)),
                                    (Some(Part::Weights), Part::All) => {
                                        Some((true, Part::TrainingState))
                                    }
                                    (Some(Part::All), Part::Weights) => {
                                        Some((false, Part::TrainingState))
                                    }
                                    _ => None,
                                };
                                if let Some((onload, part)) = step {
                                    resident.insert(n.clone(), want);
                                    let bytes = sum(&resident);
                                    peak = peak.max(bytes);
                                    steps.push(if onload {
                                        Step::Onload {
                                            instance: n.clone(),
                                            part,
                                            bytes,
                                        }
                                    } else {
                                        Step::Offload {
                                            instance: n.clone(),
                                            part,
                                            bytes,
                                        }
                                    });
                                }
                            }
                        }
                        let bytes = sum(&resident) + self.transient(op, &resident, &held);
                        peak = peak.max(bytes);
                        steps.push(Step::Run { op: op.id, bytes });
                    }
                    (resident, steps, peak)
                };
            let start: BTreeMap<String, Part> = if share {
                // The steady state: what a step leaves is what the next one starts with.
                let mut start = simulate(&BTreeMap::new()).0;
                for _ in 0..4 {
                    let end = simulate(&start).0;
                    if end == start {
                        break;
                    }
                    start = end;
                }
                start
            } else {
                here_ids
                    .iter()
                    .map(|id| (id.to_string(), level(id, Part::All)))
                    .collect()
            };
            let (_, steps, peak) = simulate(&start);
            grouped
                .entry((
                    start.into_iter().collect(),
                    steps,
                    peak,
                    capacity,
                    lower_bound,
                ))
                .or_default()
                .push((rank, end));
        }
        let mut programs: Vec<RankProgram> = grouped
            .into_iter()
            .map(
                |((resident, steps, peak, capacity, lower_bound), ranks)| RankProgram {
                    ranks: RankSet::from_ranges(ranks),
                    resident: resident.into_iter().collect(),
                    steps,
                    peak,
                    capacity,
                    lower_bound,
                },
            )
            .collect();
        programs.sort_by_key(|p| p.ranks.nth(0));
        programs
    }

    /// Bytes an op needs beyond the resident state: the phase's activations / KV cache, and the
    /// part of its phase's state the resident state does not cover (an FSDP-gathered layer).
    fn transient(
        &self,
        op: &Op,
        resident: &BTreeMap<String, Part>,
        held: &dyn Fn(&str, Part) -> u64,
    ) -> u64 {
        let phase = match &op.kind {
            OpKind::Generate { .. } => crate::model::Phase::Generate,
            OpKind::Logprobs { .. } => crate::model::Phase::Logprobs,
            OpKind::Values { .. } => crate::model::Phase::Values,
            OpKind::Score { .. } => crate::model::Phase::Score,
            OpKind::Update { .. } => crate::model::Phase::Train,
            _ => return 0,
        };
        let Some(inst) = op
            .instance
            .as_deref()
            .and_then(|id| self.instances.iter().find(|i| i.id == id))
        else {
            return 0;
        };
        let Some(m) = inst.memory.get(&phase) else {
            return 0;
        };
        let have = resident.get(&inst.id).map_or(0, |p| held(&inst.id, *p));
        m.state().saturating_sub(have) + m.transient()
    }
}

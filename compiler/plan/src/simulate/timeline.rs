//! One step of a plan, simulated: start and end of every op and offload/onload on every lane.

use crate::cost::PlanCosts;
use crate::model::{OpKind, Plan, RankSet, Step};
use std::collections::BTreeMap;

/// The prefix of the keys under which `rlc run` writes, in each step's `metrics.jsonl` line, the
/// wall seconds rank 0 spent in the ops of each [`BarKind`] (`time/generate`, `time/forward`,
/// `time/train`, `time/kernel`, `time/transfer`, `time/other`): what `rlc plan --calibrate` fits
/// the cost model's parameters to.
pub const TIME_KEY_PREFIX: &str = "time/";

/// What a bar of the chart stands for (its colour).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BarKind {
    /// Generation.
    Generate,
    /// Forward passes: log-probs, values, scores.
    Forward,
    /// Training (`update`).
    Train,
    /// The pipeline's own functions.
    Kernel,
    /// Transfers and weight syncs between layouts.
    Communication,
    /// Offload and onload between device and host.
    Offload,
    /// Sampling, logging, checkpoints.
    Other,
}

impl BarKind {
    pub const ALL: [BarKind; 7] = [
        BarKind::Generate,
        BarKind::Forward,
        BarKind::Train,
        BarKind::Kernel,
        BarKind::Communication,
        BarKind::Offload,
        BarKind::Other,
    ];

    pub fn of(kind: &OpKind) -> BarKind {
        match kind {
            OpKind::Generate { .. } => BarKind::Generate,
            OpKind::Logprobs { .. } | OpKind::Values { .. } | OpKind::Score { .. } => {
                BarKind::Forward
            }
            OpKind::Update { .. } => BarKind::Train,
            OpKind::Kernel { .. } => BarKind::Kernel,
            OpKind::Transfer { .. } | OpKind::WeightSync { .. } => BarKind::Communication,
            // Host work: the verifier's workers run beside the devices.
            OpKind::Sample { .. }
            | OpKind::Verify { .. }
            | OpKind::Checkpoint { .. }
            | OpKind::Log { .. } => BarKind::Other,
        }
    }

    /// The `metrics.jsonl` key of the seconds a run spent in ops of this kind in a step
    /// (`time/generate`, …; see [`TIME_KEY_PREFIX`]).
    pub fn time_key(self) -> String {
        format!("{TIME_KEY_PREFIX}{}", self.label())
    }

    /// The kind a `metrics.jsonl` timing key names.
    pub fn of_time_key(key: &str) -> Option<BarKind> {
        let label = key.strip_prefix(TIME_KEY_PREFIX)?;
        BarKind::ALL.into_iter().find(|k| k.label() == label)
    }

    pub fn label(self) -> &'static str {
        match self {
            BarKind::Generate => "generate",
            BarKind::Forward => "forward",
            BarKind::Train => "train",
            BarKind::Kernel => "kernel",
            BarKind::Communication => "transfer",
            BarKind::Offload => "offload",
            BarKind::Other => "other",
        }
    }
}

/// One interval of a lane.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub start: f64,
    pub end: f64,
    pub label: String,
    pub kind: BarKind,
}

/// The ranks that run one program, and what they do during the step.
#[derive(Clone, Debug, PartialEq)]
pub struct Lane {
    pub ranks: RankSet,
    pub bars: Vec<Bar>,
}

impl Lane {
    /// Seconds some bar occupies the lane.
    pub fn busy(&self) -> f64 {
        self.bars.iter().map(|b| b.end - b.start).sum()
    }
}

/// One simulated step.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub lanes: Vec<Lane>,
    /// When the last bar ends.
    pub step_seconds: f64,
    /// Some duration counted an unknown size as 0.
    pub lower_bound: bool,
}

impl Timeline {
    /// Busy fraction of each lane's step.
    pub fn utilisation(&self) -> Vec<f64> {
        self.lanes
            .iter()
            .map(|l| {
                if self.step_seconds > 0.0 {
                    l.busy() / self.step_seconds
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// What the runtime's `time/…` keys measure on `rank`: the wall seconds of its lane by kind
    /// of op, each bar with the wait before it (a rank inside a collective waits for the others
    /// to reach it). Empty when no lane holds `rank`.
    pub fn lane_seconds_by_kind(&self, rank: u32) -> BTreeMap<BarKind, f64> {
        let mut by_kind = BTreeMap::new();
        let Some(lane) = self.lanes.iter().find(|l| l.ranks.contains(rank)) else {
            return by_kind;
        };
        let mut bars: Vec<&Bar> = lane.bars.iter().collect();
        bars.sort_by(|a, b| a.start.total_cmp(&b.start).then(a.end.total_cmp(&b.end)));
        let mut previous = 0.0f64;
        for bar in bars {
            *by_kind.entry(bar.kind).or_insert(0.0) += bar.end - previous.min(bar.start);
            previous = previous.max(bar.end);
        }
        by_kind
    }

    /// The utilisation of all devices together (each lane weighted by its ranks).
    pub fn mean_utilisation(&self) -> f64 {
        let (mut busy, mut devices) = (0.0, 0.0);
        for (lane, u) in self.lanes.iter().zip(self.utilisation()) {
            busy += u * f64::from(lane.ranks.len());
            devices += f64::from(lane.ranks.len());
        }
        if devices > 0.0 { busy / devices } else { 0.0 }
    }
}

/// The lanes that generate ahead of training: those a weight sync with a `lag` reaches (and
/// that do not train). In the steady state of such a plan the generator works on step `k + 1`
/// while training works on step `k`, so a simulated step lets each side run: training does not
/// wait for what the generator made (it was made during the step before), and the ops between
/// the two sides (the rollout's transfers, the late weights) do not make them meet.
struct Ahead {
    /// By lane.
    lanes: Vec<bool>,
    /// By op: it runs on lanes of both sides.
    crosses: Vec<bool>,
    /// By op: it runs only on generating lanes.
    only_ahead: Vec<bool>,
    /// By op: a partial rollout (`pause_at`) pauses after this fraction of its work to take
    /// the weights of this sync; with a lag of one step it waits there for the training side's
    /// update of the same simulated step (with more, that update left steps before).
    pauses: Vec<Option<(usize, f64, bool)>>,
}

impl Ahead {
    fn of(plan: &Plan, lanes_of: &[Vec<usize>]) -> Ahead {
        let lanes_in = |id: &str| -> Vec<usize> {
            let Some(instance) = plan.instance(id) else {
                return Vec::new();
            };
            plan.programs
                .iter()
                .enumerate()
                .filter(|(_, p)| p.ranks.intersects(&instance.ranks))
                .map(|(li, _)| li)
                .collect()
        };
        let mut lanes = vec![false; plan.programs.len()];
        for op in &plan.ops {
            if let OpKind::WeightSync { from, to, lag, .. } = &op.kind
                && *lag > 0
            {
                let sources = lanes_in(from);
                for li in lanes_in(to) {
                    if !sources.contains(&li) {
                        lanes[li] = true;
                    }
                }
            }
        }
        let side = |op: usize| -> (bool, bool) {
            let on = &lanes_of[op];
            (on.iter().any(|&l| lanes[l]), on.iter().any(|&l| !lanes[l]))
        };
        let crosses = (0..plan.ops.len())
            .map(|op| side(op) == (true, true))
            .collect();
        let only_ahead = (0..plan.ops.len())
            .map(|op| side(op) == (true, false))
            .collect();
        let pauses = plan
            .ops
            .iter()
            .map(|op| {
                let OpKind::Generate {
                    pause_at: Some(at),
                    max_new: Some(max_new),
                    ..
                } = &op.kind
                else {
                    return None;
                };
                let instance = op.instance.as_deref()?;
                let (sync, lag) = plan
                    .ops
                    .iter()
                    .enumerate()
                    .find_map(|(i, o)| match &o.kind {
                        OpKind::WeightSync { to, lag, .. } if to == instance && *lag > 0 => {
                            Some((i, *lag))
                        }
                        _ => None,
                    })?;
                Some((sync, *at as f64 / (*max_new).max(1) as f64, lag == 1))
            })
            .collect();
        Ahead {
            lanes,
            crosses,
            only_ahead,
            pauses,
        }
    }

    /// Whether op `d`'s result comes from the generating side.
    fn made(&self, d: usize) -> bool {
        self.only_ahead.get(d).copied().unwrap_or(false)
            || self.crosses.get(d).copied().unwrap_or(false)
    }
}

/// Simulates one step in which an op with `every: Some(e)` runs when `fires(e)` says so.
pub fn simulate_step(
    plan: &Plan,
    costs: &PlanCosts,
    fires: &dyn Fn(u64) -> bool,
) -> Result<Timeline, String> {
    let programs = &plan.programs;
    let mut lanes_of: Vec<Vec<usize>> = vec![Vec::new(); plan.ops.len()];
    for (li, p) in programs.iter().enumerate() {
        for s in &p.steps {
            if let Step::Run { op, .. } = s
                && let Some(l) = lanes_of.get_mut(*op as usize)
            {
                l.push(li);
            }
        }
    }
    let runs = |op: usize| plan.ops[op].every.is_none_or(fires);
    let ahead = Ahead::of(plan, &lanes_of);
    let mut lanes: Vec<Lane> = programs
        .iter()
        .map(|p| Lane {
            ranks: p.ranks.clone(),
            bars: Vec::new(),
        })
        .collect();
    // Each lane's steps, in its program's order, except that ops of one level have no order
    // between them: when lanes reach a level's multi-lane ops in different orders, the stalled
    // lanes take the op the others wait at first (see the end of the loop).
    let mut steps: Vec<Vec<Step>> = programs.iter().map(|p| p.steps.clone()).collect();
    let mut pos = vec![0usize; programs.len()];
    let mut time = vec![0.0f64; programs.len()];
    let mut waiting: Vec<Option<usize>> = vec![None; programs.len()];
    let mut arrived = vec![0usize; plan.ops.len()];
    let mut ready = vec![0.0f64; plan.ops.len()];
    let mut finish: Vec<Option<f64>> = vec![None; plan.ops.len()];
    // When the training side finished each op (what a paused generation waits for).
    let mut training_finish: Vec<Option<f64>> = vec![None; plan.ops.len()];
    // Ops no program runs finish as soon as their dependencies have.
    for (i, op) in plan.ops.iter().enumerate() {
        if lanes_of[i].is_empty() {
            let t = op
                .deps
                .iter()
                .filter_map(|&d| finish.get(d as usize).copied().flatten())
                .fold(0.0, f64::max);
            finish[i] = Some(t);
        }
    }
    loop {
        let mut progressed = false;
        for li in 0..programs.len() {
            while let Some(step) = steps[li].get(pos[li]) {
                match step {
                    Step::Offload { instance, .. } | Step::Onload { instance, .. } => {
                        let d = costs.step_seconds(plan, step);
                        let verb = if matches!(step, Step::Offload { .. }) {
                            "offload"
                        } else {
                            "onload"
                        };
                        if d > 0.0 {
                            lanes[li].bars.push(Bar {
                                start: time[li],
                                end: time[li] + d,
                                label: format!("{verb} {instance}"),
                                kind: BarKind::Offload,
                            });
                        }
                        time[li] += d;
                        pos[li] += 1;
                        progressed = true;
                    }
                    Step::Run { op, .. } => {
                        let op = *op as usize;
                        if waiting[li] != Some(op) {
                            waiting[li] = Some(op);
                            arrived[op] += 1;
                            ready[op] = ready[op].max(time[li]);
                            progressed = true;
                        }
                        // An op between lanes a generator ahead of training and training take part
                        // in (the rollout sent, the weights a step late) does not join them.
                        let alone = ahead.crosses[op];
                        if !alone && arrived[op] < lanes_of[op].len() {
                            break;
                        }
                        let mut start = if alone { time[li] } else { ready[op] };
                        let mut deps_done = true;
                        for &d in &plan.ops[op].deps {
                            // What one side made for the other, it made a step (or `lag` steps)
                            // before the other reads it.
                            let made_ahead = ahead.made(d as usize);
                            if (!ahead.lanes[li] && made_ahead)
                                || (ahead.lanes[li] && alone && !made_ahead)
                            {
                                continue;
                            }
                            match finish.get(d as usize).copied().flatten() {
                                Some(t) => start = start.max(t),
                                None => deps_done = false,
                            }
                        }
                        if !deps_done {
                            break;
                        }
                        let d = if runs(op) { costs.op_seconds[op] } else { 0.0 };
                        let mut end = start + d;
                        // A partial rollout: the tokens before the pause, then a wait for the
                        // weights training makes meanwhile, then the rest.
                        let mut paused = None;
                        if let (true, Some((sync, fraction, waits))) =
                            (ahead.lanes[li], ahead.pauses[op])
                            && d > 0.0
                        {
                            let weights = match training_finish[sync] {
                                Some(t) if waits => t,
                                None if waits => break,
                                _ => 0.0,
                            };
                            let pause = start + fraction * d;
                            let resume = pause.max(weights);
                            end = resume + (1.0 - fraction) * d;
                            paused = Some((pause, resume));
                        }
                        // Run by each side on its own, it ends when the later one is done.
                        finish[op] = Some(match finish[op] {
                            Some(f) if alone => f.max(end),
                            _ => end,
                        });
                        // A rank hands a verify op to the verifier's workers and runs on
                        // (`docs/verifiers.md#overlap`): what reads its results waits for its
                        // end; the lane, busy with other ops meanwhile, does not.
                        let handed_off = matches!(plan.ops[op].kind, OpKind::Verify { .. });
                        let these: Vec<usize> = if alone {
                            vec![li]
                        } else {
                            lanes_of[op].clone()
                        };
                        if !ahead.lanes[li] {
                            training_finish[op] = Some(end);
                        }
                        for &lj in &these {
                            let label = &plan.ops[op].label;
                            let kind = BarKind::of(&plan.ops[op].kind);
                            if let Some((pause, resume)) = paused {
                                lanes[lj].bars.push(Bar {
                                    start,
                                    end: pause,
                                    label: format!("{label} (to the pause)"),
                                    kind,
                                });
                                lanes[lj].bars.push(Bar {
                                    start: resume,
                                    end,
                                    label: format!("{label} (after the pause)"),
                                    kind,
                                });
                            } else if d > 0.0 && !handed_off {
                                lanes[lj].bars.push(Bar {
                                    start,
                                    end,
                                    label: label.clone(),
                                    kind,
                                });
                            }
                            time[lj] = if handed_off { start } else { end };
                            pos[lj] += 1;
                            waiting[lj] = None;
                        }
                        progressed = true;
                    }
                }
            }
        }
        if pos.iter().zip(&steps).all(|(&p, s)| p == s.len()) {
            break;
        }
        if !progressed {
            let deps_done = |op: usize| {
                plan.ops[op]
                    .deps
                    .iter()
                    .all(|&d| finish.get(d as usize).copied().flatten().is_some())
            };
            let unblock = waiting
                .iter()
                .flatten()
                .copied()
                .filter(|&op| deps_done(op))
                .min();
            if let Some(op) = unblock {
                let level = plan.ops[op].level;
                let mut moved = false;
                for &lj in &lanes_of[op] {
                    if waiting[lj] == Some(op) {
                        continue;
                    }
                    let later = steps[lj][pos[lj]..]
                        .iter()
                        .position(|s| matches!(s, Step::Run { op: x, .. } if *x as usize == op));
                    let same_level = waiting[lj].is_none_or(|w| plan.ops[w].level == level);
                    if let (Some(at), true) = (later, same_level) {
                        let step = steps[lj].remove(pos[lj] + at);
                        steps[lj].insert(pos[lj], step);
                        if let Some(w) = waiting[lj].take() {
                            arrived[w] -= 1;
                        }
                        moved = true;
                    }
                }
                if moved {
                    continue;
                }
            }
            let stuck: Vec<String> = (0..programs.len())
                .filter_map(|li| {
                    let op = waiting[li]?;
                    Some(format!("ranks {} wait at op {op}", programs[li].ranks))
                })
                .collect();
            return Err(format!(
                "the rank programs wait on each other: {}",
                stuck.join("; ")
            ));
        }
    }
    let step_seconds = time.iter().copied().fold(0.0, f64::max);
    Ok(Timeline {
        lanes,
        step_seconds,
        lower_bound: costs.lower_bound,
    })
}

/// `N` steps: step `i` runs the ops whose `every` divides `i + 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct Forecast {
    pub steps: u64,
    pub seconds: f64,
    pub device_hours: f64,
}

/// Simulates each distinct kind of step once (which `every` ops fire) and adds them up.
pub fn forecast(plan: &Plan, costs: &PlanCosts, steps: u64) -> Result<Forecast, String> {
    let mut everies: Vec<u64> = plan.ops.iter().filter_map(|o| o.every).collect();
    everies.sort_unstable();
    everies.dedup();
    let everies: Vec<u64> = everies.into_iter().filter(|&e| e > 0).collect();
    // How many steps fire exactly each subset of `everies` (a bit mask): the pattern repeats
    // every lcm(everies) steps, so one period is walked and multiplied.
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut period: u64 = 1;
    for &e in &everies {
        period = period / gcd(period, e) * e;
        if period > 10_000_000 || everies.len() > 16 {
            return Err(format!(
                "checkpoint periods {everies:?} repeat only every {period} steps or more: too many kinds of step to simulate"
            ));
        }
    }
    let mask_of = |i: u64| {
        everies
            .iter()
            .enumerate()
            .filter(|(_, e)| i.is_multiple_of(**e))
            .fold(0u64, |m, (b, _)| m | (1 << b))
    };
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    let (whole, rest) = (steps / period, steps % period);
    for i in 1..=period.min(steps.max(1)) {
        let n = whole + u64::from(i <= rest);
        if n > 0 {
            *counts.entry(mask_of(i)).or_default() += n;
        }
    }
    let mut seconds = 0.0;
    for (&mask, &n) in &counts {
        let fires = |e: u64| {
            everies
                .iter()
                .position(|&x| x == e)
                .is_some_and(|b| mask & (1 << b) != 0)
        };
        seconds += n as f64 * simulate_step(plan, costs, &fires)?.step_seconds;
    }
    Ok(Forecast {
        steps,
        seconds,
        device_hours: seconds * f64::from(plan.world_size) / 3600.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan of one op that runs every `every` steps, lasting 1 s, and one that always runs,
    /// lasting 2 s, on one rank.
    fn plan(every: u64) -> (Plan, PlanCosts) {
        let text = format!(
            r#"{{"version":2,"pipeline":"p","steps":null,"world_size":1,
"clusters":[{{"name":"c","ranks":"0","nodes":1,"devices_per_node":1,"device":"cpu","is_cpu":true,"memory":1,"intra_bandwidth":1.0,"inter_bandwidth":1.0,"flops":1.0,"memory_bandwidth":1.0}}],
"roles":[],"datasets":[],"instances":[],"values":[],
"ops":[{{"id":0,"label":"log","kind":{{"op":"log","fields":[]}},"instance":null,"ranks":"0","uses":[],"inputs":[],"outputs":[],"deps":[],"level":0,"every":null}},
{{"id":1,"label":"save","kind":{{"op":"log","fields":[]}},"instance":null,"ranks":"0","uses":[],"inputs":[],"outputs":[],"deps":[0],"level":1,"every":{every}}}],
"edges":[],
"programs":[{{"ranks":"0","resident":{{}},"steps":[{{"do":"run","op":0,"bytes":0}},{{"do":"run","op":1,"bytes":0}}],"peak":0,"capacity":1,"lower_bound":false}}]}}"#
        );
        let plan: Plan = serde_json::from_str(&text).unwrap();
        let costs = PlanCosts {
            op_seconds: vec![2.0, 1.0],
            lower_bound: false,
            host_bandwidth: 1.0,
        };
        (plan, costs)
    }

    #[test]
    fn a_forecast_counts_the_steps_that_run_each_op() {
        let (plan, costs) = plan(100);
        let f = forecast(&plan, &costs, 1000).unwrap();
        // 1000 steps of 2 s, 10 of them with the 1 s op.
        assert_eq!(f.seconds, 2010.0);
        assert_eq!(f.device_hours, 2010.0 / 3600.0);
        let f = forecast(&plan, &costs, 1_000_000_007).unwrap();
        assert_eq!(f.seconds, 2.0 * 1_000_000_007.0 + 10_000_000.0);
    }

    #[test]
    fn a_step_is_the_ops_one_after_another() {
        let (plan, costs) = plan(1);
        let t = simulate_step(&plan, &costs, &|_| true).unwrap();
        assert_eq!(t.step_seconds, 3.0);
        assert_eq!(t.utilisation(), vec![1.0]);
        let t = simulate_step(&plan, &costs, &|_| false).unwrap();
        assert_eq!(t.step_seconds, 2.0);
    }
}

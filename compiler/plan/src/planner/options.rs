//! The layouts a unit may take on a number of devices: every `tp` (within a node), `pp`,
//! `dp`-or-`fsdp` split and micro-batch that passes the checker's arithmetic rules and fits the
//! device memory (the memory check's own estimate), each costed by the cost model. Only the
//! Pareto-optimal ones are kept: a layout no faster on any call and no lighter to offload than
//! another can never make a better step.

use super::units::{Job, Unit};
use crate::cost::{CostParams, Hardware, PhaseWork, Placed, work};
use crate::model::Layout;
use rlc_check::checks::memory;
use rlc_check::program::{self as prog, Phase, Program, Sourced};

/// One feasible layout of a unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub layout: Layout,
    /// Seconds of each of the unit's calls, in the job's call order.
    pub seconds: Vec<f64>,
    /// Bytes per device of the unit's model state: what a colocation switch offloads.
    pub state_bytes: f64,
    /// The largest per-device memory estimate over its calls.
    pub peak_bytes: f64,
}

/// Why layouts were turned down (for the report).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rejections {
    /// Layouts whose memory estimate exceeds the device.
    pub memory: u32,
    /// Layouts the arithmetic rules refuse (batch, heads, layers).
    pub arithmetic: u32,
    /// The smallest memory estimate seen among the refused for memory.
    pub least_memory: Option<f64>,
}

fn sourced(v: u64) -> Option<Sourced<u64>> {
    Some(Sourced {
        value: v,
        origin: prog::Origin::default(),
    })
}

/// The checker's layout for a plan layout (for the memory estimate).
pub fn check_layout(l: &Layout) -> prog::Layout {
    prog::Layout {
        dp: sourced(u64::from(l.dp)),
        tp: sourced(u64::from(l.tp)),
        pp: sourced(u64::from(l.pp)),
        fsdp: sourced(u64::from(l.fsdp)),
        sp: sourced(u64::from(l.sp)),
        micro: l.micro.and_then(sourced),
    }
}

fn powers_of_two(max: u64) -> impl Iterator<Item = u64> {
    (0..20).map(|i| 1u64 << i).take_while(move |&p| p <= max)
}

/// Every candidate layout on `devices` devices (arithmetic rules not yet applied).
fn candidates(unit: &Unit, arch: &prog::Arch, devices: u64, per_node: u64) -> Vec<Layout> {
    let mut out = Vec::new();
    let shards_data = unit.phase != Some(Phase::Generate);
    for tp in powers_of_two(per_node.min(devices)) {
        if !devices.is_multiple_of(tp) {
            continue;
        }
        for pp in powers_of_two(devices / tp) {
            if !devices.is_multiple_of(tp * pp) || pp > arch.layers {
                continue;
            }
            let ranks = (devices / (tp * pp)) as u32;
            let mut splits = vec![(ranks, 1)];
            if shards_data && ranks > 1 {
                splits.push((1, ranks));
            }
            for (dp, fsdp) in splits {
                for micro in std::iter::once(None).chain(powers_of_two(64).map(Some)) {
                    out.push(Layout {
                        dp,
                        fsdp,
                        tp: tp as u32,
                        pp: pp as u32,
                        sp: 1,
                        micro,
                    });
                }
            }
        }
    }
    out
}

/// The checker's placement and batch rules for one layout and the unit's calls.
fn arithmetic_ok(arch: &prog::Arch, layout: &Layout, works: &[(Phase, PhaseWork)]) -> bool {
    let (tp, pp) = (u64::from(layout.tp), u64::from(layout.pp));
    if !arch.heads.is_multiple_of(tp)
        || !arch.vocab.is_multiple_of(tp)
        || !(arch.kv_heads.is_multiple_of(tp) || tp % arch.kv_heads.max(1) == 0)
        || !arch.layers.is_multiple_of(pp)
    {
        return false;
    }
    let ranks = f64::from(layout.data_ranks());
    let divides = |n: f64, d: f64| n <= 0.0 || (n / d).fract() == 0.0;
    let micro = layout.micro.map(|m| m as f64);
    let mut micro_used = false;
    for (phase, w) in works {
        let per_rank = match *w {
            PhaseWork::Generate { batch, .. } => {
                if !divides(batch, ranks) {
                    return false;
                }
                None
            }
            PhaseWork::Forward { batch, .. } => {
                if !divides(batch, ranks) {
                    return false;
                }
                Some(batch / ranks)
            }
            PhaseWork::Update {
                batch, minibatch, ..
            } => {
                if !divides(batch, ranks) || !divides(minibatch, ranks) {
                    return false;
                }
                Some(minibatch / ranks)
            }
        };
        if let (Some(m), Some(n)) = (micro, per_rank)
            && *phase != Phase::Generate
        {
            micro_used = true;
            if n > 0.0 && (m > n || !divides(n, m)) {
                return false;
            }
        }
    }
    // A micro-batch on a unit that never splits one is the same layout as none.
    micro.is_none() || micro_used
}

/// Keeps the layouts no other beats on every call and on the state it offloads.
fn pareto(mut choices: Vec<Choice>) -> Vec<Choice> {
    let key = |c: &Choice| c.seconds.iter().sum::<f64>();
    choices.sort_by(|a, b| {
        key(a)
            .total_cmp(&key(b))
            .then(a.state_bytes.total_cmp(&b.state_bytes))
    });
    let mut kept: Vec<Choice> = Vec::new();
    for c in choices {
        let dominated = kept.iter().any(|k| {
            k.state_bytes <= c.state_bytes && k.seconds.iter().zip(&c.seconds).all(|(a, b)| a <= b)
        });
        if !dominated {
            kept.push(c);
        }
    }
    kept
}

/// The feasible layouts of unit `u` on `devices` devices; `all` keeps the dominated ones too
/// (the brute-force check enumerates them).
pub fn choices(
    job: &Job,
    program: &Program,
    u: usize,
    hw: &Hardware,
    devices: u64,
    params: &CostParams,
    all: bool,
) -> (Vec<Choice>, Rejections) {
    let unit = &job.units[u];
    let model = &program.models[unit.model];
    let mut rejections = Rejections::default();
    let Some(arch) = model.arch.as_ref() else {
        return (Vec::new(), rejections);
    };
    let pipeline = program.pipeline.as_ref().expect("a job has a pipeline");
    let calls: Vec<_> = job.calls.iter().filter(|c| c.unit == u).collect();
    let works: Vec<(Phase, PhaseWork)> = calls.iter().map(|c| (c.phase, c.work)).collect();
    let mut out = Vec::new();
    for layout in candidates(unit, arch, devices, hw.devices_per_node) {
        if !arithmetic_ok(arch, &layout, &works) {
            rejections.arithmetic += 1;
            continue;
        }
        let cl = check_layout(&layout);
        let mut peak: f64 = 0.0;
        let mut state: f64 = 0.0;
        for c in &calls {
            let b = memory::breakdown(model, arch, c.phase, &cl, &pipeline.calls[c.call]);
            peak = peak.max(b.total());
            state = state.max(b.model_state());
        }
        if peak > hw.memory {
            rejections.memory += 1;
            rejections.least_memory = Some(rejections.least_memory.map_or(peak, |m| m.min(peak)));
            continue;
        }
        let placed = Placed::aligned(*hw, layout);
        let seconds = calls
            .iter()
            .map(|c| work::seconds(params, &unit.shape, &placed, &c.work) + params.op_overhead)
            .collect();
        out.push(Choice {
            layout,
            seconds,
            state_bytes: state,
            peak_bytes: peak,
        });
    }
    if !all {
        out = pareto(out);
    }
    (out, rejections)
}

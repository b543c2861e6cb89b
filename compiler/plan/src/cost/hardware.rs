//! What the cost model reads of a cluster: a view of the plan's [`Cluster`] (whose numbers come
//! from the program's `device(…)`, usually a `std.hardware` preset).

use super::CostParams;
use crate::model::{Axis, Cluster, Instance, Layout};

/// One device kind and the links between devices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hardware {
    /// Peak dense FLOP/s per device.
    pub flops: f64,
    /// Memory bandwidth per device, bytes/s.
    pub memory_bandwidth: f64,
    /// Bytes of memory per device.
    pub memory: f64,
    pub intra_bandwidth: f64,
    pub inter_bandwidth: f64,
    pub devices_per_node: u64,
}

impl Hardware {
    /// `None` when the plan does not carry the device's speed (a plan file from before the
    /// `flops` and `memory_bandwidth` fields).
    pub fn of(cluster: &Cluster) -> Option<Hardware> {
        (cluster.flops > 0.0 && cluster.memory_bandwidth > 0.0).then_some(Hardware {
            flops: cluster.flops,
            memory_bandwidth: cluster.memory_bandwidth,
            memory: cluster.memory as f64,
            intra_bandwidth: cluster.intra_bandwidth,
            inter_bandwidth: cluster.inter_bandwidth,
            devices_per_node: cluster.devices_per_node.max(1),
        })
    }

    /// The link between devices of one node or of different nodes.
    pub fn link(&self, inter_node: bool, params: &CostParams) -> Link {
        if inter_node {
            Link {
                latency: params.inter_latency,
                bandwidth: self.inter_bandwidth * params.link_efficiency,
            }
        } else {
            Link {
                latency: params.intra_latency,
                bandwidth: self.intra_bandwidth * params.link_efficiency,
            }
        }
    }
}

/// α (seconds per message) and β⁻¹ (bytes/s) of a link, efficiency applied.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub latency: f64,
    pub bandwidth: f64,
}

/// A layout on hardware: which of its communicator groups cross node boundaries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Placed {
    pub hw: Hardware,
    pub layout: Layout,
    /// Per axis (`tp`, `fsdp`, `dp`, `pp`): whether its groups span more than one node.
    pub inter: [bool; 4],
}

fn axis_index(axis: Axis) -> usize {
    match axis {
        Axis::Tp => 0,
        Axis::Fsdp => 1,
        Axis::Dp => 2,
        Axis::Pp => 3,
    }
}

impl Placed {
    /// A layout on `devices` consecutive devices that start at a node boundary (the planner's
    /// pools): an axis's groups span nodes when the block of devices it strides over does.
    pub fn aligned(hw: Hardware, layout: Layout) -> Placed {
        let l = layout;
        let spans = |block: u64| block > hw.devices_per_node;
        let tp = u64::from(l.tp);
        let fsdp = tp * u64::from(l.fsdp);
        let dp = fsdp * u64::from(l.dp);
        let pp = dp * u64::from(l.pp);
        Placed {
            hw,
            layout,
            inter: [
                spans(tp) && l.tp > 1,
                spans(fsdp) && l.fsdp > 1,
                spans(dp) && l.dp > 1,
                spans(pp) && l.pp > 1,
            ],
        }
    }

    /// A plan instance: each axis's first group is looked at rank by rank.
    pub fn instance(hw: Hardware, cluster: &Cluster, instance: &Instance) -> Placed {
        let first = cluster.ranks.nth(0).unwrap_or(0);
        let node = |r: u32| u64::from(r - first) / hw.devices_per_node;
        let mut inter = [false; 4];
        for axis in [Axis::Tp, Axis::Fsdp, Axis::Dp, Axis::Pp] {
            let groups = instance.groups(axis);
            inter[axis_index(axis)] = groups.first().is_some_and(|g| {
                g.first()
                    .is_some_and(|&a| g.iter().any(|&r| node(r) != node(a)))
            });
        }
        Placed {
            hw,
            layout: instance.layout,
            inter,
        }
    }

    pub fn spans_nodes(&self, axis: Axis) -> bool {
        self.inter[axis_index(axis)]
    }

    pub fn link(&self, axis: Axis, params: &CostParams) -> Link {
        self.hw.link(self.spans_nodes(axis), params)
    }
}

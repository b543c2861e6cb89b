//! The communicators of each rank of a layout: one group per axis, as the plan numbers ranks.

use rlc_plan::model::{Axis, Instance, Layout, RankSet};

use crate::collectives::{Communicator, Group};

/// A rank's place in a layout and its communicator along each axis. A group of one rank is a
/// communicator of world size 1, so code need not special-case absent axes.
pub struct RankGroups {
    /// Index of the rank inside the layout (0 .. `layout.devices()`).
    pub rank: usize,
    pub layout: Layout,
    /// Pipeline stage, data-parallel replica, FSDP shard, tensor-parallel rank.
    pub pp_rank: usize,
    pub dp_rank: usize,
    pub fsdp_rank: usize,
    pub tp_rank: usize,
    /// Ranks that differ only in the tensor-parallel coordinate.
    pub tp: Communicator,
    /// Ranks that differ only in the pipeline stage.
    pub pp: Communicator,
    /// Ranks that differ only in the FSDP shard (they share parameters by sharding them).
    pub fsdp: Communicator,
    /// Ranks that differ only in the data-parallel replica.
    pub dp: Communicator,
    /// Ranks that hold the same parameters' gradients for different data: `dp` and `fsdp` together.
    pub data: Communicator,
}

impl RankGroups {
    /// Which slice of the global batch this rank trains on (`d·fsdp + f`, as the plan numbers data
    /// ranks), out of `layout.data_ranks()`.
    pub fn data_rank(&self) -> usize {
        self.dp_rank * self.layout.fsdp as usize + self.fsdp_rank
    }
}

/// The communicators of every rank of `layout` (ranks `0 .. layout.devices()`), in rank order;
/// move each into its rank's thread.
pub fn process_groups(layout: Layout) -> Vec<RankGroups> {
    let devices = layout.devices();
    let instance = Instance {
        id: String::new(),
        role: String::new(),
        cluster: String::new(),
        phases: Vec::new(),
        ranks: RankSet::range(0, devices),
        layout,
        auto: false,
        memory: Default::default(),
    };
    let per_axis = |axis: Axis| axis_communicators(&instance.groups(axis), devices as usize);
    let mut tp = per_axis(Axis::Tp);
    let mut pp = per_axis(Axis::Pp);
    let mut fsdp = per_axis(Axis::Fsdp);
    let mut dp = per_axis(Axis::Dp);
    let data_groups: Vec<Vec<u32>> = (0..layout.pp)
        .flat_map(|p| (0..layout.tp).map(move |t| (p, t)))
        .map(|(p, t)| {
            (0..layout.data_ranks())
                .filter_map(|data| instance.rank_at(p, data / layout.fsdp, data % layout.fsdp, t))
                .collect()
        })
        .collect();
    let mut data = axis_communicators(&data_groups, devices as usize);
    (0..devices)
        .map(|rank| {
            let (p, d, f, t) = instance.coord_of(rank).expect("rank of the layout");
            let take = |slots: &mut Vec<Option<Communicator>>| {
                slots[rank as usize]
                    .take()
                    .expect("every rank is in one group per axis")
            };
            RankGroups {
                rank: rank as usize,
                layout,
                pp_rank: p as usize,
                dp_rank: d as usize,
                fsdp_rank: f as usize,
                tp_rank: t as usize,
                tp: take(&mut tp),
                pp: take(&mut pp),
                fsdp: take(&mut fsdp),
                dp: take(&mut dp),
                data: take(&mut data),
            }
        })
        .collect()
}

/// One communicator per rank, from a partition of the ranks into groups (each in group order).
fn axis_communicators(groups: &[Vec<u32>], devices: usize) -> Vec<Option<Communicator>> {
    let mut slots: Vec<Option<Communicator>> = (0..devices).map(|_| None).collect();
    for group in groups {
        for (&rank, comm) in group.iter().zip(Group::new(group.len())) {
            slots[rank as usize] = Some(comm);
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dp: u32, fsdp: u32, tp: u32, pp: u32) -> Layout {
        Layout::new(dp, fsdp, tp, pp)
    }

    #[test]
    fn coordinates_follow_the_plans_rank_order() {
        // pp slowest, then dp, fsdp, tp fastest: rank 5 of pp2·dp1·fsdp2·tp2 is (1, 0, 0, 1).
        let groups = process_groups(layout(1, 2, 2, 2));
        let g = &groups[5];
        assert_eq!((g.pp_rank, g.dp_rank, g.fsdp_rank, g.tp_rank), (1, 0, 0, 1));
        assert_eq!((g.tp.world_size(), g.tp.rank()), (2, 1));
        assert_eq!((g.pp.world_size(), g.pp.rank()), (2, 1));
        assert_eq!((g.fsdp.world_size(), g.fsdp.rank()), (2, 0));
        assert_eq!((g.dp.world_size(), g.data.world_size()), (1, 2));
        assert_eq!(g.data_rank(), 0);
    }

    #[test]
    fn tensor_groups_are_consecutive_ranks_and_data_groups_stride_over_them() {
        let groups = process_groups(layout(2, 1, 2, 1));
        let tp: Vec<(usize, usize)> = groups.iter().map(|g| (g.tp_rank, g.dp_rank)).collect();
        assert_eq!(tp, [(0, 0), (1, 0), (0, 1), (1, 1)]);
        assert!(groups.iter().all(|g| g.data.rank() == g.dp_rank));
    }
}

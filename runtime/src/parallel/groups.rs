//! The communicators of each rank of a layout: one group per axis, as the plan numbers ranks.

use std::collections::BTreeMap;

use rlc_plan::model::{Axis, Instance, Layout, RankSet};

use crate::collectives::{CollectiveError, Communicator, split};

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

/// Which of a rank's communicators: one per axis, and `data` (`dp` and `fsdp` together).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Members {
    Tp,
    Pp,
    Fsdp,
    Dp,
    Data,
}

impl RankGroups {
    /// Every rank of `layout` (ranks `0 .. layout.devices()`, numbered as the plan numbers them:
    /// pp slowest, then dp, fsdp, tp) for which `comm` gives each communicator; `comm` gets the
    /// rank, which communicator, the rank's index in it and its size.
    pub fn assemble(
        layout: Layout,
        mut comm: impl FnMut(u32, Members, u32, u32) -> Option<Communicator>,
    ) -> Vec<RankGroups> {
        let instance = layout_instance(layout);
        (0..layout.devices())
            .filter_map(|rank| {
                let (p, d, f, t) = instance.coord_of(rank).expect("a rank of the layout");
                let mut comm = |members, index, size| comm(rank, members, index, size);
                Some(RankGroups {
                    rank: rank as usize,
                    layout,
                    pp_rank: p as usize,
                    dp_rank: d as usize,
                    fsdp_rank: f as usize,
                    tp_rank: t as usize,
                    tp: comm(Members::Tp, t, layout.tp)?,
                    pp: comm(Members::Pp, p, layout.pp)?,
                    fsdp: comm(Members::Fsdp, f, layout.fsdp)?,
                    dp: comm(Members::Dp, d, layout.dp)?,
                    data: comm(Members::Data, d * layout.fsdp + f, layout.data_ranks())?,
                })
            })
            .collect()
    }

    /// Which slice of the global batch this rank trains on (`d·fsdp + f`, as the plan numbers data
    /// ranks), out of `layout.data_ranks()`.
    pub fn data_rank(&self) -> usize {
        self.dp_rank * self.layout.fsdp as usize + self.fsdp_rank
    }
}

/// The communicators of every rank of `layout` (ranks `0 .. layout.devices()`) that runs here, in
/// rank order: all of them when ranks are threads (move each into its rank's thread), this
/// process's when ranks are processes (none if the layout has fewer ranks than the job).
///
/// # Panics
/// If MPI cannot split its communicators (see [`process_groups_on`]).
pub fn process_groups(layout: Layout) -> Vec<RankGroups> {
    let identity: Vec<u32> = (0..layout.devices()).collect();
    process_groups_on(layout, &identity).expect("communicators of the layout")
}

/// As [`process_groups`] for a layout whose rank `i` is the job's rank `job_ranks[i]`; every
/// process of a job makes the same calls in the same order.
pub fn process_groups_on(
    layout: Layout,
    job_ranks: &[u32],
) -> Result<Vec<RankGroups>, CollectiveError> {
    let devices = layout.devices();
    assert_eq!(
        job_ranks.len(),
        devices as usize,
        "one job rank per layout rank"
    );
    let instance = layout_instance(layout);
    let per_axis = |groups: &[Vec<u32>]| -> Result<BTreeMap<u32, Communicator>, CollectiveError> {
        let global: Vec<Vec<u32>> = groups
            .iter()
            .map(|g| g.iter().map(|&r| job_ranks[r as usize]).collect())
            .collect();
        Ok(split(&global)?.into_iter().collect())
    };
    let mut tp = per_axis(&instance.groups(Axis::Tp))?;
    let mut pp = per_axis(&instance.groups(Axis::Pp))?;
    let mut fsdp = per_axis(&instance.groups(Axis::Fsdp))?;
    let mut dp = per_axis(&instance.groups(Axis::Dp))?;
    let data_groups: Vec<Vec<u32>> = (0..layout.pp)
        .flat_map(|p| (0..layout.tp).map(move |t| (p, t)))
        .map(|(p, t)| {
            (0..layout.data_ranks())
                .filter_map(|data| instance.rank_at(p, data / layout.fsdp, data % layout.fsdp, t))
                .collect()
        })
        .collect();
    let mut data = per_axis(&data_groups)?;
    // This process's ranks only: the others' communicators live in their processes.
    Ok(RankGroups::assemble(layout, |rank, members, _, _| {
        let of_axis = match members {
            Members::Tp => &mut tp,
            Members::Pp => &mut pp,
            Members::Fsdp => &mut fsdp,
            Members::Dp => &mut dp,
            Members::Data => &mut data,
        };
        of_axis.remove(&job_ranks[rank as usize])
    }))
}

/// `layout` as an instance on ranks `0 .. layout.devices()`: what numbers its ranks.
fn layout_instance(layout: Layout) -> Instance {
    Instance {
        id: String::new(),
        role: String::new(),
        cluster: String::new(),
        phases: Vec::new(),
        ranks: RankSet::range(0, layout.devices()),
        layout,
        auto: false,
        memory: Default::default(),
    }
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

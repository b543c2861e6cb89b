//! Parallel layouts executed on ranks: tensor parallelism (Megatron-style), fully sharded data
//! parallelism (ZeRO-3) and pipeline parallelism, alone and combined, as the plan's layouts
//! describe them (`rlc_plan::model::Layout`, rank order `pp`, `dp`, `fsdp`, `tp`).
//!
//! Every layout computes what one rank holding the whole model computes; the equivalence tests
//! (`runtime/tests/layouts/`) hold them to it.

pub mod combined;
pub mod fsdp;
pub mod groups;
pub mod materialise;
pub mod pp;
pub mod reshard;
pub mod shards;
pub mod tape;
pub mod tp;

pub use groups::{Members, RankGroups, process_groups, process_groups_on};
pub use tape::Tape;

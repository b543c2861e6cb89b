//! Which elements of each full parameter a rank holds under a layout: the one description the
//! layouts' sharding and the weight re-sharding between layouts agree on.
//!
//! A [`Holding`] lists row-major flat index ranges of the full tensor in the order the rank's
//! local tensor stores them. Every layout's shard is such a list: a tensor-parallel shard of
//! rows (column-parallel layers, the vocabulary) is one range, a shard of columns (row-parallel
//! layers) one range per row, a pipeline stage holds its layers whole or not at all, and an FSDP
//! shard is a contiguous piece of the flattened tensor-parallel shard.

use std::ops::Range;

use rlc_plan::model::Layout;
use tch::Tensor;

use crate::model::ModelConfig;

/// Row-major flat index ranges of a full tensor, in local storage order; never empty ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holding {
    ranges: Vec<Range<i64>>,
}

/// A piece two holdings share: `len` elements at `at_a` in the first's local storage and at
/// `at_b` in the second's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overlap {
    pub at_a: i64,
    pub at_b: i64,
    pub len: i64,
}

impl Holding {
    pub fn new(ranges: impl IntoIterator<Item = Range<i64>>) -> Self {
        Self {
            ranges: ranges.into_iter().filter(|r| r.start < r.end).collect(),
        }
    }

    pub fn whole(numel: i64) -> Self {
        Self::new(std::iter::once(0..numel))
    }

    pub fn ranges(&self) -> &[Range<i64>] {
        &self.ranges
    }

    /// Elements held (the local tensor's size).
    pub fn numel(&self) -> i64 {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Rows `rows` (of dimension 0) of a tensor of `shape`.
    pub fn rows(shape: &[i64], rows: Range<i64>) -> Self {
        let row = shape[1..].iter().product::<i64>();
        Self::new(std::iter::once(rows.start * row..rows.end * row))
    }

    /// Columns `cols` (of dimension 1) of a 2-D tensor of `shape`.
    pub fn columns(shape: &[i64], cols: Range<i64>) -> Self {
        let width = shape[1];
        Self::new((0..shape[0]).map(|row| row * width + cols.start..row * width + cols.end))
    }

    /// Local elements `local` (a contiguous piece of this holding's storage), as a holding.
    pub fn part(&self, local: Range<i64>) -> Self {
        let mut out = Vec::new();
        let mut offset = 0;
        for r in &self.ranges {
            let len = r.end - r.start;
            let (a, b) = (local.start.max(offset), local.end.min(offset + len));
            if a < b {
                out.push(r.start + a - offset..r.start + b - offset);
            }
            offset += len;
        }
        Self::new(out)
    }

    /// The held elements of `full` (the whole tensor), flat, in local order.
    pub fn take(&self, full: &Tensor) -> Tensor {
        let flat = full.reshape([-1]);
        let parts: Vec<Tensor> = self
            .ranges
            .iter()
            .map(|r| flat.narrow(0, r.start, r.end - r.start))
            .collect();
        if parts.is_empty() {
            return flat.narrow(0, 0, 0).copy();
        }
        Tensor::cat(&parts, 0)
    }

    /// The elements both hold, in this holding's local order.
    pub fn overlaps(&self, other: &Holding) -> Vec<Overlap> {
        let starts = |h: &Holding| {
            let mut offset = 0;
            h.ranges
                .iter()
                .map(|r| {
                    let at = offset;
                    offset += r.end - r.start;
                    (r.clone(), at)
                })
                .collect::<Vec<_>>()
        };
        let theirs = starts(other);
        let mut out = Vec::new();
        for (mine, at_mine) in starts(self) {
            for (their, at_their) in &theirs {
                let (a, b) = (mine.start.max(their.start), mine.end.min(their.end));
                if a < b {
                    out.push(Overlap {
                        at_a: at_mine + a - mine.start,
                        at_b: at_their + a - their.start,
                        len: b - a,
                    });
                }
            }
        }
        out
    }
}

/// How tensor parallelism splits a parameter (Megatron): by rows (column-parallel layers and the
/// vocabulary-parallel embedding and LM head), by columns (row-parallel layers), or not at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TpSplit {
    Rows,
    Columns,
    Replicated,
}

/// The split of the parameter named `name` (Hugging Face Llama/Qwen2 names).
pub fn tp_split(name: &str) -> TpSplit {
    let leaf = name.rsplit('.').nth(1).unwrap_or("");
    match leaf {
        "embed_tokens" | "lm_head" | "q_proj" | "k_proj" | "v_proj" | "gate_proj" | "up_proj" => {
            TpSplit::Rows
        }
        "o_proj" | "down_proj" => TpSplit::Columns,
        _ => TpSplit::Replicated,
    }
}

/// Block `i` of `parts` over `n` units, `[i·n/parts, (i+1)·n/parts)`, as the plan splits layers.
pub fn block(n: i64, parts: i64, i: i64) -> Range<i64> {
    i * n / parts..(i + 1) * n / parts
}

/// The decoder layer a parameter belongs to (`model.layers.{i}.…`).
pub fn layer_of(name: &str) -> Option<i64> {
    name.strip_prefix("model.layers.")?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// Whether pipeline stage `stage` of `stages` holds the parameter `name`: its layers, the
/// embedding (and a learned position table) on the first stage, the final norm and the heads on the last (a tied LM head is
/// the embedding, so the last stage holds that too).
pub fn stage_holds(name: &str, config: &ModelConfig, stages: i64, stage: i64) -> bool {
    match layer_of(name) {
        Some(layer) => block(config.layers, stages, stage).contains(&layer),
        None if name == "model.embed_tokens.weight" => {
            stage == 0 || (config.tie_embeddings && stage == stages - 1)
        }
        None if name == "model.embed_positions.weight" => stage == 0,
        None => stage == stages - 1,
    }
}

/// FSDP shard `shard` of `shards` of a flattened tensor of `numel` elements: equal chunks of
/// `ceil(numel / shards)`, the last ones shorter (or empty).
pub fn fsdp_chunk(numel: i64, shards: i64, shard: i64) -> Range<i64> {
    let chunk = (numel + shards - 1) / shards;
    (shard * chunk).min(numel)..((shard + 1) * chunk).min(numel)
}

/// A rank's coordinate in a layout: pipeline stage, data-parallel replica, FSDP shard, tensor rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coord {
    pub pp: i64,
    pub dp: i64,
    pub fsdp: i64,
    pub tp: i64,
}

/// What the rank at `coord` of `layout` holds of the parameter `name` of full shape `shape`
/// (`None`: nothing).
pub fn holding(
    name: &str,
    shape: &[i64],
    config: &ModelConfig,
    layout: &Layout,
    coord: Coord,
) -> Option<Holding> {
    if !stage_holds(name, config, i64::from(layout.pp), coord.pp) {
        return None;
    }
    let tp = i64::from(layout.tp);
    let tensor_shard = match tp_split(name) {
        TpSplit::Rows => Holding::rows(shape, block(shape[0], tp, coord.tp)),
        TpSplit::Columns => Holding::columns(shape, block(shape[1], tp, coord.tp)),
        TpSplit::Replicated => Holding::whole(shape.iter().product()),
    };
    let fsdp = i64::from(layout.fsdp);
    let local = fsdp_chunk(tensor_shard.numel(), fsdp, coord.fsdp);
    Some(tensor_shard.part(local))
}

#[cfg(test)]
// One-range expectations are ranges in a list, as the holdings are.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn layout(dp: u32, fsdp: u32, tp: u32, pp: u32) -> Layout {
        Layout::new(dp, fsdp, tp, pp)
    }

    fn at(pp: i64, fsdp: i64, tp: i64) -> Coord {
        Coord {
            pp,
            dp: 0,
            fsdp,
            tp,
        }
    }

    #[test]
    fn tensor_shards_of_rows_and_columns() {
        assert_eq!(Holding::rows(&[4, 3], 1..3).ranges(), [3..9]);
        assert_eq!(Holding::columns(&[2, 4], 2..4).ranges(), [2..4, 6..8]);
        let config = ModelConfig::tiny();
        let l = layout(1, 1, 2, 1);
        let q = holding(
            "model.layers.1.self_attn.q_proj.weight",
            &[32, 32],
            &config,
            &l,
            at(0, 0, 1),
        );
        assert_eq!(q.unwrap().ranges(), [512..1024]);
        let o = holding(
            "model.layers.1.self_attn.o_proj.weight",
            &[32, 32],
            &config,
            &l,
            at(0, 0, 1),
        )
        .unwrap();
        assert_eq!(
            (o.numel(), o.ranges()[0].clone(), o.ranges().len()),
            (512, 16..32, 32)
        );
        let norm = holding("model.norm.weight", &[32], &config, &l, at(0, 0, 1)).unwrap();
        assert_eq!(norm.ranges(), [0..32]);
    }

    #[test]
    fn stages_hold_their_layers_and_the_ends() {
        let mut config = ModelConfig::tiny();
        config.layers = 4;
        assert!(stage_holds(
            "model.layers.1.mlp.up_proj.weight",
            &config,
            2,
            0
        ));
        assert!(!stage_holds(
            "model.layers.2.mlp.up_proj.weight",
            &config,
            2,
            0
        ));
        assert!(stage_holds("model.embed_tokens.weight", &config, 2, 0));
        assert!(!stage_holds("model.embed_tokens.weight", &config, 2, 1));
        assert!(stage_holds("lm_head.weight", &config, 2, 1));
        config.tie_embeddings = true;
        assert!(stage_holds("model.embed_tokens.weight", &config, 2, 1));
    }

    #[test]
    fn fsdp_pieces_of_a_column_shard_cover_it_once() {
        let config = ModelConfig::tiny();
        let l = layout(1, 3, 2, 1);
        let whole = Holding::columns(&[4, 6], 3..6);
        let pieces: Vec<Holding> = (0..3)
            .map(|f| {
                holding(
                    "model.layers.0.mlp.down_proj.weight",
                    &[4, 6],
                    &config,
                    &l,
                    at(0, f, 1),
                )
                .unwrap()
            })
            .collect();
        assert_eq!(
            pieces.iter().map(Holding::numel).collect::<Vec<_>>(),
            [4, 4, 4]
        );
        assert_eq!(pieces[0].ranges(), [3..6, 9..10]);
        assert_eq!(pieces[1].ranges(), [10..12, 15..17]);
        let rejoined: Vec<Range<i64>> = pieces.iter().flat_map(|p| p.ranges().to_vec()).collect();
        let merged = Holding::new(rejoined);
        assert_eq!(merged.numel(), whole.numel());
        assert_eq!(fsdp_chunk(10, 4, 3), 9..10);
        assert_eq!(fsdp_chunk(2, 4, 3), 2..2);
    }

    #[test]
    fn overlaps_give_positions_in_both_local_storages() {
        let a = Holding::columns(&[2, 4], 0..2); // 0..2, 4..6
        let b = Holding::rows(&[2, 4], 1..2); // 4..8
        assert_eq!(
            a.overlaps(&b),
            [Overlap {
                at_a: 2,
                at_b: 0,
                len: 2
            }]
        );
        assert!(a.overlaps(&Holding::columns(&[2, 4], 2..4)).is_empty());
    }
}

//! Where each element of a unit's parameters lives when they are sharded flat over `world` ranks.
//!
//! A parameter of `numel` elements is flattened, zero-padded to `world · shard` elements with
//! `shard = ⌈numel / world⌉`, and rank `r` holds elements `r·shard .. (r+1)·shard`. A unit (the
//! parameters gathered together: a decoder layer, the embedding, the head) travels as one flat
//! tensor per rank, its parameters' shards concatenated, so that one all-gather or one
//! reduce-scatter serves the whole unit. Padding is zero in the shards and in the gradients, so
//! it never moves and never counts in a norm.

use tch::Tensor;

/// Shape and shard size of one parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ParamSpec {
    pub name: String,
    pub shape: Vec<i64>,
    pub numel: i64,
    /// Elements each rank holds (padding included).
    pub shard: i64,
}

impl ParamSpec {
    pub fn new(name: String, shape: Vec<i64>, world: usize) -> Self {
        let numel = shape.iter().product::<i64>();
        let world = world as i64;
        Self {
            name,
            shard: (numel + world - 1) / world,
            shape,
            numel,
        }
    }
}

/// `full` flattened and zero-padded to `world · spec.shard` elements, as `[world, shard]`.
fn padded_rows(full: &Tensor, spec: &ParamSpec, world: usize) -> Tensor {
    let padding = spec.shard * world as i64 - spec.numel;
    full.reshape([-1])
        .constant_pad_nd([0, padding])
        .view([world as i64, spec.shard])
}

/// Rank `rank`'s shard of the full parameter `full` (a private copy).
pub(super) fn take_shard(full: &Tensor, spec: &ParamSpec, rank: usize, world: usize) -> Tensor {
    padded_rows(full, spec, world).get(rank as i64).copy()
}

/// The full parameters of a unit from every rank's flat unit shard (`parts`, rank order).
pub(super) fn unflatten(parts: &[Tensor], specs: &[&ParamSpec]) -> Vec<Tensor> {
    let stacked = Tensor::stack(parts, 0);
    let mut offset = 0;
    specs
        .iter()
        .map(|spec| {
            let full = stacked
                .narrow(1, offset, spec.shard)
                .reshape([-1])
                .narrow(0, 0, spec.numel)
                .view(spec.shape.as_slice());
            offset += spec.shard;
            full
        })
        .collect()
}

/// The reduce-scatter input of a unit's full gradients: `[world · S]`, whose `r`-th block of `S`
/// elements is rank `r`'s flat unit shard.
pub(super) fn interleave(grads: &[Tensor], specs: &[&ParamSpec], world: usize) -> Tensor {
    let rows: Vec<Tensor> = grads
        .iter()
        .zip(specs)
        .map(|(grad, spec)| padded_rows(grad, spec, world))
        .collect();
    Tensor::cat(&rows, 1).reshape([-1])
}

/// Splits a flat unit shard into its parameters' shards.
pub(super) fn split(flat: &Tensor, specs: &[&ParamSpec]) -> Vec<Tensor> {
    let mut offset = 0;
    specs
        .iter()
        .map(|spec| {
            let piece = flat.narrow(0, offset, spec.shard);
            offset += spec.shard;
            piece
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    fn specs(world: usize) -> [ParamSpec; 2] {
        [
            ParamSpec::new("a".into(), vec![2, 3], world),
            ParamSpec::new("b".into(), vec![5], world),
        ]
    }

    fn values() -> [Tensor; 2] {
        [
            Tensor::arange(6, (Kind::Float, tch::Device::Cpu)).view([2, 3]),
            Tensor::arange(5, (Kind::Float, tch::Device::Cpu)) + 100.0,
        ]
    }

    #[test]
    fn shards_gather_back_to_the_full_parameters_with_zero_padding() {
        let world = 4;
        let specs = specs(world);
        let refs: Vec<&ParamSpec> = specs.iter().collect();
        assert_eq!((specs[0].shard, specs[1].shard), (2, 2));
        let values = values();
        let parts: Vec<Tensor> = (0..world)
            .map(|r| {
                let shards: Vec<Tensor> = values
                    .iter()
                    .zip(&specs)
                    .map(|(v, s)| take_shard(v, s, r, world))
                    .collect();
                Tensor::cat(&shards, 0)
            })
            .collect();
        // Rank 3 holds nothing of `a` (6 elements fill ranks 0..3) and the padding of `b`.
        assert_eq!(
            Vec::<f32>::try_from(&parts[3]).unwrap(),
            [0.0, 0.0, 0.0, 0.0]
        );
        let full = unflatten(&parts, &refs);
        assert!(full[0].equal(&values[0]) && full[1].equal(&values[1]));
    }

    #[test]
    fn unpadded_shards_are_the_fsdp_chunks_the_re_sharding_assumes() {
        for numel in [1, 5, 6, 7, 13] {
            let full = Tensor::arange(numel, (Kind::Float, tch::Device::Cpu)) + 1.0;
            for world in 1..=5usize {
                let spec = ParamSpec::new("p".into(), vec![numel], world);
                for rank in 0..world {
                    let shard = take_shard(&full, &spec, rank, world);
                    let chunk =
                        crate::parallel::shards::fsdp_chunk(numel, world as i64, rank as i64);
                    let len = chunk.end - chunk.start;
                    assert!(
                        shard
                            .narrow(0, 0, len)
                            .equal(&full.narrow(0, chunk.start, len)),
                        "{numel} over {world}, rank {rank}"
                    );
                    // The rest is padding (zero; `full` has no zeros).
                    let rest = shard.narrow(0, len, spec.shard - len);
                    assert_eq!(rest.count_nonzero(None).int64_value(&[]), 0);
                }
            }
        }
    }

    #[test]
    fn interleaved_gradients_put_each_ranks_shard_in_its_block() {
        let world = 2;
        let specs = specs(world);
        let refs: Vec<&ParamSpec> = specs.iter().collect();
        let values = values();
        let flat = interleave(&values, &refs, world);
        let unit = refs.iter().map(|s| s.shard).sum::<i64>();
        assert_eq!(flat.size(), [world as i64 * unit]);
        for rank in 0..world {
            let block = flat.narrow(0, rank as i64 * unit, unit);
            for ((piece, value), spec) in split(&block, &refs).iter().zip(&values).zip(&specs) {
                assert!(piece.equal(&take_shard(value, spec, rank, world)));
            }
        }
    }
}

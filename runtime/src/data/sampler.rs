//! Reproducible drawing of samples from a `Source`.

use super::task::below;
use super::{Sample, Source};
use crate::rng::Rng;

/// SplitMix64's increment; stepping a key by `index` multiples of it reaches sample `index`'s
/// seed directly, without drawing the samples before it.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
/// Keeps the JSONL shuffle's seeds apart from the task samples' seeds.
const SHUFFLE_STREAM: u64 = 0x5348_5546_464C_4531;

/// Draws prompts reproducibly; its whole state is (seed, cursor), so it can be checkpointed and
/// resumed.
///
/// Sample `i` of the stream depends only on (seed, i): a task sample is drawn with its own `Rng`
/// seeded by mixing seed and `i`, and a JSONL sample is line `perm[i % n]` of epoch `i / n`'s
/// seeded shuffle. So ranks can each `seek` to their share, and splitting `next` into several
/// calls never changes what is drawn.
#[derive(Debug, Clone)]
pub struct Sampler {
    source: Source,
    seed: u64,
    cursor: u64,
    /// The current JSONL epoch's permutation — a cache derived from (seed, epoch), not state.
    shuffle: Option<(u64, Vec<usize>)>,
}

impl Sampler {
    pub fn new(source: Source, seed: u64) -> Sampler {
        Sampler {
            source,
            seed,
            cursor: 0,
            shuffle: None,
        }
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next `count` samples of the global stream.
    pub fn next(&mut self, count: usize) -> Vec<Sample> {
        let start = self.cursor;
        self.cursor += count as u64;
        (start..self.cursor).map(|i| self.sample_at(i)).collect()
    }

    /// Samples drawn so far: the index of the next one.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Continues the stream from sample `cursor` (e.g. after loading a checkpoint).
    pub fn seek(&mut self, cursor: u64) {
        self.cursor = cursor;
    }

    fn sample_at(&mut self, index: u64) -> Sample {
        match &self.source {
            Source::Task(task) => task.draw(&mut Rng::new(mix(self.seed, index))),
            Source::Jsonl(prompts) => {
                let n = prompts.samples().len() as u64;
                let (epoch, offset) = (index / n, (index % n) as usize);
                if self.shuffle.as_ref().is_none_or(|(e, _)| *e != epoch) {
                    let seed = mix(self.seed ^ SHUFFLE_STREAM, epoch);
                    self.shuffle = Some((epoch, permutation(n as usize, seed)));
                }
                let (_, perm) = self.shuffle.as_ref().expect("set above");
                prompts.samples()[perm[offset]].clone()
            }
        }
    }
}

/// A seed for item `index` of the stream keyed by `seed`: SplitMix64's `index`-th output from a
/// scrambled `seed` (scrambling first keeps nearby seeds from giving shifted copies of a stream).
fn mix(seed: u64, index: u64) -> u64 {
    let key = Rng::new(seed).next_u64();
    Rng::new(key.wrapping_add(index.wrapping_mul(GOLDEN))).next_u64()
}

/// A uniformly random permutation of `0..n` (Fisher–Yates).
fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng::new(seed);
    let mut perm: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = below(&mut rng, i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    perm
}

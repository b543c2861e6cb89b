//! A small seeded random-number generator owned by the caller (weight initialisation, data
//! sampling, seeds of streams); the sampler of generation draws from the counter-based
//! `generate::philox` instead, which runs on the device.
//!
//! libtorch's generator is process-global, so two tests (or two ranks) drawing from it at the same
//! time would interleave. Drawing on the Rust side keeps a seed's stream independent of threads
//! and of the libtorch build.

use tch::Tensor;

/// SplitMix64: tiny state, full 64-bit period, good enough for weight init and data sampling. Its
/// state after `n` draws is `seed + n·γ`, so any point of a stream is reached in one step
/// ([`Rng::skip`]): a rank draws its slice of a weight without drawing the rest.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

/// SplitMix64's increment γ.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Moves the stream on by `draws` calls of [`Rng::next_u64`] (a [`Rng::normal`] is two).
    pub fn skip(&mut self, draws: u64) {
        self.state = self.state.wrapping_add(draws.wrapping_mul(GAMMA));
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal by the Box–Muller transform.
    pub fn normal(&mut self) -> f64 {
        // 1 - u lies in (0, 1], so the logarithm is finite.
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A float32 CPU tensor of `shape` with entries drawn from N(0, std²).
    pub fn normal_tensor(&mut self, shape: &[i64], std: f64) -> Tensor {
        let count: i64 = shape.iter().product();
        let values: Vec<f32> = (0..count).map(|_| (self.normal() * std) as f32).collect();
        Tensor::from_slice(&values).reshape(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_different_seeds_differ() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let c = Rng::new(8).next_u64();
        assert_eq!(a, b);
        assert_ne!(a[0], c);
    }

    #[test]
    fn skipping_lands_where_drawing_does() {
        let mut drawn = Rng::new(11);
        for _ in 0..1000 {
            drawn.next_u64();
        }
        let mut skipped = Rng::new(11);
        skipped.skip(1000);
        assert_eq!(drawn.next_u64(), skipped.next_u64());
    }

    #[test]
    fn normal_has_unit_moments() {
        let mut rng = Rng::new(1);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "variance {var}");
    }
}

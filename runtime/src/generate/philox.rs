//! The sampler's random numbers: Philox4x32-10, a counter-based generator (Salmon et al., "Parallel
//! random numbers: as easy as 1, 2, 3", SC'11; the Random123 library), computed the same way on
//! any device.
//!
//! The number a sampled token uses is a pure function of the stream's 64-bit key (the run's seed,
//! step and op, as `exec` derives it) and of a counter made of the row's index in the whole batch
//! and the token's position in the response:
//!
//! ```text
//! counter = [row mod 2³², row div 2³², position, 0]     key = [seed mod 2³², seed div 2³²]
//! (x0, x1, x2, x3) = Philox4x32-10(counter, key)
//! u = (x0 · 2²¹ + x1 div 2¹¹) · 2⁻⁵³                     (53 random bits, u in [0, 1))
//! ```
//!
//! so a data rank's slice of a batch draws what the whole batch would (the row index is global),
//! a row continued at position `p` draws what it would have drawn there without the pause, and no
//! step depends on how many numbers an earlier step drew. `x2`, `x3` are left for later uses
//! (a second number at one position).
//!
//! Two implementations of the one function: [`philox4x32_10`] on `u32`s (used when the tokens are
//! on the CPU, where it is cheapest), and [`uniforms_on`], the same rounds as int64 tensor
//! operations, which run where the tensors are — on a GPU the whole `[rows, positions]` table is
//! computed there in one go, with no host round trip and nothing copied from the host. Every
//! intermediate value stays below 2⁶³ (32 × 16-bit products, see [`mulhilo_tensor`]), so the
//! tensor version is exact on any back end; a test checks the two bit for bit.

use std::ops::Range;

use tch::{Device, Kind, Tensor};

/// Philox4x32's multipliers and Weyl key increments (Random123's `PHILOX_M4x32_*`,
/// `PHILOX_W32_*`).
const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;
const ROUNDS: usize = 10;

/// Philox4x32 with `R` rounds of `counter` under `key`, as Random123's `philox4x32_R`: round
/// `r` (from 0) uses the key bumped `r` times by (W0, W1).
pub fn philox4x32(rounds: usize, counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    for r in 0..rounds {
        if r > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        let p0 = u64::from(M0) * u64::from(c0);
        let p1 = u64::from(M1) * u64::from(c2);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        [c0, c1, c2, c3] = [hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0];
    }
    [c0, c1, c2, c3]
}

/// Philox4x32-10, the generator's function.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    philox4x32(ROUNDS, counter, key)
}

fn key_of(seed: u64) -> [u32; 2] {
    [seed as u32, (seed >> 32) as u32]
}

/// 53 bits of two words as a float in [0, 1): exact, every value a multiple of 2⁻⁵³.
fn unit(x0: u32, x1: u32) -> f64 {
    ((u64::from(x0) << 21) | u64::from(x1 >> 11)) as f64 * TWO_TO_MINUS_53
}

const TWO_TO_MINUS_53: f64 = 1.0 / (1u64 << 53) as f64;

/// The uniform number of row `row` (of the whole batch) at response position `position` in the
/// stream `seed`.
pub fn uniform(seed: u64, row: u64, position: u32) -> f64 {
    let [x0, x1, _, _] = philox4x32_10([row as u32, (row >> 32) as u32, position, 0], key_of(seed));
    unit(x0, x1)
}

/// `[rows, positions]` float64 uniforms on `device`: entry `(i, j)` is
/// [`uniform`]`(seed, rows.start + i, positions.start + j)`. On the CPU drawn by the scalar
/// function; elsewhere computed on the device by [`uniforms_on`] (equal bit for bit).
pub fn uniforms(seed: u64, rows: Range<i64>, positions: Range<i64>, device: Device) -> Tensor {
    let shape = [rows.end - rows.start, positions.end - positions.start];
    if device == Device::Cpu {
        let values: Vec<f64> = rows
            .flat_map(|r| {
                positions
                    .clone()
                    .map(move |p| uniform(seed, r as u64, p as u32))
            })
            .collect();
        return Tensor::from_slice(&values).view(shape);
    }
    let rows = Tensor::arange_start(rows.start, rows.end, (Kind::Int64, device)).unsqueeze(1);
    let positions =
        Tensor::arange_start(positions.start, positions.end, (Kind::Int64, device)).unsqueeze(0);
    uniforms_on(seed, &rows, &positions)
}

/// [`uniform`] for int64 tensors of row indices and positions (broadcast together), computed by
/// tensor operations where the tensors are. Rows must lie in [0, 2⁶³), positions in [0, 2³²).
pub fn uniforms_on(seed: u64, rows: &Tensor, positions: &Tensor) -> Tensor {
    let low = |t: &Tensor| t.bitwise_and(MASK32);
    let zeros = (rows.zeros_like() + positions.zeros_like()).to_kind(Kind::Int64);
    let counter = [
        low(rows) + &zeros,
        rows.bitwise_right_shift_tensor_scalar(32) + &zeros,
        low(positions) + &zeros,
        zeros,
    ];
    let [x0, x1, _, _] = philox_on(counter, key_of(seed));
    (x0 * (1i64 << 21) + x1.bitwise_right_shift_tensor_scalar(11)).to_kind(Kind::Double)
        * TWO_TO_MINUS_53
}

const MASK32: i64 = 0xFFFF_FFFF;

/// `m · x` for int64 tensors `x` holding values in [0, 2³²), as (high word, low word), with no
/// intermediate value of 2⁴⁹ or more: `m = mh·2¹⁶ + ml`, `a = x·mh`, `b = x·ml` (each < 2⁴⁸),
/// `m·x = a·2¹⁶ + b`, so `lo = ((a mod 2¹⁶)·2¹⁶ + b) mod 2³²` and
/// `hi = (a + b div 2¹⁶) div 2¹⁶`.
fn mulhilo_tensor(m: u32, x: &Tensor) -> (Tensor, Tensor) {
    let (mh, ml) = (i64::from(m >> 16), i64::from(m & 0xFFFF));
    let a = x * mh;
    let b = x * ml;
    let lo = (a.bitwise_and(0xFFFF).bitwise_left_shift_tensor_scalar(16) + &b).bitwise_and(MASK32);
    let hi = (a + b.bitwise_right_shift_tensor_scalar(16)).bitwise_right_shift_tensor_scalar(16);
    (hi, lo)
}

/// [`philox4x32_10`] on int64 tensors of 32-bit words (of one shape).
fn philox_on(counter: [Tensor; 4], key: [u32; 2]) -> [Tensor; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    for r in 0..ROUNDS {
        if r > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        let (hi0, lo0) = mulhilo_tensor(M0, &c0);
        let (hi1, lo1) = mulhilo_tensor(M1, &c2);
        let n0 = hi1.bitwise_xor_tensor(&c1).bitwise_xor(i64::from(k0));
        let n2 = hi0.bitwise_xor_tensor(&c3).bitwise_xor(i64::from(k1));
        [c0, c1, c2, c3] = [n0, lo1, n2, lo0];
    }
    [c0, c1, c2, c3]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answers of Philox4x32-10, `(counter, key, output)`: the first three are the
    /// `philox4x32 10` lines of Random123's `examples/kat_vectors` (D. E. Shaw Research,
    /// github.com/DEShawResearch/random123); the rest are from the longer generated list of the
    /// same name in github.com/girving/random123-manual (`examples/kat_vectors`, commit 61e8479).
    const KNOWN: [([u32; 4], [u32; 2], [u32; 4]); 7] = [
        (
            [0; 4],
            [0; 2],
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
        ),
        (
            [u32::MAX; 4],
            [u32::MAX; 2],
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
        ),
        (
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
        ),
        (
            [1, 0, 0, 0],
            [1, 0],
            [0xac08_141b, 0xdfc5_ccbe, 0x79c0_7a47, 0xa7f6_6093],
        ),
        (
            [0, 0, 1, 0],
            [1, 0],
            [0x0707_1c12, 0x4282_64b6, 0x3909_104b, 0x6da2_bda2],
        ),
        (
            [0, 0x8000_0000, 0, 0],
            [0, 0xffff_ffff],
            [0x715a_87cf, 0xf966_a7f0, 0x3e6d_d95f, 0xe884_e2fd],
        ),
        (
            [0x4528_21e6, 0x38d0_1377, 0xbe54_66cf, 0x34e9_0c6c],
            [0, 0x8000_0000],
            [0x94ca_5566, 0x1492_4b2f, 0x2821_4292, 0x59fa_eaee],
        ),
    ];

    #[test]
    fn philox_gives_random123s_known_answers() {
        for (counter, key, expected) in KNOWN {
            assert_eq!(
                philox4x32_10(counter, key),
                expected,
                "counter {counter:x?}"
            );
        }
        // And 7 rounds (the same list), so the round count is a real parameter.
        assert_eq!(
            philox4x32(7, [0; 4], [0; 2]),
            [0x5f6f_b709, 0x0d89_3f64, 0x4f12_1f81, 0x4f73_0a48]
        );
    }

    #[test]
    fn the_tensor_rounds_equal_the_scalar_ones_bit_for_bit() {
        let words = |i: usize| Tensor::from_slice(&KNOWN.map(|k| i64::from(k.0[i])));
        for (_, key, _) in KNOWN {
            let got = philox_on([words(0), words(1), words(2), words(3)], key);
            for (i, (counter, _, _)) in KNOWN.iter().enumerate() {
                let expected = philox4x32_10(*counter, key);
                for w in 0..4 {
                    assert_eq!(
                        got[w].int64_value(&[i as i64]),
                        i64::from(expected[w]),
                        "counter {counter:x?}, key {key:x?}, word {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_device_table_equals_the_scalar_one_bit_for_bit() {
        // Rows past 2³² use the counter's second word.
        for (seed, first) in [
            (0u64, 0i64),
            (0x0123_4567_89ab_cdef, 5),
            (u64::MAX, (1 << 32) - 3),
        ] {
            let rows = Tensor::arange_start(first, first + 7, (Kind::Int64, Device::Cpu));
            let positions = Tensor::arange(9, (Kind::Int64, Device::Cpu));
            let on = uniforms_on(seed, &rows.unsqueeze(1), &positions.unsqueeze(0));
            let scalar = uniforms(seed, first..first + 7, 0..9, Device::Cpu);
            assert_eq!(on.size(), [7, 9]);
            let on = Vec::<f64>::try_from(on.flatten(0, -1)).unwrap();
            let scalar = Vec::<f64>::try_from(scalar.flatten(0, -1)).unwrap();
            assert_eq!(
                on.iter().map(|u| u.to_bits()).collect::<Vec<_>>(),
                scalar.iter().map(|u| u.to_bits()).collect::<Vec<_>>(),
                "seed {seed:x}"
            );
        }
    }

    #[test]
    fn a_slice_of_rows_or_positions_draws_what_the_whole_table_does() {
        let whole = uniforms(42, 0..12, 0..6, Device::Cpu);
        let part = uniforms(42, 4..9, 2..6, Device::Cpu);
        assert!(part.equal(&whole.narrow(0, 4, 5).narrow(1, 2, 4)));
        assert_eq!(
            part.double_value(&[1, 1]),
            uniform(42, 5, 3),
            "entry (i, j) is row first + i at position start + j"
        );
    }

    #[test]
    fn uniforms_are_in_the_unit_interval_with_the_right_moments() {
        let u =
            Vec::<f64>::try_from(uniforms(7, 0..200, 0..100, Device::Cpu).flatten(0, -1)).unwrap();
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
        let n = u.len() as f64;
        let mean = u.iter().sum::<f64>() / n;
        let var = u.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        // 20 000 draws: the mean's standard error is 0.002, the variance's about 0.0006.
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.004, "variance {var}");
        // Neighbouring counters are not correlated.
        let pairs: f64 = u
            .windows(2)
            .map(|w| (w[0] - 0.5) * (w[1] - 0.5))
            .sum::<f64>()
            / n;
        assert!(pairs.abs() < 0.003, "lag-1 covariance {pairs}");
        // And the low bits are used: not every value is a multiple of 2⁻³².
        assert!(u.iter().any(|x| (x * 4_294_967_296.0).fract() != 0.0));
    }
}

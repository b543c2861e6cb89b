//! Attention over short sequences as plain loops over each (row, head), on slices.
//!
//! At the sizes of small RL jobs (ten positions, heads of 16) a tensor library's attention pays
//! its per-call costs hundreds of times a layer for a few hundred multiply-adds each. Here one
//! pass per (row, head) computes the scores, their softmax and the weighted values in registers
//! and cache. The runtime wraps it for tensors (`rlc-runtime`'s `model::short_attention`, which
//! also tests it against libtorch's attention).
//!
//! A crate of its own so that debug builds compile it optimised (`[profile.dev.package]` in the
//! workspace's `Cargo.toml`): unoptimised, these loops run tens of times slower than libtorch's
//! kernels, and a debug run — the tests', the planner calibration's — would time a different
//! program from the one users run.

/// Sizes of one attention call: `batch` rows, `heads` query heads reading `kv_heads` key/value
/// heads (query head `h` reads head `h / (heads / kv_heads)`), `queries` query positions over
/// `keys` key positions, heads `width` wide. Each (row, key/value head)'s keys start
/// `key_stride` positions after the previous one's (`keys`, or more: the first `keys` positions
/// of a preallocated cache's buffer, read where they lie).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub queries: usize,
    pub keys: usize,
    pub width: usize,
    pub key_stride: usize,
}

/// One call's inputs: queries `[batch, heads, queries, width]`, keys and values the first `keys`
/// positions of `[batch, kv_heads, key_stride, width]` (row-major, up to the last of those
/// positions), an additive bias `[batch, queries, keys]` (row-major, contiguous).
pub struct Inputs<'a> {
    pub shape: Shape,
    pub scale: f32,
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub bias: &'a [f32],
}

/// `softmax(q·kᵀ·scale + bias)·v` into `out` (`[batch, queries, heads·width]`: heads side by
/// side, the layout an output projection reads) and the probabilities into `probs` (`[batch,
/// heads, queries, keys]`). A query row whose every score is masked (the most negative float)
/// comes out uniform, as libtorch's attention does.
///
/// # Panics
/// If a slice's length does not match `x.shape`, `heads` is not a multiple of `kv_heads`, or
/// `key_stride` is less than `keys`.
pub fn attention(x: &Inputs, out: &mut [f32], probs: &mut [f32]) {
    let Shape {
        batch: b,
        heads: h,
        kv_heads: hk,
        queries: t,
        keys: s,
        width: d,
        key_stride,
    } = x.shape;
    assert!(
        hk > 0 && h % hk == 0,
        "{h} query heads over {hk} key/value heads"
    );
    assert!(
        key_stride >= s,
        "keys {key_stride} positions apart, {s} long"
    );
    // From the first (row, head)'s first key to the last one's last.
    let key_span = match b * hk {
        0 => 0,
        blocks => (blocks - 1) * key_stride * d + s * d,
    };
    for (name, len, want) in [
        ("queries", x.q.len(), b * h * t * d),
        ("keys", x.k.len(), key_span),
        ("values", x.v.len(), key_span),
        ("bias", x.bias.len(), b * t * s),
        ("output", out.len(), b * t * h * d),
        ("probabilities", probs.len(), b * h * t * s),
    ] {
        assert_eq!(len, want, "{name} of attention {:?}", x.shape);
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        unsafe { loops_avx2(x, out, probs) };
        return;
    }
    loops(x, out, probs);
}

// The loops, compiled twice: as the crate is (any x86-64) and with AVX2 for the CPUs that have
// it. The vector width changes no result: each of `dot`'s lanes adds in the same order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn loops_avx2(x: &Inputs, out: &mut [f32], probs: &mut [f32]) {
    loops(x, out, probs)
}

/// Per (row, head): scores, their softmax into `probs`, and the weighted values into `out`.
#[inline(always)]
fn loops(x: &Inputs, out: &mut [f32], probs: &mut [f32]) {
    let Shape {
        batch,
        heads: h,
        kv_heads,
        queries: t,
        keys: s,
        width: d,
        key_stride,
    } = x.shape;
    let group = h / kv_heads;
    for bi in 0..batch {
        for hi in 0..h {
            let kv = ((bi * kv_heads + hi / group) * key_stride) * d;
            let (keys, values) = (&x.k[kv..][..s * d], &x.v[kv..][..s * d]);
            let queries = &x.q[(bi * h + hi) * t * d..][..t * d];
            let bias = &x.bias[bi * t * s..][..t * s];
            let probs = &mut probs[(bi * h + hi) * t * s..][..t * s];
            for (ti, ((query, bias), probs)) in queries
                .chunks_exact(d)
                .zip(bias.chunks_exact(s))
                .zip(probs.chunks_exact_mut(s))
                .enumerate()
            {
                for ((p, key), &b) in probs.iter_mut().zip(keys.chunks_exact(d)).zip(bias) {
                    *p = dot(query, key) * x.scale + b;
                }
                softmax_in_place(probs);
                let row = &mut out[(bi * t + ti) * h * d + hi * d..][..d];
                row.fill(0.0);
                for (&p, value) in probs.iter().zip(values.chunks_exact(d)) {
                    axpy(p, value, row);
                }
            }
        }
    }
}

/// `Σ a·b`, accumulated in eight lanes so that the compiler vectorises it.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    lanes.iter().sum::<f32>() + tail
}

/// `y += a·x`.
#[inline(always)]
fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// A numerically stable softmax of `row`. Every score masked: the maximum is the most negative
/// float, every term `exp(0)`, the row uniform.
#[inline(always)]
fn softmax_in_place(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for x in row.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    for x in row.iter_mut() {
        *x /= sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook formula in f64, one output element at a time.
    fn reference(x: &Inputs) -> Vec<f64> {
        let Shape {
            batch,
            heads: h,
            kv_heads,
            queries: t,
            keys: s,
            width: d,
            key_stride,
        } = x.shape;
        let key = |t: &[f32], row: usize, head: usize, j: usize, c: usize| {
            f64::from(t[((row * kv_heads + head) * key_stride + j) * d + c])
        };
        let mut out = vec![0.0; batch * t * h * d];
        for bi in 0..batch {
            for hi in 0..h {
                let kvh = hi / (h / kv_heads);
                for ti in 0..t {
                    let scores: Vec<f64> = (0..s)
                        .map(|j| {
                            let dot: f64 = (0..d)
                                .map(|c| {
                                    f64::from(x.q[((bi * h + hi) * t + ti) * d + c])
                                        * key(x.k, bi, kvh, j, c)
                                })
                                .sum();
                            dot * f64::from(x.scale) + f64::from(x.bias[(bi * t + ti) * s + j])
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|v| (v - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..d {
                        out[(bi * t + ti) * h * d + hi * d + c] =
                            (0..s).map(|j| e[j] / sum * key(x.v, bi, kvh, j, c)).sum();
                    }
                }
            }
        }
        out
    }

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    #[test]
    fn equals_the_formula_with_grouped_heads_and_masked_keys() {
        // Widths that are and are not a multiple of eight (`dot`'s lanes and tail), fewer
        // queries than keys (a decode step), keys in a longer buffer (a preallocated cache),
        // and a query row that sees no key at all.
        for (t, s, d, key_stride) in [(5, 5, 16, 5), (1, 7, 12, 7), (3, 9, 20, 9), (1, 6, 12, 11)] {
            let shape = Shape {
                batch: 3,
                heads: 4,
                kv_heads: 2,
                queries: t,
                keys: s,
                width: d,
                key_stride,
            };
            let span = 5 * key_stride * d + s * d;
            let (q, k, v) = (values(3 * 4 * t * d, 1), values(span, 2), values(span, 3));
            let mut bias: Vec<f32> = values(3 * t * s, 4)
                .into_iter()
                .map(|r| if r > -0.4 { 0.0 } else { f32::MIN })
                .collect();
            bias[..s].fill(f32::MIN);
            let x = Inputs {
                shape,
                scale: 0.25,
                q: &q,
                k: &k,
                v: &v,
                bias: &bias,
            };
            let mut out = vec![0.0; 3 * t * 4 * d];
            let mut probs = vec![0.0; 3 * 4 * t * s];
            attention(&x, &mut out, &mut probs);
            let diff = out
                .iter()
                .zip(reference(&x))
                .map(|(a, b)| (f64::from(*a) - b).abs())
                .fold(0.0, f64::max);
            assert!(diff < 1e-5, "{t}x{s}x{d} ({key_stride} apart): {diff}");
            for row in probs.chunks_exact(s) {
                let sum: f32 = row.iter().sum();
                assert!((sum - 1.0).abs() < 1e-5, "{row:?}");
            }
            // The row that sees no key: uniform.
            assert!(probs[..s].iter().all(|p| (p - 1.0 / s as f32).abs() < 1e-6));
        }
    }

    #[test]
    #[should_panic(expected = "keys of attention")]
    fn a_slice_of_the_wrong_length_is_refused() {
        let shape = Shape {
            batch: 1,
            heads: 1,
            kv_heads: 1,
            queries: 2,
            keys: 2,
            width: 4,
            key_stride: 2,
        };
        let x = Inputs {
            shape,
            scale: 1.0,
            q: &[0.0; 8],
            k: &[0.0; 4],
            v: &[0.0; 8],
            bias: &[0.0; 4],
        };
        attention(&x, &mut [0.0; 8], &mut [0.0; 4]);
    }
}

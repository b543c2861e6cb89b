//! Attention over short sequences on the CPU, for tensors: [`rlc_attention_loops`]'s loops per
//! (row, head), the same function of the inputs as `scaled_dot_product_attention` with an
//! additive float bias, to float rounding (`tests::matches_libtorch`). At the sizes of small RL
//! jobs (ten positions, heads of 16) libtorch's attention pays its per-call costs hundreds of
//! times a layer — the flash kernel runs a blocked GEMM per (row, head), and `bmm` loops over
//! the batch with a `select`, a copy and an MKL call per matrix. Forward passes that are not
//! differentiated (the sampler's, a reference's or the old policy's log-probs) use it. A
//! differentiated pass keeps libtorch's kernel: this one's backward, run through a cut of the
//! autograd graph (tch has no custom autograd functions), cost more in the extra backward
//! segments than it saved (measured on the main job: train phase +0.7 ms a step).

use rlc_attention_loops::{Inputs, Shape, attention};
use tch::{Device, Kind, Tensor};

/// Work per (row, head) — query positions × key positions × head width — up to which these
/// loops are used: beyond it libtorch's blocked kernels win back their call costs.
const MAX_WORK_PER_HEAD: i64 = 16 * 1024;

/// Whether [`forward`] serves queries `q` (`[B, H, T, d]`) over keys `k` (`[B, Hk, S, d]`).
pub fn applies(q: &Tensor, k: &Tensor, bias: &Tensor) -> bool {
    let (qs, ks) = (q.size(), k.size());
    q.device() == Device::Cpu
        && matches!(q.kind(), Kind::Float | Kind::BFloat16 | Kind::Half)
        && [k.kind(), bias.kind()] == [q.kind(); 2]
        && qs.len() == 4
        && ks.len() == 4
        && qs[2] * ks[2] * qs[3] <= MAX_WORK_PER_HEAD
}

/// `softmax(q·kᵀ·scale + bias)·v` for queries `q` `[B, H, T, d]`, keys and values `k`, `v`
/// `[B, Hk, S, d]` (query head `h` reads key/value head `h / (H / Hk)`) and an additive `bias`
/// broadcastable to `[B, 1, T, S]`: the output as `[B, T, H·d]` (heads side by side, the
/// layout the output projection reads) and the attention probabilities `[B, H, T, S]`, which
/// a backward pass would need. No autograd graph is recorded. A bfloat16 or float16 pass runs
/// in float32 on copies (attention accumulated in float32, as flash kernels do) and gets its
/// output back in its own kind.
pub fn forward(q: &Tensor, k: &Tensor, v: &Tensor, bias: &Tensor, scale: f64) -> (Tensor, Tensor) {
    if q.kind() != Kind::Float {
        let wide = |t: &Tensor| t.to_kind(Kind::Float);
        let (out, probs) = forward(&wide(q), &wide(k), &wide(v), &wide(bias), scale);
        return (out.to_kind(q.kind()), probs);
    }
    let (qs, ks) = (q.size(), k.size());
    assert!(
        qs.len() == 4 && ks.len() == 4 && qs[0] == ks[0] && qs[3] == ks[3],
        "attention of queries {qs:?} over keys {ks:?}"
    );
    let (b, h, t, d, s) = (qs[0], qs[1], qs[2], qs[3], ks[2]);
    let q = q.contiguous();
    // Keys and values read where they lie when they are a prefix of a preallocated cache's
    // buffers (each (row, head)'s positions `key_stride` apart), else copied together.
    let (k, v, key_stride) = match (key_stride(k), key_stride(v)) {
        (Some(sk), Some(sv)) if sk == sv => (k.shallow_clone(), v.shallow_clone(), sk),
        _ => (k.contiguous(), v.contiguous(), s),
    };
    let bias = bias.expand([b, 1, t, s], false).contiguous();
    let out = Tensor::empty([b, t, h * d], (Kind::Float, Device::Cpu));
    let probs = Tensor::empty([b, h, t, s], (Kind::Float, Device::Cpu));
    let u = |x: i64| x as usize;
    let inputs = Inputs {
        shape: Shape {
            batch: u(b),
            heads: u(h),
            kv_heads: u(ks[1]),
            queries: u(t),
            keys: u(s),
            width: u(d),
            key_stride: u(key_stride),
        },
        scale: scale as f32,
        q: floats(&q),
        k: key_floats(&k, key_stride),
        v: key_floats(&v, key_stride),
        bias: floats(&bias),
    };
    attention(&inputs, floats_mut(&out), floats_mut(&probs));
    (out, probs)
}

/// Positions between one (row, head)'s keys and the next's in `t` (`[B, Hk, S, d]`), where its
/// heads, rows and widths lie as in a contiguous tensor: `S` when contiguous, a buffer's
/// capacity for its first `S` positions.
fn key_stride(t: &Tensor) -> Option<i64> {
    let (size, stride) = (t.size(), t.stride());
    let d = size[3];
    let positions = stride[1] / d.max(1);
    let laid_out = stride[3] == 1
        && stride[2] == d
        && stride[1] == positions * d
        && stride[0] == size[1] * stride[1]
        && positions >= size[2];
    (laid_out && t.kind() == Kind::Float && t.device() == Device::Cpu).then_some(positions)
}

/// The elements from the first key of `t` to its last, `t` laid out as [`key_stride`] says.
fn key_floats(t: &Tensor, key_stride: i64) -> &[f32] {
    let s = t.size();
    let span = match s[0] * s[1] {
        0 => 0,
        blocks => (blocks - 1) * key_stride * s[3] + s[2] * s[3],
    };
    debug_assert!(self::key_stride(t).is_some_and(|k| k == key_stride) || t.is_contiguous());
    // SAFETY: `t` is a float32 CPU tensor whose elements lie as in a contiguous `[B, Hk,
    // key_stride, d]` tensor (a prefix of such a buffer along positions, `key_stride`): the
    // span from its first element to its last is that buffer's memory, zeroed where not
    // written (`cache::buffer_like`). Borrowed for the slice's lifetime.
    unsafe { std::slice::from_raw_parts(t.data_ptr() as *const f32, span as usize) }
}

/// The elements of a contiguous float32 CPU tensor.
fn floats(t: &Tensor) -> &[f32] {
    debug_assert!(t.is_contiguous() && t.kind() == Kind::Float && t.device() == Device::Cpu);
    // SAFETY: `t` is a contiguous float32 CPU tensor (made so by the callers above), borrowed
    // for the slice's lifetime.
    unsafe { std::slice::from_raw_parts(t.data_ptr() as *const f32, t.numel()) }
}

/// The elements of a contiguous float32 CPU tensor this module just allocated and alone holds.
#[allow(clippy::mut_from_ref)]
fn floats_mut(t: &Tensor) -> &mut [f32] {
    debug_assert!(t.is_contiguous() && t.kind() == Kind::Float && t.device() == Device::Cpu);
    // SAFETY: as `floats`; the tensors written are fresh allocations of this module, not
    // shared with any other tensor or slice while the slice lives.
    unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, t.numel()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libtorch(q: &Tensor, k: &Tensor, v: &Tensor, bias: &Tensor, scale: f64) -> Tensor {
        let group = q.size()[1] / k.size()[1];
        let k = k.repeat_interleave_self_int(group, 1, None);
        let v = v.repeat_interleave_self_int(group, 1, None);
        let (b, _, t, _) = q.size4().unwrap();
        Tensor::scaled_dot_product_attention(q, &k, &v, Some(bias), 0.0, false, scale, false)
            .transpose(1, 2)
            .reshape([b, t, -1])
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[])
    }

    #[test]
    fn matches_libtorch() {
        tch::manual_seed(3);
        // Grouped heads (4 query heads over 2 key/value heads), widths that are not a multiple
        // of eight, fewer queries than keys (a decode step after a prefix), non-contiguous
        // inputs, keys and values that are the first positions of longer buffers (a
        // preallocated cache's), and a bias that masks keys as padding does, including a query
        // row that sees no key at all.
        for (t, s, d, room) in [(5, 5, 16, 0), (1, 7, 12, 0), (3, 9, 20, 0), (1, 6, 12, 5)] {
            let (b, h, hk) = (3, 4, 2);
            let q = Tensor::randn([b, t, h, d], (Kind::Float, Device::Cpu)).transpose(1, 2);
            let buffer = || Tensor::randn([b, hk, s + room, d], (Kind::Float, Device::Cpu));
            let (k, v) = (buffer().narrow(2, 0, s), buffer().narrow(2, 0, s));
            assert_eq!(key_stride(&k), Some(s + room));
            let allowed = Tensor::rand([b, 1, t, s], (Kind::Float, Device::Cpu)).gt(0.3);
            let _ = allowed.get(0).get(0).get(0).fill_(0);
            let bias = Tensor::where_scalar(&allowed, 0.0, f32::MIN as f64);
            let scale = 0.25;
            let (out, probs) = forward(&q, &k, &v, &bias, scale);
            let diff = max_diff(&out, &libtorch(&q, &k, &v, &bias, scale));
            assert!(diff < 1e-5, "{t}x{s}x{d}: {diff}");
            let sums = probs.sum_dim_intlist(-1, false, Kind::Float);
            assert!(max_diff(&sums, &sums.ones_like()) < 1e-5);
        }
    }

    #[test]
    fn a_row_that_sees_no_key_is_uniform() {
        let q = Tensor::randn([1, 1, 1, 4], (Kind::Float, Device::Cpu));
        let k = Tensor::randn([1, 1, 3, 4], (Kind::Float, Device::Cpu));
        let v = Tensor::randn([1, 1, 3, 4], (Kind::Float, Device::Cpu));
        let bias = Tensor::full([1, 1, 1, 3], f32::MIN as f64, (Kind::Float, Device::Cpu));
        let (out, probs) = forward(&q, &k, &v, &bias, 0.5);
        assert!(
            max_diff(
                &probs,
                &Tensor::full([1, 1, 1, 3], 1.0 / 3.0, (Kind::Float, Device::Cpu))
            ) < 1e-6
        );
        assert!(max_diff(&out, &v.mean_dim(2, false, Kind::Float).view([1, 1, 4])) < 1e-6);
    }

    #[test]
    fn applies_to_short_float_cpu_attention_only() {
        let f = |t: i64, s: i64, d: i64, kind: Kind| {
            let q = Tensor::zeros([1, 1, t, d], (kind, Device::Cpu));
            let k = Tensor::zeros([1, 1, s, d], (kind, Device::Cpu));
            let bias = Tensor::zeros([1, 1, t, s], (kind, Device::Cpu));
            applies(&q, &k, &bias)
        };
        assert!(f(10, 10, 16, Kind::Float));
        assert!(f(10, 10, 16, Kind::BFloat16));
        assert!(!f(10, 10, 16, Kind::Double));
        assert!(!f(256, 256, 64, Kind::Float));
    }

    #[test]
    fn a_bfloat16_pass_runs_in_float32_and_keeps_its_kind() {
        let (b, h, t, s, d) = (2, 2, 3, 6, 8);
        let options = (Kind::Float, Device::Cpu);
        let half = |t: Tensor| t.to_kind(Kind::BFloat16);
        let (q, k, v) = (
            half(Tensor::randn([b, h, t, d], options)),
            half(Tensor::randn([b, h, s, d], options)),
            half(Tensor::randn([b, h, s, d], options)),
        );
        let allowed = Tensor::rand([b, 1, t, s], options).gt(0.3);
        let bias = crate::model::additive_bias(&allowed, Kind::BFloat16);
        let (out, _) = forward(&q, &k, &v, &bias, 0.5);
        assert_eq!(out.kind(), Kind::BFloat16);
        let wide = |t: &Tensor| t.to_kind(Kind::Float);
        let (expected, _) = forward(&wide(&q), &wide(&k), &wide(&v), &wide(&bias), 0.5);
        assert!(wide(&out).equal(&expected.to_kind(Kind::BFloat16).to_kind(Kind::Float)));
    }
}

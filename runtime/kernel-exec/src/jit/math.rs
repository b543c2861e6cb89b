//! Inline `exp` for the generated code, scalar or four lanes (a call per element would cost
//! more than the memory traffic): Cody–Waite range reduction `x = n·ln2 + r` and a degree-6
//! polynomial for `e^r` (the coefficients of Cephes' `expf`), scaled by `2^n` through the
//! exponent bits. Relative error about 2 ulp; finite up to ln(f32::MAX), subnormal below
//! about -87.3 as torch's; NaN stays NaN, larger arguments give +inf, smaller 0.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, MemFlags, Value, types};
use cranelift_frontend::FunctionBuilder;

/// The arguments for which `2^n` (n = round(x / ln2)) is a normal `f32`, so that one
/// multiplication scales `e^r` ([`exp_in_range`]).
pub const EXP_RANGE: (f64, f64) = (-87.336_55, 88.376_26);

/// The arguments [`exp`] computes: ln(f32::MAX) above (inf beyond), and below the point
/// where `e^x` rounds to zero.
const EXP_DOMAIN: (f32, f32) = (-103.972_08, 88.722_84);

/// `e^x` of an `f32` (`lanes == 1`) or an `f32x4` (`lanes == 4`).
pub fn exp(b: &mut FunctionBuilder, x: Value, lanes: u8) -> Value {
    let vector = lanes > 1;
    let hi = constant(b, EXP_DOMAIN.1, vector);
    let lo = constant(b, EXP_DOMAIN.0, vector);
    // The clamp as selects that let NaN through, each comparing the value it passes on: the
    // form x86's `minps`/`maxps` implement (where `fmin`/`fmax`, IEEE, take eight).
    let above = b.ins().fcmp(FloatCC::LessThan, hi, x);
    let xc = select(b, vector, above, hi, x);
    let below = b.ins().fcmp(FloatCC::LessThan, xc, lo);
    let xc = select(b, vector, below, lo, xc);
    // n reaches 128 and -150 here, where 2^n is not a normal f32: scale by 2^(n - n/2) and
    // then by 2^(n/2) (each exact; the second rounds once into the subnormals).
    let (p, n) = exp_reduced(b, xc, vector);
    let (int, float) = lane_types(vector);
    let half = b.ins().sshr_imm(n, 1);
    let rest = b.ins().isub(n, half);
    let first = power_of_two(b, rest, int, float);
    let y = b.ins().fmul(p, first);
    let second = power_of_two(b, half, int, float);
    let y = b.ins().fmul(y, second);
    // Beyond the clamp: +inf above, 0 below (NaN compares false and stays NaN).
    let inf = constant(b, f32::INFINITY, vector);
    let y = select(b, vector, above, inf, y);
    let zero = constant(b, 0.0, vector);
    select(b, vector, below, zero, y)
}

/// [`exp`] of an `x` known to lie in [`EXP_RANGE`] or to be NaN (a clamped argument, as PPO's
/// log-ratio): no clamp before, no selects after, one scaling.
pub fn exp_in_range(b: &mut FunctionBuilder, xc: Value, lanes: u8) -> Value {
    let vector = lanes > 1;
    let (p, n) = exp_reduced(b, xc, vector);
    let (int, float) = lane_types(vector);
    let scale = power_of_two(b, n, int, float);
    b.ins().fmul(p, scale)
}

fn lane_types(vector: bool) -> (types::Type, types::Type) {
    if vector {
        (types::I32X4, types::F32X4)
    } else {
        (types::I32, types::F32)
    }
}

/// `2^n` for integer lanes `n` with `n + 127` in [1, 254]: the biased exponent's bits.
fn power_of_two(b: &mut FunctionBuilder, n: Value, int: types::Type, float: types::Type) -> Value {
    let bias = int_constant(b, 127, int);
    let biased = b.ins().iadd(n, bias);
    let bits = b.ins().ishl_imm(biased, 23);
    b.ins().bitcast(float, MemFlags::new(), bits)
}

/// `f32` or `f32x4` constant.
fn constant(b: &mut FunctionBuilder, v: f32, vector: bool) -> Value {
    let s = b.ins().f32const(v);
    if vector {
        b.ins().splat(types::F32X4, s)
    } else {
        s
    }
}

/// `i32` or `i32x4` constant (`int`, from [`lane_types`]).
fn int_constant(b: &mut FunctionBuilder, v: i64, int: types::Type) -> Value {
    let s = b.ins().iconst(types::I32, v);
    if int.is_vector() {
        b.ins().splat(int, s)
    } else {
        s
    }
}

/// `select`; lane masks of `fcmp` are integers, and `bitselect` wants them as floats.
fn select(b: &mut FunctionBuilder, vector: bool, cond: Value, yes: Value, no: Value) -> Value {
    if vector {
        let m = b.ins().bitcast(types::F32X4, MemFlags::new(), cond);
        b.ins().bitselect(m, yes, no)
    } else {
        b.ins().select(cond, yes, no)
    }
}

/// `e^r` for the reduced argument `r = x − n·ln2` of `x`, and `n` as integer lanes.
fn exp_reduced(b: &mut FunctionBuilder, xc: Value, vector: bool) -> (Value, Value) {
    let c = |b: &mut FunctionBuilder, v: f32| constant(b, v, vector);
    let log2e = c(b, std::f32::consts::LOG2_E);
    let t = b.ins().fmul(xc, log2e);
    // Round to nearest by adding and subtracting 1.5·2^23: the sum's low mantissa bits then
    // hold n itself, so no float-to-int conversion is needed for 2^n below.
    let magic = c(b, 12_582_912.0);
    let shifted = b.ins().fadd(t, magic);
    let n = b.ins().fsub(shifted, magic);
    let ln2_hi = c(b, 0.693_359_4);
    let ln2_lo = c(b, -2.121_944_4e-4);
    let r = b.ins().fmul(n, ln2_hi);
    let r = b.ins().fsub(xc, r);
    let r2 = b.ins().fmul(n, ln2_lo);
    let r = b.ins().fsub(r, r2);
    let coeffs = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ];
    let mut p = c(b, coeffs[0]);
    for &k in &coeffs[1..] {
        let m = b.ins().fmul(p, r);
        let kc = c(b, k);
        p = b.ins().fadd(m, kc);
    }
    let rr = b.ins().fmul(r, r);
    let p = b.ins().fmul(p, rr);
    let p = b.ins().fadd(p, r);
    let one = c(b, 1.0);
    let p = b.ins().fadd(p, one);
    // n as an integer: the sum's bits are those of 1.5·2^23 plus n.
    let (int, _) = lane_types(vector);
    let bits = b.ins().bitcast(int, MemFlags::new(), shifted);
    let offset = int_constant(b, 0x4b40_0000, int);
    (p, b.ins().isub(bits, offset))
}

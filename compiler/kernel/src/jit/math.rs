//! Inline `exp` for the generated code (a call per element would cost more than the
//! memory traffic): Cody–Waite range reduction `x = n·ln2 + r` and a degree-6 polynomial
//! for `e^r` (the coefficients of Cephes' `expf`), scaled by `2^n` through the exponent
//! bits. Relative error about 2 ulp; NaN stays NaN, large arguments give ±inf/0.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value, types};
use cranelift_frontend::FunctionBuilder;

pub fn exp(b: &mut FunctionBuilder, x: Value) -> Value {
    let c = |b: &mut FunctionBuilder, v: f32| b.ins().f32const(v);
    let hi = c(b, 88.376_26);
    let lo = c(b, -87.336_55);
    let xc = b.ins().fmin(x, hi);
    let xc = b.ins().fmax(xc, lo);
    let log2e = c(b, std::f32::consts::LOG2_E);
    let t = b.ins().fmul(xc, log2e);
    let n = b.ins().nearest(t);
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
    // 2^n from the exponent bits (n is in [-126, 127] after the clamp).
    let ni = b.ins().fcvt_to_sint_sat(types::I32, n);
    let biased = b.ins().iadd_imm(ni, 127);
    let bits = b.ins().ishl_imm(biased, 23);
    let scale = b
        .ins()
        .bitcast(types::F32, cranelift_codegen::ir::MemFlags::new(), bits);
    let y = b.ins().fmul(p, scale);
    // Beyond the clamp: +inf above, 0 below (NaN compares false and stays NaN).
    let inf = c(b, f32::INFINITY);
    let above = b.ins().fcmp(FloatCC::GreaterThan, x, hi);
    let y = b.ins().select(above, inf, y);
    let zero = c(b, 0.0);
    let below = b.ins().fcmp(FloatCC::LessThan, x, lo);
    b.ins().select(below, zero, y)
}

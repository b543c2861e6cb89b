//! The reference evaluator on its own: the semantics of each builtin it implements (masked
//! and whole-tensor reductions, broadcasting, scans, groups, casts, calls across dimension
//! names, defaults, `stop_grad`) on small hand-checked inputs, and its errors.

mod common;

use rlc_check::Checked;
use rlc_reference::{Arg, EvalError, Evaluator};
use tch::{Kind, Tensor};

const ROOT: &str = r#"
fn row_mean(x: f32[B, T], m: Mask[B, T]) -> f32[B] { mean(x, over: T, mask: m) }
fn row_max(x: f32[B, T], m: Mask[B, T]) -> f32[B] { max(x, over: T, mask: m) }
fn row_min(x: f32[B, T], m: Mask[B, T]) -> f32[B] { min(x, over: T, mask: m) }
fn row_sum(x: f32[B, T], m: Mask[B, T]) -> f32[B] { sum(x, over: T, mask: m) }
fn row_count(m: Mask[B, T]) -> f32[B] { count(m, over: T) }
fn total(x: f32[B, T]) -> f32 { sum(x) }
fn total_mean(x: f32[B, T], m: Mask[B, T]) -> f32 { mean(x, mask: m) }
fn spread(a: f32[B], x: f32[B, T]) -> f32[B, T] { a + x * 2.0 }
fn pick(m: Mask[B, T], a: f32[B]) -> f32[B, T] { where(m, a, -1.0) }
fn cumsum(x: f32[B, T]) -> f32[B, T] {
  scan forward over T with (acc = 0.0) { t ->
    acc = acc + x[t]
    emit acc
  }
}
fn rev_count(m: Mask[B, T]) -> f32[B, T] {
  scan reverse over T with (n = 0.0) { t ->
    n = n + f32(m[t])
    emit n
  }
}
fn gsum(x: f32[B], g: i32[B]) -> f32[B] { group_sum(x, by: g) }
fn gmean(x: f32[B], g: i32[B]) -> f32[B] { group_mean(x, by: g) }
fn gstd(x: f32[B], g: i32[B]) -> f32[B] { group_std(x, by: g) }
fn gcount(g: i32[B]) -> f32[B] { group_count(by: g) }
fn lse(z: f32[B, V]) -> f32[B] { logsumexp(z, over: V) }
fn soft(z: f32[B, V]) -> f32[B, V] { softmax(z, over: V) }
fn renamed(x: f32[N, S], m: Mask[N, S]) -> f32[N] { row_mean(x, m) + row_count(m) }
fn scaled(x: f32[B], k: f32 = 2.0) -> f32[B] { x * k }
fn as_float(m: Mask[B, T]) -> f32[B, T] { f32(m) }
fn half_grad(x: f32[B]) -> f32 { sum(stop_grad(x) * x) }
fn elementwise(x: f32[B]) -> f32[B] {
  clamp(pow(abs(x), 2.0), 0.5, 4.0) + max(sigmoid(x), tanh(x)) - min(sqrt(abs(x)), rsqrt(abs(x) + 1.0))
}
"#;

fn program() -> Checked {
    common::checked("kernels_reference.rl", ROOT)
}

fn eval<'a>(p: &'a Checked) -> Evaluator<'a> {
    Evaluator::new(&p.modules).with_float(Kind::Double)
}

fn mat(rows: &[&[f64]]) -> Tensor {
    let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_slice(&flat).view([rows.len() as i64, rows[0].len() as i64])
}

fn mask(rows: &[&[u8]]) -> Tensor {
    let flat: Vec<bool> = rows
        .iter()
        .flat_map(|r| r.iter().map(|b| *b != 0))
        .collect();
    Tensor::from_slice(&flat).view([rows.len() as i64, rows[0].len() as i64])
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&t.reshape([-1])).unwrap()
}

fn assert_values(what: &str, got: &Tensor, want: &[f64]) {
    let got = values(got);
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() < 1e-12,
            "{what}: expected {want:?}, got {got:?}"
        );
    }
}

fn call(p: &Checked, f: &str, args: Vec<(&str, Arg)>) -> Tensor {
    eval(p)
        .call(f, &args)
        .unwrap_or_else(|e| panic!("{f}: {e}"))
}

const NAN: f64 = f64::NAN;

#[test]
fn masked_reductions_take_only_real_entries_and_empty_rows_give_zero() {
    let p = program();
    let x = mat(&[&[1.0, 2.0, NAN], &[NAN, NAN, NAN], &[-3.0, 5.0, 4.0]]);
    let m = mask(&[&[1, 1, 0], &[0, 0, 0], &[1, 0, 1]]);
    let args = || vec![("x", (&x).into()), ("m", (&m).into())];
    assert_values("row_mean", &call(&p, "row_mean", args()), &[1.5, 0.0, 0.5]);
    assert_values("row_sum", &call(&p, "row_sum", args()), &[3.0, 0.0, 1.0]);
    assert_values("row_max", &call(&p, "row_max", args()), &[2.0, 0.0, 4.0]);
    assert_values("row_min", &call(&p, "row_min", args()), &[1.0, 0.0, -3.0]);
    let c = call(&p, "row_count", vec![("m", (&m).into())]);
    assert_values("row_count", &c, &[2.0, 0.0, 2.0]);
    assert_values("total_mean", &call(&p, "total_mean", args()), &[1.0]);
}

#[test]
fn whole_tensor_reductions_give_a_scalar() {
    let p = program();
    let x = mat(&[&[1.0, 2.0], &[3.0, 4.5]]);
    let got = call(&p, "total", vec![("x", x.into())]);
    assert_eq!(got.size(), Vec::<i64>::new());
    assert_values("total", &got, &[10.5]);
}

#[test]
fn a_leading_axis_vector_broadcasts_over_the_trailing_axis() {
    let p = program();
    let a = Tensor::from_slice(&[10.0, 20.0]);
    let x = mat(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
    let got = call(
        &p,
        "spread",
        vec![("a", a.shallow_clone().into()), ("x", x.into())],
    );
    assert_values("spread", &got, &[12.0, 14.0, 16.0, 28.0, 30.0, 32.0]);
    let m = mask(&[&[1, 0, 1], &[0, 1, 1]]);
    let got = call(&p, "pick", vec![("m", m.into()), ("a", a.into())]);
    assert_values("pick", &got, &[10.0, -1.0, 10.0, -1.0, 20.0, 20.0]);
}

#[test]
fn scans_run_in_order_and_stack_columns_along_the_axis() {
    let p = program();
    let x = mat(&[&[1.0, 2.0, 3.0, 4.0], &[0.5, 0.0, -1.0, 2.0]]);
    let got = call(&p, "cumsum", vec![("x", x.into())]);
    assert_eq!(got.size(), vec![2, 4]);
    assert_values("cumsum", &got, &[1.0, 3.0, 6.0, 10.0, 0.5, 0.5, -0.5, 1.5]);
    let m = mask(&[&[1, 1, 0, 1], &[0, 0, 0, 0]]);
    let got = call(&p, "rev_count", vec![("m", m.into())]);
    assert_values("rev_count", &got, &[3.0, 2.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
}

#[test]
fn group_reductions_follow_equal_ids() {
    let p = program();
    let x = Tensor::from_slice(&[1.0, 2.0, 4.0, 7.0, 0.1, 0.1, 0.1]);
    let g = Tensor::from_slice(&[5i32, 9, 5, 2, 8, 8, 8]);
    let args = || vec![("x", (&x).into()), ("g", (&g).into())];
    assert_values(
        "group_sum",
        &call(&p, "gsum", args()),
        &[5.0, 2.0, 5.0, 7.0, 0.3, 0.3, 0.3],
    );
    let mean = call(&p, "gmean", args());
    assert_values("group_mean", &mean.narrow(0, 0, 4), &[2.5, 2.0, 2.5, 7.0]);
    // Unbiased; 0 for a group of one, exactly 0 for equal values.
    let s = 4.5f64.sqrt();
    assert_values(
        "group_std",
        &call(&p, "gstd", args()),
        &[s, 0.0, s, 0.0, 0.0, 0.0, 0.0],
    );
    let c = call(&p, "gcount", vec![("g", (&g).into())]);
    assert_values("group_count", &c, &[2.0, 1.0, 2.0, 1.0, 3.0, 3.0, 3.0]);
}

#[test]
fn logsumexp_and_softmax_reduce_over_the_named_axis() {
    let p = program();
    let z = mat(&[&[0.0, 1.0, 2.0], &[5.0, 5.0, 5.0]]);
    let got = call(&p, "lse", vec![("z", (&z).into())]);
    let l0 = (1.0 + 1f64.exp() + 2f64.exp()).ln();
    assert_values("logsumexp", &got, &[l0, 5.0 + 3f64.ln()]);
    let got = call(&p, "soft", vec![("z", z.into())]);
    let third = 1.0 / 3.0;
    let row0: Vec<f64> = [0.0, 1.0, 2.0]
        .iter()
        .map(|v: &f64| (v - l0).exp())
        .collect();
    assert_values(
        "softmax",
        &got,
        &[row0[0], row0[1], row0[2], third, third, third],
    );
}

#[test]
fn calls_translate_dimension_names_and_defaults_apply() {
    let p = program();
    let x = mat(&[&[1.0, 3.0], &[2.0, 2.0], &[NAN, NAN]]);
    let m = mask(&[&[1, 1], &[1, 0], &[0, 0]]);
    let got = eval(&p)
        .call_named("renamed", &[("x", x.into()), ("m", m.into())])
        .unwrap();
    assert_eq!(got.dims, vec!["N".to_string()]);
    assert_values("renamed", &got.tensor, &[4.0, 3.0, 0.0]);
    let x = Tensor::from_slice(&[1.0, -2.0]);
    assert_values(
        "default",
        &call(&p, "scaled", vec![("x", (&x).into())]),
        &[2.0, -4.0],
    );
    let got = call(&p, "scaled", vec![("x", x.into()), ("k", 0.5.into())]);
    assert_values("given", &got, &[0.5, -1.0]);
}

#[test]
fn casts_of_masks_take_the_evaluators_float_type() {
    let p = program();
    let m = mask(&[&[1, 0]]);
    let got = Evaluator::new(&p.modules)
        .call("as_float", &[("m", (&m).into())])
        .unwrap();
    assert_eq!(got.kind(), Kind::Float);
    let got = eval(&p).call("as_float", &[("m", m.into())]).unwrap();
    assert_eq!(got.kind(), Kind::Double);
    assert_values("as_float", &got, &[1.0, 0.0]);
}

#[test]
fn element_wise_builtins_match_their_definitions() {
    let p = program();
    let xs = [-2.5, -0.3, 0.0, 0.7, 1.9];
    let got = call(
        &p,
        "elementwise",
        vec![("x", Tensor::from_slice(&xs).into())],
    );
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    let want: Vec<f64> = xs
        .iter()
        .map(|&x: &f64| {
            (x.abs().powi(2)).clamp(0.5, 4.0) + sig(x).max(x.tanh())
                - x.abs().sqrt().min(1.0 / (x.abs() + 1.0).sqrt())
        })
        .collect();
    assert_values("elementwise", &got, &want);
}

#[test]
fn stop_grad_cuts_the_gradient() {
    let p = program();
    let x = Tensor::from_slice(&[1.5, -2.0]).set_requires_grad(true);
    let y = call(&p, "half_grad", vec![("x", (&x).into())]);
    y.backward();
    assert_values("d/dx sum(sg(x)·x)", &x.grad(), &[1.5, -2.0]);
}

#[test]
fn masked_entries_get_no_gradient_even_when_nan() {
    let p = program();
    let x = mat(&[&[1.0, NAN, 3.0], &[2.0, 7.0, NAN]]).set_requires_grad(true);
    let m = mask(&[&[1, 0, 1], &[1, 1, 0]]);
    let y = call(&p, "row_max", vec![("x", (&x).into()), ("m", (&m).into())]).sum(Kind::Double);
    y.backward();
    assert_values("d/dx Σ max", &x.grad(), &[0.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
}

fn err(p: &Checked, f: &str, args: Vec<(&str, Arg)>) -> EvalError {
    match eval(p).call(f, &args) {
        Ok(t) => panic!("{f} gave {t} instead of an error"),
        Err(e) => e,
    }
}

#[test]
fn errors_are_values() {
    let p = program();
    let x = || Tensor::from_slice(&[1.0, 2.0]);
    let e = err(&p, "nope", vec![]);
    assert!(
        matches!(e, EvalError::UnknownFunction(ref f) if f == "nope"),
        "{e}"
    );
    let e = err(&p, "scaled", vec![]);
    assert!(
        matches!(e, EvalError::MissingArgument { ref name, .. } if name == "x"),
        "{e}"
    );
    let e = err(&p, "scaled", vec![("x", x().into()), ("y", 1.0.into())]);
    assert!(
        matches!(e, EvalError::UnknownArgument { ref name, .. } if name == "y"),
        "{e}"
    );
    // `B` is 2 in `a` and 3 in `x`.
    let e = err(
        &p,
        "spread",
        vec![
            ("a", x().into()),
            (
                "x",
                Tensor::zeros([3, 4], (Kind::Double, tch::Device::Cpu)).into(),
            ),
        ],
    );
    assert!(matches!(e, EvalError::ShapeMismatch { .. }), "{e}");
    // A vector where the signature has `[B, T]`.
    let e = err(&p, "total", vec![("x", x().into())]);
    assert!(matches!(e, EvalError::ShapeMismatch { .. }), "{e}");
    // A float tensor as a mask.
    let e = err(&p, "row_count", vec![("m", mat(&[&[1.0, 0.0]]).into())]);
    assert!(matches!(e, EvalError::DtypeMismatch { .. }), "{e}");
    // Float group ids.
    let e = err(&p, "gcount", vec![("g", x().into())]);
    assert!(matches!(e, EvalError::DtypeMismatch { .. }), "{e}");
}

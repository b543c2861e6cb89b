//! The kernel IR's runners — fused kernels (Cranelift JIT) and the eager runner — against the
//! reference evaluator, for every function of `std.algo`: inputs made from each signature (odd
//! sizes, an empty row, rows with holes, an all-masked batch, single-sample groups, NaN at
//! padded positions), rows split over three threads. Derivatives of every scalar `fn` against
//! autograd, the eager runner's through autograd too.

mod common;

use common::kernels::{fused, kernel};
use rlc_check::Checked;
use rlc_kernel::KernelError;
use rlc_reference::Evaluator;
use rlc_runtime::kernels::eager::Eager;
use rlc_runtime::kernels::fused::FusedError;
use rlc_runtime::rng::Rng;
use rlc_syntax::ast::{Dim, FnDef, ItemKind};
use tch::{Kind, Tensor};

const ROOT: &str = r#"
import std.algo

/// The PPO loss as an `update` block computes it.
fn ppo_token_mean(logp: f32[B, T], old: f32[B, T], adv: f32[B, T], m: Mask[B, T]) -> f32 {
  algo.token_mean(algo.ppo_clip(logp, old, adv, eps: 0.2), m)
}

/// The off-policy corrected PPO losses as an `update` block computes them: derivatives through
/// a weight that has none (`stop_grad`), truncated (TIS) or filtered (decoupled PPO).
fn tis_token_mean(logp: f32[B, T], old: f32[B, T], behav: f32[B, T], adv: f32[B, T], m: Mask[B, T]) -> f32 {
  algo.token_mean(algo.ppo_clip_tis(logp, old, behav, adv, cap: 2.0), m)
}

fn decoupled_token_mean(logp: f32[B, T], prox: f32[B, T], behav: f32[B, T], adv: f32[B, T], m: Mask[B, T]) -> f32 {
  algo.token_mean(algo.decoupled_ppo_clip(logp, prox, behav, adv, cap: 2.0), m)
}

/// Everything the fused kernels lower: min/max reductions, casts, integer math, softmax over T.
fn odds_and_ends(x: f32[B, T], m: Mask[B, T], g: i32[B]) -> f32[B, T] {
  let hi = max(x, over: T, mask: m)
  let lo = min(x, over: T)
  let k = f32(g % 3) + f32(i32(where(m, x, 0.0) * 2.0))
  softmax(x, over: T) + where(m, hi - lo, pow(abs(x), 1.5)) + k + tanh(x) * sigmoid(x) + log(1.0 + x * x) / sqrt(2.0 + x * x)
}

/// Clamps as the language defines them, `min(max(x, lo), hi)` (so `lo > hi` gives `hi`), and
/// `exp` of clamped arguments: inside `exp`'s finite range the JIT leaves out its own clamp;
/// near its ends `e^x` is still finite (up to ln(f32::MAX)) or subnormal (down to ~-103.9).
fn clamps(x: f32[B, T]) -> f32[B, T] {
  let edges = exp(clamp(x * 100.0, 87.0, 88.7)) * 1e-38 + exp(clamp(x * 100.0, -103.0, -88.0)) * 1e38
  clamp(x, 0.5, -0.5) + exp(clamp(x * 30.0, -60.0, 60.0)) * 1e-20 + exp(clamp(x * 100.0, -200.0, 5.0)) + edges
}

/// Scans as the JIT runs them four rows at a time: a forward scan from a per-row start,
/// reduced in its own loop (a sum, and a maximum that is 0 on an empty row) and read back by
/// a later scan (from its scratch rows).
fn scans_in_lanes(x: f32[B, T], m: Mask[B, T], g: i32[B]) -> f32[B, T] {
  let run = scan forward over T with (acc = f32(g) * 0.25) { t ->
    acc = where(m[t], acc * 0.5 + x[t], acc - 0.125)
    emit acc
  }
  let back = scan reverse over T with (c = 0.0) { t ->
    c = c * 0.9 + run[t]
    emit c
  }
  run / (1.0 + abs(sum(run, over: T, mask: m))) + back + max(run, over: T, mask: m)
}

/// A scalar loss through every differentiable operation.
fn everything_loss(x: f32[B, T], y: f32[B, T], m: Mask[B, T]) -> f32 {
  let a = exp(clamp(x, -2.0, 2.0)) * sigmoid(y) - tanh(x * y) / (1.5 + abs(y))
  let b = max(a, x) + min(a, y) + sqrt(1.0 + y * y) + rsqrt(2.0 + x * x) + log(2.0 + y * y)
  let c = logsumexp(b, over: T) + mean(b * y, over: T, mask: m) + max(b, over: T, mask: m)
  mean(c) + sum(b, mask: m) / (count(m) + 1.0) + sum(pow(1.5 + x * x, 0.7))
}
"#;

fn program() -> Checked {
    common::checked("kernels_fused.rl", ROOT)
}

/// The `fn`s of `std.algo` and of the root module, with their definitions.
fn functions(p: &Checked) -> Vec<(String, FnDef)> {
    let mut out = Vec::new();
    for (mi, m) in p.modules.modules.iter().enumerate() {
        let prefix = match (mi, m.name.as_str()) {
            (0, _) => String::new(),
            (_, "std.algo") => "std.algo.".into(),
            _ => continue,
        };
        for item in &m.ast.items {
            if let ItemKind::Fn(f) = &item.kind {
                out.push((format!("{prefix}{}", f.name.name), f.clone()));
            }
        }
    }
    out
}

struct Case {
    b: usize,
    t: usize,
    mask: Vec<bool>,
}

fn cases() -> Vec<Case> {
    let mut rng = Rng::new(7);
    let mut out = Vec::new();
    for (b, t) in [(7, 5), (11, 9), (3, 1), (9, 13), (1, 4), (33, 17)] {
        let mask = (0..b * t)
            .map(|i| {
                let (row, col) = (i / t, i % t);
                // Row 0 empty, row 1 full, holes elsewhere.
                row != 0 && (row == 1 || (rng.uniform() < 0.7 && col < t))
            })
            .collect();
        out.push(Case { b, t, mask });
    }
    out.push(Case {
        b: 5,
        t: 6,
        mask: vec![false; 30],
    });
    out
}

fn value_for(name: &str, t: usize) -> f64 {
    match name {
        "eps" | "eps_low" | "eps_high" => 0.2,
        "c" => 3.0,
        // Importance ratios `exp(N(0, 2))` fall on both sides of it.
        "cap" => 2.0,
        "max_len" => t as f64,
        "buffer" => 2.0,
        "clip" => 0.5,
        "horizon" => 100.0,
        "target" => 0.1,
        "n_steps" => 3.0,
        "factor" => 1.0,
        _ => 0.9,
    }
}

/// Arguments for every parameter of `def` (`poison`: NaN at padded positions of floats).
fn arguments(def: &FnDef, case: &Case, rng: &mut Rng, poison: bool) -> Vec<(String, Tensor)> {
    let (b, t) = (case.b as i64, case.t as i64);
    let mask = Tensor::from_slice(&case.mask).view([b, t]);
    let mut out = Vec::new();
    for p in &def.params {
        let Some(ty) = &p.ty else { continue };
        let dims: Vec<String> = ty
            .dims
            .iter()
            .flatten()
            .map(|d| match d {
                Dim::Named(id) => id.name.clone(),
                Dim::Size(n, _) => n.to_string(),
            })
            .collect();
        let name = p.name.name.as_str();
        let tensor = match (ty.name.name.as_str(), dims.len()) {
            ("Mask" | "bool", 2) => mask.shallow_clone(),
            ("Mask" | "bool", 1) => mask.any_dim(1, false),
            ("i32" | "i64", 1) => {
                let pattern = [7, 3, 3, 7, 0, 3, 11, 7, 7, 5, 3];
                let ids: Vec<i32> = (0..b as usize)
                    .map(|i| pattern[i % pattern.len()])
                    .collect();
                Tensor::from_slice(&ids)
            }
            ("f32", 2) => {
                let v: Vec<f32> = (0..b * t)
                    .map(|i| {
                        if poison && !case.mask[i as usize] {
                            f32::NAN
                        } else if rng.uniform() < 0.1 {
                            // Exact ties, as rule-based rewards and equal log-probs have.
                            1.0
                        } else {
                            rng.normal() as f32
                        }
                    })
                    .collect();
                Tensor::from_slice(&v).view([b, t])
            }
            ("f32", 1) => {
                let v: Vec<f32> = (0..b)
                    .map(|_| {
                        if rng.uniform() < 0.3 {
                            1.0
                        } else {
                            rng.normal() as f32
                        }
                    })
                    .collect();
                Tensor::from_slice(&v)
            }
            ("f32", 0) => Tensor::from(value_for(name, case.t) as f32),
            _ => continue,
        };
        out.push((name.to_string(), tensor));
    }
    out
}

fn close(got: f32, want: f32) -> bool {
    (got.is_nan() && want.is_nan())
        || got == want
        || (got - want).abs() <= 2e-4 * (1.0 + want.abs())
}

fn assert_close(what: &str, got: &Tensor, want: &Tensor, under: Option<&Tensor>) {
    assert_eq!(got.size(), want.size(), "{what}: shape");
    let g = Vec::<f32>::try_from(got.to_kind(Kind::Float).flatten(0, -1)).unwrap();
    let w = Vec::<f32>::try_from(want.to_kind(Kind::Float).flatten(0, -1)).unwrap();
    let u: Option<Vec<bool>> = under.map(|m| {
        Vec::<bool>::try_from(
            m.expand(want.size().as_slice(), false)
                .flatten(0, -1)
                .contiguous(),
        )
        .unwrap()
    });
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if u.as_ref().is_some_and(|u| !u[i]) {
            continue;
        }
        assert!(close(*a, *b), "{what}[{i}]: fused {a}, reference {b}");
    }
}

/// Named arguments of either evaluator.
fn scalar_inputs<'a, A: From<&'a Tensor>>(args: &'a [(String, Tensor)]) -> Vec<(&'a str, A)> {
    args.iter().map(|(n, t)| (n.as_str(), A::from(t))).collect()
}

#[test]
fn every_std_function_matches_the_reference() {
    let p = program();
    let eval = Evaluator::new(&p.modules);
    let mut rng = Rng::new(11);
    let mut compared = 0;
    for (name, def) in functions(&p) {
        let given: Vec<&str> = def.params.iter().map(|x| x.name.name.as_str()).collect();
        let k = kernel(&p.bodies, &name, &given, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let fused = match rlc_runtime::kernels::fused::Fused::compile(&k) {
            Ok(f) => f,
            Err(FusedError::Kernel(KernelError::Unsupported { what, .. })) => {
                // The only std fn beyond two dimensions: entropy over the vocabulary.
                assert!(name.ends_with("entropy"), "{name}: {what}");
                assert!(what.contains("more than two dimensions"), "{name}: {what}");
                continue;
            }
            Err(e) => panic!("{name}: {e}"),
        };
        for case in cases() {
            for poison in [false, true] {
                let args = arguments(&def, &case, &mut rng, poison);
                let want = eval
                    .call(&name, &scalar_inputs(&args))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let got = fused
                    .run(&scalar_inputs(&args), 3)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let what = format!("{name} ({}×{}, poison {poison})", case.b, case.t);
                assert_close(&what, &got[0], &want, None);
                let eager = Eager::default()
                    .run_args(&k, &scalar_inputs(&args), tch::Device::Cpu)
                    .unwrap_or_else(|e| panic!("{name} eagerly: {e}"));
                assert_close(&format!("{what} eagerly"), &eager[0], &want, None);
                compared += 1;
            }
        }
    }
    assert!(compared > 40 * 14, "only {compared} comparisons");
}

#[test]
fn defaults_apply_when_parameters_are_left_out() {
    let p = program();
    let case = &cases()[1];
    let mut rng = Rng::new(3);
    let fused = fused(
        &p.bodies,
        "std.algo.ppo_clip",
        &["logp", "old_logp", "adv"],
        &[],
    )
    .unwrap();
    let (_, def) = functions(&p)
        .into_iter()
        .find(|(n, _)| n == "std.algo.ppo_clip")
        .unwrap();
    let args: Vec<(String, Tensor)> = arguments(&def, case, &mut rng, false)
        .into_iter()
        .filter(|(n, _)| n != "eps")
        .collect();
    let want = Evaluator::new(&p.modules)
        .call("std.algo.ppo_clip", &scalar_inputs(&args))
        .unwrap();
    let got = fused.run(&scalar_inputs(&args), 2).unwrap();
    assert_close("ppo_clip with default eps", &got[0], &want, None);
}

/// The `f32[B, T]` parameters of a scalar `fn` (its derivatives' inputs); none for the others.
fn differentiable(def: &FnDef) -> Vec<&str> {
    let scalar = def
        .ret
        .as_ref()
        .is_some_and(|r| r.name.name == "f32" && r.dims.as_ref().is_none_or(Vec::is_empty));
    if !scalar {
        return Vec::new();
    }
    def.params
        .iter()
        .filter(|x| {
            x.ty.as_ref().is_some_and(|t| {
                t.name.name == "f32" && t.dims.as_ref().is_some_and(|d| d.len() == 2)
            })
        })
        .map(|x| x.name.name.as_str())
        .collect()
}

#[test]
fn derivatives_match_autograd() {
    let p = program();
    let mut rng = Rng::new(5);
    let mut checked_grads = 0;
    for (name, def) in functions(&p) {
        let wrt = differentiable(&def);
        if wrt.is_empty() {
            continue;
        }
        let given: Vec<&str> = def.params.iter().map(|x| x.name.name.as_str()).collect();
        let fused = fused(&p.bodies, &name, &given, &wrt).unwrap_or_else(|e| panic!("{name}: {e}"));
        for case in cases() {
            let args = arguments(&def, &case, &mut rng, false);
            let leaves: Vec<(String, Tensor)> = args
                .iter()
                .map(|(n, t)| {
                    let t = if wrt.contains(&n.as_str()) {
                        t.copy().set_requires_grad(true)
                    } else {
                        t.shallow_clone()
                    };
                    (n.clone(), t)
                })
                .collect();
            let loss = Evaluator::new(&p.modules)
                .call(&name, &scalar_inputs(&leaves))
                .unwrap();
            // A fraction of clipped tokens, say, has no gradient at all.
            if loss.requires_grad() {
                loss.backward();
            }
            let got = fused.run(&scalar_inputs(&args), 3).unwrap();
            assert_close(&format!("{name} loss"), &got[0], &loss.detach(), None);
            for (i, w) in wrt.iter().enumerate() {
                let leaf = &leaves.iter().find(|(n, _)| n == w).unwrap().1;
                let want = leaf.grad();
                let want = if want.defined() {
                    want
                } else {
                    leaf.zeros_like()
                };
                assert_close(
                    &format!("{name}: d{w} ({}×{})", case.b, case.t),
                    &got[1 + i],
                    &want,
                    None,
                );
                checked_grads += 1;
            }
        }
    }
    assert!(
        checked_grads > 50,
        "only {checked_grads} gradients compared"
    );
}

#[test]
fn a_derivative_through_a_scan_is_an_error() {
    let p = common::checked(
        "scan_loss.rl",
        r#"
import std.algo { gae }
fn scan_loss(r: f32[B, T], v: f32[B, T], m: Mask[B, T]) -> f32 {
  sum(gae(r, v, m, gamma: 1.0, lam: 1.0), mask: m)
}
"#,
    );
    match fused(&p.bodies, "scan_loss", &["r", "v", "m"], &["v"]) {
        Err(FusedError::Kernel(KernelError::NoDerivative(why))) => {
            assert!(why.contains("scan"), "{why}")
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("a derivative through a scan was accepted"),
    }
}

/// On a machine with CUDA: every std `fn` (and the scalar ones' derivatives) as CUDA C on
/// libtorch's CUDA tensors equals the CPU JIT. Skips, saying so, without CUDA — unless
/// `RLC_REQUIRE_GPU` is set (`scripts/gpu-check.sh`), where that is a failure.
#[test]
fn cuda_tensors_match_the_cpu_jit() {
    use common::kernels::fused_cuda;
    if let Err(why) = rlc_runtime::device::cuda_devices() {
        assert!(
            std::env::var_os("RLC_REQUIRE_GPU").is_none(),
            "RLC_REQUIRE_GPU is set and CUDA is not available: {why}"
        );
        eprintln!("cuda_tensors_match_the_cpu_jit: skipped (CUDA is not available: {why})");
        return;
    }
    let p = program();
    let mut rng = Rng::new(12);
    let mut compared = 0;
    for (name, def) in functions(&p) {
        let given: Vec<&str> = def.params.iter().map(|x| x.name.name.as_str()).collect();
        // With derivatives where the fused back end has them (not through scans).
        let wrt = differentiable(&def);
        let wrt = if fused(&p.bodies, &name, &given, &wrt).is_ok() {
            wrt
        } else {
            Vec::new()
        };
        let (Ok(cpu), gpu) = (
            fused(&p.bodies, &name, &given, &wrt),
            fused_cuda(&p.bodies, &name, &given, &wrt, 0),
        ) else {
            continue;
        };
        let gpu = gpu.unwrap_or_else(|e| panic!("{name} on CUDA: {e}"));
        for case in cases() {
            let args = arguments(&def, &case, &mut rng, true);
            let on_gpu: Vec<(String, Tensor)> = args
                .iter()
                .map(|(n, t)| (n.clone(), t.to_device(tch::Device::Cuda(0))))
                .collect();
            let want = cpu.run(&scalar_inputs(&args), 2).unwrap();
            let got = gpu
                .run(&scalar_inputs(&on_gpu))
                .unwrap_or_else(|e| panic!("{name} on CUDA: {e}"));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.device(), tch::Device::Cuda(0), "{name}: output {i}");
                assert_close(
                    &format!("{name} output {i} on CUDA ({}×{})", case.b, case.t),
                    &g.to_device(tch::Device::Cpu),
                    w,
                    None,
                );
            }
            compared += 1;
        }
    }
    println!("compared {compared} CUDA runs with the CPU JIT");
    assert!(compared > 40 * 7, "only {compared} comparisons");
}

//! Shared by the `cuda_*` tests: a checked program with std, the `fn`s of `std.algo` as
//! kernels, random inputs for a kernel's signature, the JIT's outputs as the reference, and
//! a tolerant comparison.

#![allow(dead_code)]

use rlc_check::{Checked, SourceLoader};
use rlc_diagnostics::Files;
use rlc_kernel::grad::differentiate;
use rlc_kernel::ir::{Elem, Kernel};
use rlc_kernel::lower::lower_fn;
use rlc_kernel_exec::jit::{Jit, Slice, SliceMut};
use rlc_syntax::ast::ItemKind;

struct NoFiles;

impl SourceLoader for NoFiles {
    fn read(&self, path: &str) -> Result<String, String> {
        Err(format!("{path}: not found"))
    }
}

/// std; the PPO loss as an `update` block computes it (a scalar, so it has a derivative);
/// operations std does not use (those of `runtime/tests/kernels_fused.rs`, and `%` on floats);
/// min and max where NaN must win.
pub const ROOT: &str = r#"import std.algo

fn ppo_token_mean(logp: f32[B, T], old: f32[B, T], adv: f32[B, T], m: Mask[B, T]) -> f32 {
  algo.token_mean(algo.ppo_clip(logp, old, adv, eps: 0.2), m)
}

fn odds_and_ends(x: f32[B, T], m: Mask[B, T], g: i32[B]) -> f32[B, T] {
  let hi = max(x, over: T, mask: m)
  let lo = min(x, over: T)
  let k = f32(g % 3) + f32(i32(where(m, x, 0.0) * 2.0)) + (x * 3.0) % 2.0
  softmax(x, over: T) + where(m, hi - lo, pow(abs(x), 1.5)) + k + tanh(x) * sigmoid(x) + log(1.0 + x * x) / sqrt(2.0 + x * x)
}

fn everything_loss(x: f32[B, T], y: f32[B, T], m: Mask[B, T]) -> f32 {
  let a = exp(clamp(x, -2.0, 2.0)) * sigmoid(y) - tanh(x * y) / (1.5 + abs(y))
  let b = max(a, x) + min(a, y) + sqrt(1.0 + y * y) + rsqrt(2.0 + x * x) + log(2.0 + y * y)
  let c = logsumexp(b, over: T) + mean(b * y, over: T, mask: m) + max(b, over: T, mask: m)
  mean(c) + sum(b, mask: m) / (count(m) + 1.0) + sum(pow(1.5 + x * x, 0.7))
}

fn row_min(x: f32[B, T], m: Mask[B, T]) -> f32[B] {
  min(x, over: T) + max(x, over: T, mask: m)
}

fn row_max(x: f32[B, T], m: Mask[B, T]) -> f32[B] {
  max(x, over: T) + min(x, over: T, mask: m)
}

fn clip_max(x: f32[B, T], m: Mask[B, T]) -> f32[B, T] {
  where(m, x, max(x, 0.0))
}

fn clip_min(x: f32[B, T], m: Mask[B, T]) -> f32[B, T] {
  where(m, x, min(x, 1.0))
}

/// A scan reduced in its own loop and read back by a later scan from its scratch row.
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

/// Scans that are not affine in their carries (a running max; a product of two carries): the
/// CUDA C runs them on one thread of the row's block, the affine ones in chunks.
fn not_affine_scans(x: f32[B, T], m: Mask[B, T]) -> f32[B, T] {
  let peak = scan forward over T with (acc = -100.0) { t ->
    acc = where(m[t], max(acc, x[t]), acc)
    emit acc
  }
  let decay = scan reverse over T with (a = 1.0, b = 0.5) { t ->
    a = a * 0.5 + x[t] * 0.25
    b = where(m[t], b * a * 0.5 + 0.1, b)
    emit a + b
  }
  peak + decay + sum(decay, over: T, mask: m)
}
"#;

pub fn program() -> Checked {
    let mut files = Files::new();
    rlc_check::check(&NoFiles, &mut files, "cuda.rl", ROOT.into())
}

/// `function` lowered with every parameter given (the defaults become inputs too).
pub fn kernel(p: &Checked, function: &str) -> Kernel {
    let (module, name) = match function.rsplit_once('.') {
        Some((m, n)) => (m, n),
        None => ("", function),
    };
    let m = p
        .modules
        .modules
        .iter()
        .enumerate()
        .find(|(i, m)| {
            if module.is_empty() {
                *i == 0
            } else {
                m.name == module
            }
        })
        .map(|(_, m)| m)
        .unwrap_or_else(|| panic!("no module for {function}"));
    let params: Vec<String> = m
        .ast
        .items
        .iter()
        .find_map(|item| match &item.kind {
            ItemKind::Fn(f) if f.name.name == name => {
                Some(f.params.iter().map(|p| p.name.name.clone()).collect())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no fn {function}"));
    let given: Vec<&str> = params.iter().map(String::as_str).collect();
    lower_fn(&p.bodies, function, &given).unwrap_or_else(|e| panic!("{function}: {e}"))
}

/// Every `fn` of `std.algo` the JIT compiles, as kernels.
pub fn std_kernels(p: &Checked) -> Vec<Kernel> {
    let m = p
        .modules
        .modules
        .iter()
        .find(|m| m.name == "std.algo")
        .expect("std.algo");
    let mut out = Vec::new();
    for item in &m.ast.items {
        if let ItemKind::Fn(f) = &item.kind {
            let k = kernel(p, &format!("std.algo.{}", f.name.name));
            if Jit::compile(&k).is_ok() {
                out.push(k);
            }
        }
    }
    out
}

/// std's kernels and the derivatives of its scalar ones with respect to their float tensors.
pub fn kernels_with_derivatives() -> Vec<Kernel> {
    let p = program();
    let mut out = std_kernels(&p);
    let mut grads = Vec::new();
    for k in &out {
        let wrt: Vec<&str> = k
            .inputs
            .iter()
            .filter(|i| i.elem == Elem::F32 && i.level > 0)
            .map(|i| i.name.as_str())
            .collect();
        if let Ok(g) = differentiate(k, "result", &wrt) {
            grads.push(g);
        }
    }
    out.extend(grads);
    out.push(
        differentiate(&kernel(&p, "ppo_token_mean"), "result", &["logp"])
            .expect("ppo_token_mean derivative"),
    );
    for f in [
        "odds_and_ends",
        "row_min",
        "row_max",
        "clip_max",
        "clip_min",
        "scans_in_lanes",
        "not_affine_scans",
    ] {
        out.push(kernel(&p, f));
    }
    let e = kernel(&p, "everything_loss");
    out.push(differentiate(&e, "result", &["x", "y"]).expect("everything_loss derivative"));
    out.push(e);
    out
}

/// xorshift64*: reproducible inputs without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 40) as f32 / (1u64 << 24) as f32
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    I32(Vec<i32>),
    Bool(Vec<u8>),
}

impl Data {
    pub fn zeros(elem: Elem, n: usize) -> Data {
        match elem {
            Elem::F32 => Data::F32(vec![0.0; n]),
            Elem::I32 => Data::I32(vec![0; n]),
            Elem::Bool => Data::Bool(vec![0; n]),
        }
    }

    pub fn slice(&self) -> Slice<'_> {
        match self {
            Data::F32(v) => Slice::F32(v),
            Data::I32(v) => Slice::I32(v),
            Data::Bool(v) => Slice::Bool(v),
        }
    }

    pub fn slice_mut(&mut self) -> SliceMut<'_> {
        match self {
            Data::F32(v) => SliceMut::F32(v),
            Data::I32(v) => SliceMut::I32(v),
            Data::Bool(v) => SliceMut::Bool(v),
        }
    }

    pub fn as_f32(&self) -> Vec<f32> {
        match self {
            Data::F32(v) => v.clone(),
            Data::I32(v) => v.iter().map(|&x| x as f32).collect(),
            Data::Bool(v) => v.iter().map(|&x| f32::from(x)).collect(),
        }
    }
}

/// A scalar parameter's value by its name (what std's functions expect).
fn scalar_for(name: &str, t: usize) -> f32 {
    match name {
        "eps" | "eps_low" | "eps_high" => 0.2,
        "c" => 3.0,
        "max_len" => t as f32,
        "buffer" => 2.0,
        "clip" => 0.5,
        "horizon" => 100.0,
        "target" => 0.1,
        "n_steps" => 3.0,
        "factor" => 1.0,
        _ => 0.9,
    }
}

/// Inputs for `k` with `b` rows of `t` positions: floats in [-2, 2), masks with row 0 empty
/// and row 1 full, group ids in 0..3.
pub fn inputs(k: &Kernel, b: usize, t: usize, rng: &mut Rng) -> Vec<Data> {
    let sizes = [b, t];
    k.inputs
        .iter()
        .map(|p| {
            let n: usize = sizes[..p.level].iter().product();
            match (p.elem, p.level) {
                (Elem::F32, 0) => Data::F32(vec![scalar_for(&p.name, t)]),
                (Elem::I32, 0) => Data::I32(vec![scalar_for(&p.name, t) as i32]),
                (Elem::F32, _) => Data::F32((0..n).map(|_| rng.uniform() * 4.0 - 2.0).collect()),
                (Elem::I32, _) => Data::I32((0..n).map(|_| (rng.uniform() * 3.0) as i32).collect()),
                (Elem::Bool, _) => Data::Bool(
                    (0..n)
                        .map(|i| {
                            let row = if p.level >= 2 { i / t.max(1) } else { i };
                            let on = row != 0 && (row == 1 || rng.uniform() < 0.7);
                            u8::from(on)
                        })
                        .collect(),
                ),
            }
        })
        .collect()
}

/// The first `[B, T]` mask input's values, if the kernel has one.
fn first_mask(k: &Kernel, ins: &[Data]) -> Option<Vec<u8>> {
    let i = k
        .inputs
        .iter()
        .position(|p| p.elem == Elem::Bool && p.level == 2)?;
    match &ins[i] {
        Data::Bool(m) => Some(m.clone()),
        _ => None,
    }
}

/// NaN in every `[B, T]` float input where the first `[B, T]` mask is false (padding holds
/// garbage in practice; masked math must not see it, unmasked math must propagate it).
pub fn poison(k: &Kernel, ins: &mut [Data]) {
    let Some(mask) = first_mask(k, ins) else {
        return;
    };
    for (p, d) in k.inputs.iter().zip(ins.iter_mut()) {
        if let (2, Data::F32(v)) = (p.level, d) {
            for (x, &m) in v.iter_mut().zip(&mask) {
                if m == 0 {
                    *x = f32::NAN;
                }
            }
        }
    }
}

/// NaN in every `[B, T]` float input at one position the first `[B, T]` mask selects, in each
/// row from the third on: the last selected one when the row has a position not selected before
/// it (a scan that resets there, `where(m[t], g, 0.0)` in reverse, drops the NaN from then on;
/// a chunked scan's maps must drop it too), else the first.
pub fn poison_live(k: &Kernel, ins: &mut [Data], t: usize) {
    let Some(mask) = first_mask(k, ins) else {
        return;
    };
    let rows = mask.len().checked_div(t).unwrap_or(0);
    let mut at = Vec::new();
    for r in 2..rows {
        let row = &mask[r * t..(r + 1) * t];
        let selected: Vec<usize> = (0..t).filter(|&i| row[i] != 0).collect();
        if let (Some(&first), Some(&last)) = (selected.first(), selected.last()) {
            let gap_before_last = (0..last).any(|i| row[i] == 0);
            at.push(r * t + if gap_before_last { last } else { first });
        }
    }
    for (p, d) in k.inputs.iter().zip(ins.iter_mut()) {
        if let (2, Data::F32(v)) = (p.level, d) {
            for &i in &at {
                v[i] = f32::NAN;
            }
        }
    }
}

/// Zeroed outputs of the right types and sizes.
pub fn outputs(k: &Kernel, b: usize, t: usize) -> Vec<Data> {
    let sizes = [b, t];
    k.outputs
        .iter()
        .map(|o| Data::zeros(k.node(o.node).elem, sizes[..o.level].iter().product()))
        .collect()
}

/// The JIT's outputs: the reference the GPU code is held to.
pub fn run_jit(k: &Kernel, b: usize, t: usize, ins: &[Data]) -> Vec<Data> {
    let jit = Jit::compile(k).unwrap_or_else(|e| panic!("{}: {e}", k.name));
    let mut outs = outputs(k, b, t);
    let slices: Vec<Slice> = ins.iter().map(Data::slice).collect();
    let mut slices_mut: Vec<SliceMut> = outs.iter_mut().map(Data::slice_mut).collect();
    jit.run(&k.axes_sizes(b, t), &slices, &mut slices_mut, 1)
        .unwrap_or_else(|e| panic!("{}: {e}", k.name));
    drop(slices_mut);
    outs
}

/// The sizes of a kernel's axes for `b` rows of `t` positions.
pub trait AxesSizes {
    fn axes_sizes(&self, b: usize, t: usize) -> Vec<usize>;
}

impl AxesSizes for Kernel {
    fn axes_sizes(&self, b: usize, t: usize) -> Vec<usize> {
        [b, t][..self.axes.len().min(2)].to_vec()
    }
}

/// The largest relative difference `|x − y| / max(1, |y|)` (NaN against NaN agrees), or
/// an error naming the first element beyond `tol`.
pub fn compare(what: &str, got: &[Data], want: &[Data], tol: f32) -> Result<f32, String> {
    let mut worst = 0f32;
    for (o, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.as_f32(), w.as_f32());
        if g.len() != w.len() {
            return Err(format!(
                "{what}: output {o} has {} values, not {}",
                g.len(),
                w.len()
            ));
        }
        for (i, (&x, &y)) in g.iter().zip(&w).enumerate() {
            if x.is_nan() && y.is_nan() {
                continue;
            }
            if x == y {
                continue;
            }
            let rel = (x - y).abs() / y.abs().max(1.0);
            if rel.is_nan() || rel > tol {
                return Err(format!("{what}: output {o}[{i}] = {x}, the JIT gives {y}"));
            }
            worst = worst.max(rel);
        }
    }
    Ok(worst)
}

//! Fused kernels against tch eager operations at B·T = 512·1024 (issue #7's benchmark):
//!
//! - `gae_whitened`: GAE (a reverse scan over T) and masked whitening;
//! - `grpo_advantage`: group mean/std of the scores, per token under the mask;
//! - `ppo_loss`: `token_mean(ppo_clip(…))`, forward and the gradient with respect to `logp`.
//!
//! Each is run three ways: the fused kernel (Cranelift JIT, rows on 2 threads, the derivative
//! from the same kernel), the same `std.algo` code on tch eager operations (the reference
//! evaluator: one tch operation per builtin, autograd for the gradient; libtorch on 2 threads),
//! and a plain copy moving as many bytes as the kernel reads and writes (half read, half
//! written; the faster of 2 threads and 1, so that the reference does not pay for starting
//! threads) as the bandwidth reference. The fused kernel is timed twice: returning new output
//! tensors each call (`Fused::run`) and writing into the previous call's (`Fused::run_into`,
//! "reused"). A table prints the medians, the speed-up over eager and the fraction of copy
//! bandwidth. Goals: ≥ 5× eager, ≥ 60 % of copy bandwidth.
//!
//! `cargo bench -p rlc-runtime --bench kernels` (`RLC_BENCH_ROWS=4096` for a batch that
//! leaves the cache)
//!
//! With `RLC_BENCH_DEVICE=cuda` (`scripts/gpu-check.sh`) all three run on CUDA device 0: the
//! fused kernel as CUDA C (NVRTC) on libtorch's tensors, eager on libtorch's CUDA kernels, the
//! copy a device-to-device `copy_`; every timed call waits for the device.

mod common;

use criterion::{Criterion, black_box};
use rlc_check::{Checked, SourceLoader};
use rlc_diagnostics::Files;
use rlc_reference::{Arg, Evaluator};
use rlc_runtime::kernels::fused::{Fused, FusedError};
use rlc_runtime::kernels::fused_cuda::FusedCuda;

#[path = "../tests/common/kernels.rs"]
#[allow(dead_code)]
mod kernels;
use rlc_runtime::rng::Rng;
use std::cell::RefCell;
use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};

/// Rows: 512, the issue's size, unless `RLC_BENCH_ROWS` says otherwise (larger batches move
/// the data out of cache, where the copy reference runs at memory bandwidth).
fn rows() -> i64 {
    common::positive_from_env("RLC_BENCH_ROWS", 512)
}
const T: i64 = 1024;
const THREADS: usize = 2;

const ROOT: &str = r#"
import std.algo { gae_whitened, grpo_advantage, ppo_clip, token_mean }

fn ppo_loss(logp: f32[B, T], old: f32[B, T], adv: f32[B, T], m: Mask[B, T]) -> f32 {
  token_mean(ppo_clip(logp, old, adv, eps: 0.2), m)
}
"#;

struct NoFiles;

impl SourceLoader for NoFiles {
    fn read(&self, path: &str) -> Result<String, String> {
        Err(format!("{path}: not found"))
    }
}

fn program() -> Checked {
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, "bench.rl", ROOT.to_string());
    assert!(
        checked.diagnostics.iter().all(|d| !d.is_error()),
        "the benchmark program does not check"
    );
    checked
}

struct Inputs {
    r: Tensor,
    v: Tensor,
    logp: Tensor,
    old: Tensor,
    adv: Tensor,
    mask: Tensor,
    score: Tensor,
    group: Tensor,
}

/// A fused kernel on the bench's device, with the outputs of its last `run_reused`.
enum Kernel {
    Cpu(Box<Fused>, RefCell<Vec<Tensor>>),
    Cuda(Box<FusedCuda>),
}

impl Kernel {
    fn new(p: &Checked, function: &str, given: &[&str], wrt: &[&str], device: Device) -> Self {
        let made = match device {
            Device::Cuda(i) => kernels::fused_cuda(&p.bodies, function, given, wrt, i)
                .map(|k| Kernel::Cuda(Box::new(k))),
            _ => kernels::fused(&p.bodies, function, given, wrt)
                .map(|k| Kernel::Cpu(Box::new(k), RefCell::default())),
        };
        made.unwrap_or_else(|e: FusedError| panic!("{function} compiles: {e}"))
    }

    fn run(&self, args: &[(&str, Arg)]) -> Vec<Tensor> {
        let out = match self {
            Kernel::Cpu(k, _) => k.run(args, THREADS),
            Kernel::Cuda(k) => k.run(args),
        };
        out.expect("runs")
    }

    /// The bytes per position its passes read and write through memory, and how many
    /// passes there are (from the JIT's schedule; the CUDA C follows the same one).
    fn traffic(&self) -> Option<(usize, usize)> {
        let Kernel::Cpu(k, _) = self else {
            return None;
        };
        let (kernel, schedule) = (k.jit().kernel(), k.jit().schedule());
        let passes = &schedule.passes;
        let bytes = passes
            .iter()
            .map(|p| {
                let (read, written) = rlc_kernel::schedule::pass_traffic(kernel, schedule, p);
                read + written
            })
            .sum();
        let run = passes.iter().filter(|p| !p.loops.is_empty()).count();
        Some((bytes, run))
    }

    /// A run into the outputs of the previous one (on CUDA, a plain run).
    fn run_reused(&self, args: &[(&str, Arg)]) {
        match self {
            Kernel::Cpu(k, out) => k
                .run_into(args, &mut out.borrow_mut(), THREADS)
                .expect("runs"),
            Kernel::Cuda(k) => drop(k.run(args).expect("runs")),
        }
    }
}

fn inputs(device: Device) -> Inputs {
    let b = rows();
    let mut rng = Rng::new(1);
    let mut normal = |n: i64| {
        let v: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
        Tensor::from_slice(&v)
    };
    let r = normal(b * T).view([b, T]);
    let v = normal(b * T).view([b, T]);
    let logp = (normal(b * T).view([b, T]) * 0.1 - 1.0).contiguous();
    let old = (&logp + normal(b * T).view([b, T]) * 0.05).contiguous();
    let adv = normal(b * T).view([b, T]);
    let score = normal(b);
    // Right-padded responses of lengths between T/4 and T.
    let lens: Vec<i64> = (0..b).map(|i| T / 4 + (i * 7919) % (3 * T / 4)).collect();
    let cols = Tensor::arange(T, (Kind::Int64, tch::Device::Cpu)).view([1, T]);
    let mask = cols
        .lt_tensor(&Tensor::from_slice(&lens).view([b, 1]))
        .contiguous();
    let group = Tensor::from_slice(&(0..b).map(|i| (i / 16) as i32).collect::<Vec<_>>());
    let on = |t: Tensor| t.to_device(device);
    Inputs {
        r: on(r),
        v: on(v),
        logp: on(logp),
        old: on(old),
        adv: on(adv),
        mask: on(mask),
        score: on(score),
        group: on(group),
    }
}

/// Median seconds of `f` over calls made for about `budget` (one call when it is zero).
fn median(budget: Duration, mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    let mut times = Vec::new();
    loop {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
        if budget.is_zero() || (times.len() >= 5 && start.elapsed() >= budget) {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Copies `src` into `dst` on `THREADS` threads.
fn copy(src: &[u8], dst: &mut [u8]) {
    let chunk = src.len().div_ceil(THREADS);
    std::thread::scope(|s| {
        for (d, c) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
            s.spawn(move || d.copy_from_slice(c));
        }
    });
}

/// The bandwidth reference: copying `moved / 2` bytes (read once, written once) on the device.
fn copier(moved: usize, device: Device) -> Box<dyn FnMut()> {
    match device {
        Device::Cuda(_) => {
            let src = Tensor::ones([(moved / 2) as i64], (Kind::Uint8, device));
            let mut dst = src.zeros_like();
            Box::new(move || {
                dst.copy_(&src);
                black_box(&dst);
                common::sync(device);
            })
        }
        _ => {
            let src = vec![1u8; moved / 2];
            let mut dst = vec![0u8; moved / 2];
            Box::new(move || copy(black_box(&src), &mut dst))
        }
    }
}

/// The same copy on one thread (on the CPU; `None` on CUDA).
fn copier_one_thread(moved: usize, device: Device) -> Option<Box<dyn FnMut()>> {
    match device {
        Device::Cuda(_) => None,
        _ => {
            let src = vec![1u8; moved / 2];
            let mut dst = vec![0u8; moved / 2];
            Some(Box::new(move || dst.copy_from_slice(black_box(&src))))
        }
    }
}

fn bytes(ts: &[&Tensor]) -> usize {
    ts.iter()
        .map(|t| t.numel() * t.kind().elt_size_in_bytes())
        .sum()
}

fn main() {
    tch::set_num_threads(THREADS as i32);
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let p = program();
    let device = common::device();
    let eval = Evaluator::new(&p.modules).with_device(device);
    let x = inputs(device);
    let gae = Kernel::new(
        &p,
        "gae_whitened",
        &["r", "v", "m", "gamma", "lam"],
        &[],
        device,
    );
    let grpo = Kernel::new(
        &p,
        "grpo_advantage",
        &["score", "group", "mask"],
        &[],
        device,
    );
    let ppo = Kernel::new(
        &p,
        "ppo_loss",
        &["logp", "old", "adv", "m"],
        &["logp"],
        device,
    );

    let gae_args = || -> Vec<(&str, Arg)> {
        vec![
            ("r", (&x.r).into()),
            ("v", (&x.v).into()),
            ("m", (&x.mask).into()),
            ("gamma", 1.0.into()),
            ("lam", 0.95.into()),
        ]
    };
    let grpo_args = || -> Vec<(&str, Arg)> {
        vec![
            ("score", (&x.score).into()),
            ("group", (&x.group).into()),
            ("mask", (&x.mask).into()),
        ]
    };
    let ppo_args = |logp: &Tensor| -> Vec<(&str, Arg)> {
        vec![
            ("logp", logp.into()),
            ("old", (&x.old).into()),
            ("adv", (&x.adv).into()),
            ("m", (&x.mask).into()),
        ]
    };
    let run_fused = |k: &Kernel, args: Vec<(&str, Arg)>| {
        let out = k.run(&args);
        common::sync(device);
        out
    };
    let call = |name: &str, args: Vec<(&str, Arg)>| {
        let out = eval.call(name, &args).expect("evaluates");
        common::sync(device);
        out
    };
    let ppo_eager = || {
        let logp = x.logp.detach().set_requires_grad(true);
        let loss = eval.call("ppo_loss", &ppo_args(&logp)).expect("evaluates");
        loss.backward();
        common::sync(device);
        (loss, logp.grad())
    };

    // The fused results agree with eager before anything is timed.
    let check = |what: &str, a: &Tensor, b: &Tensor| {
        let err = (a - b).abs().max().double_value(&[]);
        assert!(err < 1e-3, "{what}: fused and eager differ by {err}");
    };
    check(
        "gae_whitened",
        &run_fused(&gae, gae_args())[0],
        &call("gae_whitened", gae_args()),
    );
    check(
        "grpo_advantage",
        &run_fused(&grpo, grpo_args())[0],
        &call("grpo_advantage", grpo_args()),
    );
    let (loss, grad) = ppo_eager();
    let fused = run_fused(&ppo, ppo_args(&x.logp));
    check("ppo_loss", &fused[0], &loss.detach());
    check("ppo_loss gradient", &fused[1], &grad);

    let cases: Vec<(&str, usize)> = vec![
        (
            "gae_whitened",
            bytes(&[&x.r, &x.v, &x.mask]) + bytes(&[&x.r]),
        ),
        (
            "grpo_advantage",
            bytes(&[&x.score, &x.group, &x.mask]) + bytes(&[&x.r]),
        ),
        (
            "ppo_loss_fwd_bwd",
            bytes(&[&x.logp, &x.old, &x.adv, &x.mask]) + bytes(&[&x.logp]),
        ),
    ];
    let reused_fn = |name: &str| {
        let f: Box<dyn Fn()> = match name {
            "gae_whitened" => Box::new(|| {
                gae.run_reused(&gae_args());
                common::sync(device);
            }),
            "grpo_advantage" => Box::new(|| {
                grpo.run_reused(&grpo_args());
                common::sync(device);
            }),
            _ => Box::new(|| {
                ppo.run_reused(&ppo_args(&x.logp));
                common::sync(device);
            }),
        };
        f
    };
    let fused_fn = |name: &str| {
        let f: Box<dyn Fn()> = match name {
            "gae_whitened" => Box::new(|| drop(black_box(run_fused(&gae, gae_args())))),
            "grpo_advantage" => Box::new(|| drop(black_box(run_fused(&grpo, grpo_args())))),
            _ => Box::new(|| drop(black_box(run_fused(&ppo, ppo_args(&x.logp))))),
        };
        f
    };
    let eager_fn = |name: &str| {
        let f: Box<dyn Fn()> = match name {
            "gae_whitened" => Box::new(|| drop(black_box(call("gae_whitened", gae_args())))),
            "grpo_advantage" => Box::new(|| drop(black_box(call("grpo_advantage", grpo_args())))),
            _ => Box::new(|| drop(black_box(ppo_eager()))),
        };
        f
    };
    let mut group = criterion.benchmark_group("kernels");
    for (name, moved) in &cases {
        let fused = fused_fn(name);
        let reused = reused_fn(name);
        let eager = eager_fn(name);
        let mut copy = copier(*moved, device);
        group.bench_function(format!("{name}/fused"), |b| b.iter(&fused));
        group.bench_function(format!("{name}/fused_reused"), |b| b.iter(&reused));
        group.bench_function(format!("{name}/eager"), |b| b.iter(&eager));
        group.bench_function(format!("{name}/copy"), |b| b.iter(&mut copy));
    }
    group.finish();

    let (budget, timing) = if common::benchmarking() {
        (Duration::from_secs(2), "median of ~2 s of calls")
    } else {
        (
            Duration::ZERO,
            "test mode: one call each, not a measurement",
        )
    };
    let on = match device {
        Device::Cuda(_) => "CUDA device 0".to_string(),
        _ => format!("{THREADS} threads"),
    };
    println!("fused kernels at B·T = {}·{T}, {on} ({timing}):", rows());
    println!(
        "{:<18} {:>9} {:>9} {:>9} {:>8} {:>15} {:>15}",
        "kernel", "fused ms", "reused ms", "eager ms", "copy ms", "vs eager", "of copy bw"
    );
    for (name, moved) in &cases {
        let f = median(budget, fused_fn(name));
        let r = median(budget, reused_fn(name));
        let e = median(budget, eager_fn(name));
        let mut c = median(budget, copier(*moved, device));
        if let Some(one) = copier_one_thread(*moved, device) {
            c = c.min(median(budget, one));
        }
        println!(
            "{name:<18} {:>9.3} {:>9.3} {:>9.3} {:>8.3} {:>6.1}× / {:>5.1}× {:>5.0} % / {:>4.0} %",
            f * 1e3,
            r * 1e3,
            e * 1e3,
            c * 1e3,
            e / f,
            e / r,
            100.0 * c / f,
            100.0 * c / r
        );
    }
    println!("(vs eager and of copy bw: fused / reused)");
    // Passes that read a stored value back move more than the copy is credited with; at
    // copy speed the kernel could then reach only the ratio of the two.
    for (name, kernel) in [
        ("gae_whitened", &gae),
        ("grpo_advantage", &grpo),
        ("ppo_loss_fwd_bwd", &ppo),
    ] {
        let (Some((bytes, passes)), Some((_, credited))) =
            (kernel.traffic(), cases.iter().find(|c| c.0 == name))
        else {
            continue;
        };
        let per_position = *credited as f64 / (rows() * T) as f64;
        println!(
            "{name}: {passes} pass{} over the rows move{} {bytes} B a position, the copy {per_position:.1} B: at most {:.0} % at copy speed",
            if passes == 1 { "" } else { "es" },
            if passes == 1 { "s" } else { "" },
            (100.0 * per_position / bytes as f64).min(100.0)
        );
    }
}

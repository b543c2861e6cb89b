//! The GPU runner. Without CUDA (this is most machines, and CI) `Gpu::new` must be a clear
//! error, not a panic. With a GPU, every `fn` of `std.algo` the JIT compiles and the
//! derivatives of its scalar ones run on the device and agree with the JIT within 1e-4
//! (relative, with an absolute floor of 1e-4 near zero); the comparison prints its figures.
//! It skips, saying so, where `Gpu::new` fails — unless `RLC_REQUIRE_GPU` is set (as
//! `scripts/gpu-check.sh` does), where that is a failure.

mod cuda_common;

use cuda_common::{Data, Rng, compare, inputs, kernels_with_derivatives, outputs, poison, run_jit};
use rlc_kernel::KernelError;
use rlc_kernel::cuda::emit;
use rlc_kernel::schedule::schedule;
use rlc_kernel_exec::cuda::{Gpu, GpuKernel};
use rlc_kernel_exec::jit::{Jit, Slice, SliceMut};
use std::time::Instant;

fn gpu_or_skip(test: &str) -> Option<Gpu> {
    match Gpu::new() {
        Ok(g) => Some(g),
        Err(e) if std::env::var_os("RLC_REQUIRE_GPU").is_some() => {
            panic!("{test}: RLC_REQUIRE_GPU is set and {e}")
        }
        Err(e) => {
            eprintln!("{test}: skipped ({e})");
            None
        }
    }
}

#[test]
fn no_cuda_is_a_clear_error() {
    // Twice: the second call must not find half-initialised state either.
    for _ in 0..2 {
        match Gpu::new() {
            Ok(gpu) => eprintln!("a GPU is present: {}", gpu.describe()),
            Err(KernelError::Cuda(msg)) => {
                assert!(msg.starts_with("CUDA is not available: "), "{msg}");
                assert!(msg.len() > "CUDA is not available: ".len() + 5, "{msg}");
            }
            Err(e) => panic!("not a CUDA error: {e:?}"),
        }
    }
}

/// NVRTC alone (no device): every kernel's source compiles, with an entry per pass. Skips
/// where NVRTC cannot be loaded (set `LD_LIBRARY_PATH` to pip's `nvidia/cuda_nvrtc/lib`).
#[test]
fn nvrtc_compiles_every_kernel() {
    let kernels = kernels_with_derivatives();
    for (i, k) in kernels.iter().enumerate() {
        let ptx = match rlc_kernel_exec::cuda::ptx(k, "compute_90") {
            Ok(p) => p,
            Err(KernelError::Cuda(e))
                if i == 0
                    && e.starts_with("CUDA is not available")
                    && std::env::var_os("RLC_REQUIRE_GPU").is_none() =>
            {
                eprintln!("nvrtc_compiles_every_kernel: skipped ({e})");
                return;
            }
            Err(e) => panic!("{}: {e}", k.name),
        };
        let s = schedule(k).expect("schedule");
        for p in 0..s.passes.len() {
            let entry = format!(".entry {}(", rlc_kernel::cuda::pass_name(k, p));
            assert!(ptx.contains(&entry), "{}: no {entry} in the PTX", k.name);
        }
    }
    println!("NVRTC compiled {} kernels for compute_90", kernels.len());
}

fn run_gpu(k: &GpuKernel, b: usize, t: usize, ins: &[Data]) -> Vec<Data> {
    let kernel = k.kernel();
    let mut outs = outputs(kernel, b, t);
    let slices: Vec<Slice> = ins.iter().map(Data::slice).collect();
    let mut slices_mut: Vec<SliceMut> = outs.iter_mut().map(Data::slice_mut).collect();
    let sizes = [b, t][..kernel.axes.len().min(2)].to_vec();
    k.run(&sizes, &slices, &mut slices_mut)
        .unwrap_or_else(|e| panic!("{}: {e}", kernel.name));
    drop(slices_mut);
    outs
}

#[test]
fn gpu_agrees_with_the_jit() {
    let Some(gpu) = gpu_or_skip("gpu_agrees_with_the_jit") else {
        return;
    };
    println!("device: {}", gpu.describe());
    let kernels = kernels_with_derivatives();
    let mut rng = Rng::new(5);
    let mut worst_all = 0f32;
    // Odd sizes, one row, one position, no rows, more rows than one block, a large batch, and
    // NaN in the padding.
    let sizes = [
        (7, 5, false),
        (1, 4, false),
        (4, 1, false),
        (0, 3, false),
        (300, 33, false),
        (1024, 512, false),
        (9, 13, true),
    ];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for k in &kernels {
        let started = Instant::now();
        // On failure, the source too (NVRTC's log names its lines).
        let compiled = gpu.compile(k).unwrap_or_else(|e| {
            let s = schedule(k).expect("schedule");
            panic!("{}: {e}\n{}", k.name, emit(k, &s))
        });
        let compile_ms = started.elapsed().as_secs_f64() * 1e3;
        let mut worst = 0f32;
        for &(b, t, nan) in &sizes {
            let mut ins = inputs(k, b, t, &mut rng);
            if nan {
                poison(k, &mut ins);
            }
            let want = run_jit(k, b, t, &ins);
            let got = run_gpu(&compiled, b, t, &ins);
            let what = format!("{} at B={b}, T={t}, NaN padding {nan}", k.name);
            let w = compare(&what, &got, &want, 1e-4).unwrap_or_else(|e| panic!("{e}"));
            worst = worst.max(w);
        }
        // Times of one run at the largest size (the GPU's includes the copies both ways).
        let (b, t) = (1024, 512);
        let ins = inputs(k, b, t, &mut rng);
        let started = Instant::now();
        run_gpu(&compiled, b, t, &ins);
        let gpu_ms = started.elapsed().as_secs_f64() * 1e3;
        let jit = Jit::compile(k).expect("jit");
        let mut outs = outputs(k, b, t);
        let slices: Vec<Slice> = ins.iter().map(Data::slice).collect();
        let mut slices_mut: Vec<SliceMut> = outs.iter_mut().map(Data::slice_mut).collect();
        let sizes_bt = [b, t][..k.axes.len().min(2)].to_vec();
        let started = Instant::now();
        jit.run(&sizes_bt, &slices, &mut slices_mut, threads)
            .expect("jit run");
        let jit_ms = started.elapsed().as_secs_f64() * 1e3;
        worst_all = worst_all.max(worst);
        let name = if k.outputs.len() > 1 {
            format!("{} + derivative", k.name)
        } else {
            k.name.clone()
        };
        println!(
            "{name:<36} passes {}  max rel diff {:.2e}  NVRTC {:>6.1} ms  B=1024,T=512: GPU {:>7.2} ms (with copies), JIT {:>7.2} ms ({} threads)",
            compiled.schedule().passes.len(),
            worst,
            compile_ms,
            gpu_ms,
            jit_ms,
            threads
        );
    }
    println!(
        "{} kernels agree with the JIT; the largest relative difference is {worst_all:.2e}",
        kernels.len()
    );
}

//! The GPU runner. Without CUDA (this is most machines, and CI) `Gpu::new` must be a clear
//! error, not a panic. With a GPU, every `fn` of `std.algo` the JIT compiles and the
//! derivatives of its scalar ones run on the device and agree with the JIT within 1e-4
//! (relative, with an absolute floor of 1e-4 near zero), and at the large sizes a second run
//! gives the same bits (no order depends on timing); the comparison prints its figures.
//! It skips, saying so, where `Gpu::new` fails — unless `RLC_REQUIRE_GPU` is set (as
//! `scripts/gpu-check.sh` does), where that is a failure.
//!
//! `wide_kernels_against_copy_bandwidth` times the kernels on device memory (no host copies:
//! what the runtime's CUDA tensors see) against a device-to-device copy of as many bytes as the
//! kernel's inputs and outputs, in and out of cache; libtorch eager on the same kernels is
//! `runtime/benches/kernels.rs` (both run by `scripts/gpu-check.sh`). The compiling and
//! emulated checks without a GPU are `cuda_nvrtc.rs` and `cuda_host.rs`.

mod cuda_common;

use cuda_common::{
    Data, Rng, compare, inputs, kernels_with_derivatives, outputs, poison, poison_live, run_jit,
};
use rlc_kernel::KernelError;
use rlc_kernel::cuda::emit;
use rlc_kernel::schedule::schedule;
use rlc_kernel_exec::cuda::{Gpu, GpuKernel};
use rlc_kernel_exec::jit::{Jit, Slice, SliceMut};
use std::time::{Duration, Instant};

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

/// An output's values as bits (NaN equal to itself).
fn bits(d: &Data) -> Vec<u32> {
    d.as_f32().iter().map(|x| x.to_bits()).collect()
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
    // Odd sizes, one row, one position, no rows, more rows than one block, a large batch, long
    // rows (several positions per thread of a block, a partial last chunk), and NaN in the
    // padding (1) or also at a selected position (2).
    let sizes = [
        (7, 5, 0),
        (1, 4, 0),
        (4, 1, 0),
        (0, 3, 0),
        (300, 33, 0),
        (1024, 512, 0),
        (4, 3000, 0),
        (9, 13, 1),
        (12, 29, 2),
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
            if nan > 0 {
                poison(k, &mut ins);
            }
            if nan > 1 {
                poison_live(k, &mut ins, t);
            }
            let want = run_jit(k, b, t, &ins);
            let got = run_gpu(&compiled, b, t, &ins);
            let what = format!("{} at B={b}, T={t}, NaN case {nan}", k.name);
            let w = compare(&what, &got, &want, 1e-4).unwrap_or_else(|e| panic!("{e}"));
            worst = worst.max(w);
            // No reduction order depends on timing: a second run gives the same bits.
            if b >= 300 {
                let again = run_gpu(&compiled, b, t, &ins);
                assert!(
                    got.iter().zip(&again).all(|(x, y)| bits(x) == bits(y)),
                    "{what}: two runs differ"
                );
            }
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

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The median of `reps` timed calls of `f` after one untimed call; `f` waits for the device.
fn time(reps: usize, mut f: impl FnMut()) -> Duration {
    f();
    median(
        (0..reps)
            .map(|_| {
                let started = Instant::now();
                f();
                started.elapsed()
            })
            .collect(),
    )
}

fn bytes_of(d: &Data) -> Vec<u8> {
    match d {
        Data::F32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        Data::I32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        Data::Bool(v) => v.clone(),
    }
}

/// The kernels at the sizes of `runtime/benches/kernels.rs` (B = 512 and 4096 rows of
/// 1024): each run on device memory (`run_on_device`, which queues every pass and finishing
/// kernel and waits once) against a device-to-device copy of half the bytes the kernel's
/// inputs and outputs hold (read once and written once, as the kernel at best). Prints, does
/// not assert: the figures are for `scripts/gpu-check.sh`'s log.
#[test]
fn wide_kernels_against_copy_bandwidth() {
    let Some(gpu) = gpu_or_skip("wide_kernels_against_copy_bandwidth") else {
        return;
    };
    let st = gpu.stream().clone();
    let p = cuda_common::program();
    let ppo = cuda_common::kernel(&p, "ppo_token_mean");
    let kernels = vec![
        cuda_common::kernel(&p, "std.algo.token_mean"),
        cuda_common::kernel(&p, "std.algo.ppo_clip"),
        cuda_common::kernel(&p, "std.algo.gae_whitened"),
        cuda_common::kernel(&p, "std.algo.grpo_advantage"),
        rlc_kernel::grad::differentiate(&ppo, "result", &["logp"]).expect("derivative"),
    ];
    println!("device: {}", gpu.describe());
    println!(
        "{:<36} {:>5} {:>5} {:>7} {:>9} {:>9} {:>9} {:>8}",
        "kernel", "B", "T", "passes", "kernel ms", "copy ms", "GB/s", "of copy"
    );
    let mut rng = Rng::new(9);
    for k in &kernels {
        let compiled = gpu.compile(k).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        for (b, t) in [(512usize, 1024usize), (4096, 1024)] {
            let sizes = [b, t][..k.axes.len().min(2)].to_vec();
            let ins = inputs(k, b, t, &mut rng);
            let dev_ins: Vec<_> = ins
                .iter()
                .map(|d| {
                    let mut bytes = bytes_of(d);
                    bytes.resize(bytes.len().max(4), 0);
                    st.clone_htod(&bytes).expect("inputs to the device")
                })
                .collect();
            let outs = outputs(k, b, t);
            let dev_outs: Vec<_> = outs
                .iter()
                .map(|d| {
                    st.alloc_zeros::<u8>(bytes_of(d).len().max(4))
                        .expect("outputs on the device")
                })
                .collect();
            let ptr = |s: &cudarc::driver::CudaSlice<u8>| {
                use cudarc::driver::DevicePtr;
                s.device_ptr(&st).0
            };
            let in_ptrs: Vec<u64> = dev_ins.iter().map(ptr).collect();
            let out_ptrs: Vec<u64> = dev_outs.iter().map(ptr).collect();
            let moved: usize = ins.iter().chain(&outs).map(|d| bytes_of(d).len()).sum();
            let kernel = time(20, || {
                // SAFETY: the pointers are this device's buffers of the kernel's element types
                // and sizes, alive and otherwise untouched until the call returns.
                unsafe { compiled.run_on_device(&sizes, &in_ptrs, &out_ptrs) }
                    .unwrap_or_else(|e| panic!("{}: {e}", k.name));
            });
            let src = st.alloc_zeros::<u8>(moved / 2).expect("copy source");
            let mut dst = st.alloc_zeros::<u8>(moved / 2).expect("copy target");
            let copy = time(20, || {
                st.memcpy_dtod(&src, &mut dst).expect("copy");
                st.synchronize().expect("copy");
            });
            let name = if k.outputs.len() > 1 {
                format!("{} + derivative", k.name)
            } else {
                k.name.clone()
            };
            println!(
                "{name:<36} {b:>5} {t:>5} {:>7} {:>9.3} {:>9.3} {:>9.1} {:>7.0} %",
                compiled.schedule().passes.len(),
                kernel.as_secs_f64() * 1e3,
                copy.as_secs_f64() * 1e3,
                moved as f64 / kernel.as_secs_f64() / 1e9,
                100.0 * copy.as_secs_f64() / kernel.as_secs_f64()
            );
        }
    }
    println!(
        "(kernel ms: median of 20 run_on_device calls, each queuing its kernels and waiting once; \
         of copy: the copy's time over the kernel's, where 100 % is copy bandwidth)"
    );
}

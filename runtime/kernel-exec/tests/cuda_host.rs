//! The emitted CUDA C computes what the JIT computes, checked without a GPU: the source is
//! compiled for this CPU by the host's C++ compiler, with a small header standing in for
//! CUDA's built-ins, and every kernel (the passes and the kernels finishing their barriers)
//! is launched as the runner launches it, over emulated blocks. A block's threads are real OS
//! threads running at once: `threadIdx`/`blockIdx` are thread-local, `__shared__` arrays are
//! one per function (blocks run one after the other, which is one of the orders a GPU may
//! take: blocks never wait for each other), `__syncthreads` is a `pthread_barrier_t` for the
//! block's threads. So the block reductions, the strided map loops, the chunked scans (and
//! thread 0's, for a body not affine in its carries) and the
//! barriers between them run with the interleavings a GPU allows; a missing `__syncthreads`
//! shows as a race, one in divergent code as a hang. Nothing runs on the host between
//! kernels. Every `fn` of `std.algo` the JIT compiles and the derivatives of its scalar ones,
//! on random inputs of several sizes (one row, one position, no rows, rows of 300: chunks of
//! 75 and 10 positions), NaN in the padding and at a selected position (a chunked scan's maps
//! must drop it where the body's select does), with blocks of 4
//! threads (rows longer than the block: strided loops) and of 32 (shorter: idle threads),
//! grids with fewer blocks than rows (a block takes several) and more, and at the small sizes
//! the runner's own launches (`cuda::launches`); at the larger sizes
//! each launch twice, with the same bits (the threads' timing differs, the results may not).
//!
//! Skipped (with a message) where there is no `c++`; Linux only (`dlopen`, pthreads).

#![cfg(target_os = "linux")]

mod cuda_common;

use cuda_common::{
    AxesSizes, Data, Rng, compare, inputs, kernels_with_derivatives, poison, poison_live, run_jit,
};
use rlc_kernel::cuda::{emit, finish_name, pass_name};
use rlc_kernel::ir::{Elem, Kernel};
use rlc_kernel::schedule::{Role, Schedule, schedule};
use rlc_kernel_exec::cuda::launches;
use std::ffi::{CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;

/// CUDA's built-ins for a CPU build.
const SHIM: &str = r#"#include <math.h>
#include <string.h>
#include <pthread.h>
struct rlc_dim { unsigned x, y, z; };
/* Each emulated thread its own indices; the block's and the grid's sizes are shared. */
static thread_local rlc_dim threadIdx, blockIdx;
static rlc_dim blockDim, gridDim;
static pthread_barrier_t rlc_barrier;
/* Before a block's threads start, and after they end. */
extern "C" void rlc_begin_block(unsigned threads, unsigned blocks) {
  blockDim.x = threads; gridDim.x = blocks;
  pthread_barrier_init(&rlc_barrier, 0, threads);
}
extern "C" void rlc_end_block(void) { pthread_barrier_destroy(&rlc_barrier); }
extern "C" void rlc_set_thread(unsigned t, unsigned b) { threadIdx.x = t; blockIdx.x = b; }
static inline void __syncthreads(void) { pthread_barrier_wait(&rlc_barrier); }
#define __global__
#define __device__
#define __forceinline__ inline
/* One array per function, shared by the threads of the one block running. */
#define __shared__ static
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
"#;

/// Threads per block and blocks for every launch: small blocks (rows longer than a block) with
/// fewer blocks than rows, and a warp (idle threads, more blocks than some batches have rows);
/// `None`: the runner's own launches (`cuda::launches`: a block per row of `row_threads(T)`,
/// 128-thread blocks for the rest), at the small sizes.
const GEOMETRIES: [Option<(u32, u32)>; 3] = [Some((4, 2)), Some((32, 3)), None];

#[link(name = "dl")]
unsafe extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

type PassFn = unsafe extern "C" fn(*const *mut u8, *const i64, i64, *mut f32);
type TwoU32 = unsafe extern "C" fn(u32, u32);
type NoArgs = unsafe extern "C" fn();

struct Lib(*mut c_void);

impl Lib {
    fn symbol(&self, name: &str) -> *mut c_void {
        let c = CString::new(name).expect("name");
        // SAFETY: a valid handle and a NUL-terminated name.
        let f = unsafe { dlsym(self.0, c.as_ptr()) };
        assert!(!f.is_null(), "no symbol {name}");
        f
    }
}

/// Removed when the test ends, failed or not.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn compiler() -> Option<&'static str> {
    ["c++", "g++", "clang++"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Compiles the kernels' CUDA C as one shared library for this CPU (one C++ build: they
/// dominate the time). Each kernel in its own namespace, renamed `k<i>_…` so that the pass
/// functions' C names differ (a derivative keeps its function's name).
fn build(cxx: &str, dir: &Path, kernels: &[(Kernel, Schedule)]) -> PathBuf {
    let mut text = SHIM.to_string();
    for (i, (k, s)) in kernels.iter().enumerate() {
        text.push_str(&format!("namespace k{i} {{\n{}}}\n", emit(k, s)));
    }
    let src = dir.join("kernels.cpp");
    let lib = dir.join("kernels.so");
    std::fs::write(&src, text).expect("write source");
    let out = Command::new(cxx)
        // No fused multiply-adds, as NVRTC is told (`--fmad=false`).
        .args([
            "-x",
            "c++",
            "-O0",
            "-ffp-contract=off",
            "-shared",
            "-fPIC",
            "-pthread",
            "-w",
            "-o",
        ])
        .arg(&lib)
        .arg(&src)
        .output()
        .expect("run the C++ compiler");
    assert!(
        out.status.success(),
        "the emitted source does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lib
}

fn open(lib: &Path) -> Lib {
    let path = CString::new(lib.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: a library we just built, holding only the passes and the shim.
    let h = unsafe { dlopen(path.as_ptr(), 2) };
    assert!(!h.is_null(), "dlopen {}", lib.display());
    Lib(h)
}

fn bytes_of(d: &Data) -> Vec<u8> {
    match d {
        Data::F32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        Data::I32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        Data::Bool(v) => v.clone(),
    }
}

/// An output's values as bits (NaN equal to itself).
fn bits(d: &Data) -> Vec<u32> {
    d.as_f32().iter().map(|x| x.to_bits()).collect()
}

/// One kernel launched over `blocks` emulated blocks of `threads` OS threads each, the blocks
/// one after the other.
fn launch(lib: &Lib, f: PassFn, (threads, blocks): (u32, u32), args: (usize, usize, i64, usize)) {
    // SAFETY: the shim's exported functions.
    let begin: TwoU32 = unsafe { std::mem::transmute(lib.symbol("rlc_begin_block")) };
    let end: NoArgs = unsafe { std::mem::transmute(lib.symbol("rlc_end_block")) };
    let set_thread: TwoU32 = unsafe { std::mem::transmute(lib.symbol("rlc_set_thread")) };
    let (ptrs, sizes, rows, scratch) = args;
    for b in 0..blocks {
        // SAFETY: no thread of another block is running.
        unsafe { begin(threads, blocks) };
        std::thread::scope(|scope| {
            for t in 0..threads {
                scope.spawn(move || {
                    // SAFETY: the buffer table, sizes and scratch outlive the scope; buffers
                    // hold `count(level)` elements of their types, scratch `scans · cols`
                    // floats per block. Threads write disjoint elements, or the same one
                    // after a barrier, as on a GPU.
                    unsafe {
                        set_thread(t, b);
                        f(
                            ptrs as *const *mut u8,
                            sizes as *const i64,
                            rows,
                            scratch as *mut f32,
                        );
                    }
                });
            }
        });
        // SAFETY: the block's threads have ended.
        unsafe { end() };
    }
}

/// The runner's launches (`cuda::GpuKernel::run`) over host memory: each pass, then the kernel
/// finishing its barriers, with nothing on the host between them.
fn run_emulated(
    lib: &Lib,
    k: &Kernel,
    s: &Schedule,
    (b, t): (usize, usize),
    geometry: Option<(u32, u32)>,
    ins: &[Data],
) -> Vec<Data> {
    let sizes = k.axes_sizes(b, t);
    let count = |level: usize| sizes[..level].iter().product::<usize>();
    // 4-byte aligned storage for every element type.
    let mut bufs: Vec<Vec<u32>> = s
        .buffers
        .iter()
        .map(|buf| {
            let bytes = count(buf.level) * buf.elem.bytes();
            let mut v = vec![0u32; bytes.div_ceil(4).max(1)];
            if let Role::Input(i) = buf.role {
                let src = bytes_of(&ins[i]);
                // SAFETY: `v` holds at least `src.len()` bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr(),
                        v.as_mut_ptr() as *mut u8,
                        src.len(),
                    )
                };
            }
            v
        })
        .collect();
    let sizes_i64: Vec<i64> = sizes.iter().map(|&x| x as i64).collect();
    let rows = sizes.first().copied().unwrap_or(1);
    let cols = sizes.get(1).copied().unwrap_or(1);
    let plan = launches(s, rows, cols);
    let blocks = geometry.map_or(plan.wide_blocks, |g| g.1 as usize);
    let mut scratch = vec![0f32; (blocks * s.scans.len() * cols).max(1)];
    let ptrs: Vec<*mut u8> = bufs.iter_mut().map(|v| v.as_mut_ptr() as *mut u8).collect();
    let args = (
        ptrs.as_ptr() as usize,
        sizes_i64.as_ptr() as usize,
        rows as i64,
        scratch.as_mut_ptr() as usize,
    );
    for (p, pass) in s.passes.iter().enumerate() {
        let mut names = vec![(pass_name(k, p), plan.passes[p])];
        if !pass.host.is_empty() {
            names.push((finish_name(k, p), plan.finish));
        }
        for (name, (blocks, threads)) in names {
            // SAFETY: every kernel has this signature.
            let f: PassFn = unsafe { std::mem::transmute(lib.symbol(&name)) };
            launch(lib, f, geometry.unwrap_or((threads, blocks)), args);
        }
    }
    drop(ptrs);
    k.outputs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let buf = &bufs[s.buffer_of(Role::Output(i)).expect("output buffer")];
            let n = count(o.level);
            match k.node(o.node).elem {
                Elem::F32 => Data::F32(buf[..n].iter().map(|&w| f32::from_bits(w)).collect()),
                Elem::I32 => Data::I32(buf[..n].iter().map(|&w| w as i32).collect()),
                Elem::Bool => {
                    Data::Bool(buf.iter().flat_map(|w| w.to_ne_bytes()).take(n).collect())
                }
            }
        })
        .collect()
}

#[test]
fn emitted_source_agrees_with_the_jit_on_the_cpu() {
    let Some(cxx) = compiler() else {
        eprintln!("skipped: no C++ compiler (c++, g++, clang++) to build the emitted source");
        return;
    };
    let dir = TempDir(std::env::temp_dir().join(format!("rlc-cuda-host-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let kernels = kernels_with_derivatives();
    let grads = kernels.iter().filter(|k| k.outputs.len() > 1).count();
    assert!(
        kernels.len() >= 50 && grads >= 5,
        "{} kernels, {grads} derivatives",
        kernels.len()
    );
    let mut rng = Rng::new(11);
    let mut worst = (0f32, String::new());
    let renamed: Vec<(Kernel, Schedule)> = kernels
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut k = k.clone();
            k.name = format!("k{i}_{}", k.name);
            let s = schedule(&k).expect("schedule");
            (k, s)
        })
        .collect();
    let lib = open(&build(cxx, &dir.0, &renamed));
    for (k, s) in &renamed {
        // (B, T, NaN): in the padding (1) or also at a selected position (2).
        let cases = [
            (7, 5, 0),
            (33, 17, 0),
            (1, 4, 0),
            (4, 1, 0),
            (0, 3, 0),
            (9, 13, 1),
            (12, 29, 2),
            (3, 300, 0),
        ];
        for (b, t, nan) in cases {
            let mut ins = inputs(k, b, t, &mut rng);
            if nan > 0 {
                poison(k, &mut ins);
            }
            if nan > 1 {
                poison_live(k, &mut ins, t);
            }
            let want = run_jit(k, b, t, &ins);
            for geometry in GEOMETRIES {
                // The runner's blocks of up to 128 threads at the small sizes only (each
                // emulated thread is an OS thread).
                if geometry.is_none() && b * t > 100 {
                    continue;
                }
                let got = run_emulated(&lib, k, s, (b, t), geometry, &ins);
                let what = format!(
                    "{} at B={b}, T={t}{}, {}",
                    k.name,
                    [
                        "",
                        " with NaN padding",
                        " with NaN padding and NaN at a selected position"
                    ][nan],
                    geometry.map_or("the runner's launches".to_string(), |g| format!(
                        "{} blocks of {} threads",
                        g.1, g.0
                    ))
                );
                // The threads' timing differs from run to run; the results may not.
                if b >= 12 {
                    let again = run_emulated(&lib, k, s, (b, t), geometry, &ins);
                    assert!(
                        got.iter().zip(&again).all(|(x, y)| bits(x) == bits(y)),
                        "{what}: two runs differ"
                    );
                }
                match compare(&what, &got, &want, 1e-4) {
                    Ok(w) if w > worst.0 => worst = (w, what),
                    Ok(_) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
    eprintln!(
        "{} kernels agree; the largest relative difference is {:e} ({})",
        kernels.len(),
        worst.0,
        worst.1
    );
}

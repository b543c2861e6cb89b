//! The emitted CUDA C computes what the JIT computes, checked without a GPU: the source is
//! compiled for this CPU by the host's C++ compiler, with a small header standing in for
//! CUDA's built-ins (thread indices, `__int_as_float`, `rsqrtf`), and each pass is run for
//! three emulated threads (threads of a pass write disjoint rows, so running them one after
//! the other is one of the orders a GPU may take); the host finishes barriers between passes
//! as the runner does. Every `fn` of `std.algo` the JIT compiles and the derivatives of its
//! scalar ones, on random inputs of several sizes (one row, one position, no rows).
//!
//! Skipped (with a message) where there is no `c++`; Linux only (`dlopen`).

#![cfg(target_os = "linux")]

mod cuda_common;

use cuda_common::{
    AxesSizes, Data, Rng, compare, inputs, kernels_with_derivatives, poison, run_jit,
};
use rlc_kernel::cuda::{emit, pass_name};
use rlc_kernel::ir::{Elem, Kernel, Op};
use rlc_kernel::schedule::{Role, Schedule, schedule};
use rlc_kernel_exec::host;
use std::ffi::{CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;

/// CUDA's built-ins for a CPU build.
const SHIM: &str = r#"#include <math.h>
#include <string.h>
struct rlc_dim { unsigned x, y, z; };
static rlc_dim threadIdx, blockIdx, blockDim, gridDim;
extern "C" void rlc_set_thread(unsigned t, unsigned n) {
  threadIdx.x = t; blockIdx.x = 0; blockDim.x = n; gridDim.x = 1;
}
#define __global__
#define __device__
#define __forceinline__ inline
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
"#;

const THREADS: u32 = 3;

#[link(name = "dl")]
unsafe extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

type PassFn = unsafe extern "C" fn(*const *mut u8, *const i64, i64, *mut f32);
type SetThread = unsafe extern "C" fn(u32, u32);

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

/// The runner's steps (`cuda::GpuKernel::run`) over host memory.
fn run_emulated(
    lib: &Lib,
    k: &Kernel,
    s: &Schedule,
    b: usize,
    t: usize,
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
    let mut scratch = vec![0f32; (THREADS as usize * s.scans.len() * cols).max(1)];
    // SAFETY: the shim's exported function.
    let set_thread: SetThread = unsafe { std::mem::transmute(lib.symbol("rlc_set_thread")) };
    for (p, pass) in s.passes.iter().enumerate() {
        // SAFETY: every pass has this signature.
        let f: PassFn = unsafe { std::mem::transmute(lib.symbol(&pass_name(k, p))) };
        let ptrs: Vec<*mut u8> = bufs.iter_mut().map(|v| v.as_mut_ptr() as *mut u8).collect();
        for tid in 0..THREADS {
            // SAFETY: buffers hold `count(level)` elements of their types, scratch
            // `scans · cols` floats per emulated thread.
            unsafe {
                set_thread(tid, THREADS);
                f(
                    ptrs.as_ptr(),
                    sizes_i64.as_ptr(),
                    rows as i64,
                    scratch.as_mut_ptr(),
                );
            }
        }
        for &bar in &pass.host {
            let f32s =
                |buf: &Vec<u32>| -> Vec<f32> { buf.iter().map(|&x| f32::from_bits(x)).collect() };
            let stored = |n: usize| s.buffer_of(Role::Stored(n)).expect("stored operand");
            let out = s.buffer_of(Role::Barrier(bar)).expect("barrier buffer");
            match &k.node(bar).op {
                Op::Reduce { op, x, mask } => {
                    let xs = f32s(&bufs[stored(*x)]);
                    let ms: Option<Vec<u8>> = mask.map(|m| {
                        bufs[stored(m)]
                            .iter()
                            .flat_map(|w| w.to_ne_bytes())
                            .collect()
                    });
                    let v = host::reduce_rows(*op, &xs[..rows], ms.as_ref().map(|m| &m[..rows]));
                    bufs[out][0] = v.to_bits();
                }
                Op::Group { op, x, by } => {
                    let xs = x.map(|x| f32s(&bufs[stored(x)]));
                    let ids: Vec<i32> = bufs[stored(*by)].iter().map(|&w| w as i32).collect();
                    let mut o = vec![0f32; rows];
                    host::group(*op, xs.as_ref().map(|x| &x[..rows]), &ids[..rows], &mut o);
                    for (i, v) in o.into_iter().enumerate() {
                        bufs[out][i] = v.to_bits();
                    }
                }
                _ => {}
            }
        }
    }
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
        let cases = [
            (7, 5, false),
            (33, 17, false),
            (1, 4, false),
            (4, 1, false),
            (0, 3, false),
            (9, 13, true),
        ];
        for (b, t, nan) in cases {
            let mut ins = inputs(k, b, t, &mut rng);
            if nan {
                poison(k, &mut ins);
            }
            let want = run_jit(k, b, t, &ins);
            let got = run_emulated(&lib, k, s, b, t, &ins);
            let what = format!(
                "{} at B={b}, T={t}{}",
                k.name,
                if nan { " with NaN padding" } else { "" }
            );
            match compare(&what, &got, &want, 1e-4) {
                Ok(w) if w > worst.0 => worst = (w, what),
                Ok(_) => {}
                Err(e) => panic!("{e}"),
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

//! NVRTC alone, no GPU: every kernel's CUDA C (every `fn` of `std.algo` the JIT compiles, the
//! derivatives of its scalar ones and the odd cases of `cuda_common`) compiles to PTX for
//! compute_90 (H100, H200) through cudarc, with an entry per pass and per finishing kernel;
//! the wide passes synchronise their blocks (`bar.sync`) and nothing uses atomics (the
//! reductions' orders are fixed, so a run is reproducible).
//!
//! Skips, saying so, where NVRTC cannot be loaded; `scripts/test.sh` installs NVIDIA's wheel
//! (`scripts/setup-nvrtc.sh`), puts it on `LD_LIBRARY_PATH` and sets `RLC_REQUIRE_NVRTC`, which
//! makes a missing NVRTC a failure (so is it with `RLC_REQUIRE_GPU`).

mod cuda_common;

use cuda_common::kernels_with_derivatives;
use rlc_kernel::KernelError;
use rlc_kernel::cuda::{finish_name, is_wide, pass_name};
use rlc_kernel::schedule::schedule;

const ARCH: &str = "compute_90";

#[test]
fn nvrtc_compiles_every_kernel() {
    let required = ["RLC_REQUIRE_NVRTC", "RLC_REQUIRE_GPU"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    let kernels = kernels_with_derivatives();
    let mut entries = 0;
    for (i, k) in kernels.iter().enumerate() {
        let ptx = match rlc_kernel_exec::cuda::ptx(k, ARCH) {
            Ok(p) => p,
            Err(KernelError::Cuda(e))
                if i == 0 && e.starts_with("CUDA is not available") && !required =>
            {
                eprintln!(
                    "nvrtc_compiles_every_kernel: skipped ({e}; scripts/setup-nvrtc.sh installs it)"
                );
                return;
            }
            Err(e) => panic!("{}: {e}", k.name),
        };
        let s = schedule(k).expect("schedule");
        for (p, pass) in s.passes.iter().enumerate() {
            let mut names = vec![pass_name(k, p)];
            if !pass.host.is_empty() {
                names.push(finish_name(k, p));
            }
            for name in names {
                let entry = format!(".entry {name}(");
                assert!(ptx.contains(&entry), "{}: no {entry} in the PTX", k.name);
                entries += 1;
            }
            // A block reduction (in a wide pass) or a scan, chunked or on thread 0 (then a barrier)
            // synchronises the block.
            let syncs = is_wide(pass)
                && pass.loops.iter().any(|l| {
                    !l.reductions.is_empty()
                        || matches!(l.kind, rlc_kernel::schedule::LoopKind::Scan(_))
                });
            if syncs {
                let start = ptx
                    .find(&format!(".entry {}(", pass_name(k, p)))
                    .unwrap_or(0);
                let body = &ptx[start..];
                let end = body[1..].find(".entry ").map_or(body.len(), |e| e + 1);
                assert!(
                    body[..end].contains("bar.sync") || body[..end].contains("barrier.sync"),
                    "{} pass {p}: a wide pass that reduces or scans without a block barrier",
                    k.name
                );
            }
        }
        assert!(!ptx.contains("atom."), "{}: atomics in the PTX", k.name);
    }
    println!(
        "NVRTC compiled {} kernels ({entries} entries) for {ARCH}",
        kernels.len()
    );
}

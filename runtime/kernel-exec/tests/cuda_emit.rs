//! The CUDA C of a few std functions (snapshots, to read), and the shape of the source for
//! every `fn` of `std.algo`: one function per pass and one finishing each pass's barriers on
//! the device, as many loops over T as the schedule has, a block per row where a pass loops
//! over T (strided map loops, scans affine in their carries in chunks over the threads, other
//! scans on thread 0, a block reduction per row reduction); every scan of std is chunked.
//! Whether the code computes the right values is `cuda_host.rs` (the source compiled for the
//! CPU) and `cuda_gpu.rs` (on a GPU).

mod cuda_common;

use cuda_common::{kernel, program, std_kernels};
use rlc_kernel::cuda::{chunked_scan, emit, finish_name, is_wide, pass_name};
use rlc_kernel::grad::differentiate;
use rlc_kernel::ir::Kernel;
use rlc_kernel::schedule::schedule;

fn source(k: &Kernel) -> String {
    let s = schedule(k).unwrap_or_else(|e| panic!("{}: {e}", k.name));
    emit(k, &s)
}

#[test]
fn token_mean() {
    let p = program();
    insta::assert_snapshot!(source(&kernel(&p, "std.algo.token_mean")));
}

#[test]
fn ppo_clip() {
    let p = program();
    insta::assert_snapshot!(source(&kernel(&p, "std.algo.ppo_clip")));
}

/// The loss and its derivative with respect to `logp` in one kernel.
#[test]
fn ppo_token_mean_with_derivative() {
    let p = program();
    let k = differentiate(&kernel(&p, "ppo_token_mean"), "result", &["logp"]).expect("grad");
    insta::assert_snapshot!(source(&k));
}

#[test]
fn gae_whitened() {
    let p = program();
    insta::assert_snapshot!(source(&kernel(&p, "std.algo.gae_whitened")));
}

#[test]
fn grpo_advantage() {
    let p = program();
    insta::assert_snapshot!(source(&kernel(&p, "std.algo.grpo_advantage")));
}

/// The text of the function `name`, from its signature to the next function.
fn function_text<'a>(src: &'a str, k: &Kernel, name: &str) -> &'a str {
    let sig = format!("extern \"C\" __global__ void {name}(");
    assert_eq!(src.matches(&sig).count(), 1, "{}: {name}", k.name);
    let start = src.find(&sig).unwrap_or(0);
    let rest = &src[start + sig.len()..];
    let end = rest.find("extern \"C\"").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn every_pass_has_its_function_and_loops() {
    let p = program();
    let kernels = std_kernels(&p);
    assert!(kernels.len() >= 45, "{} kernels", kernels.len());
    let mut chunked_all = 0;
    for k in &kernels {
        let s = schedule(k).expect("schedule");
        let src = emit(k, &s);
        assert_eq!(src, emit(k, &s), "{}: not deterministic", k.name);
        let finishing = s.passes.iter().filter(|p| !p.host.is_empty()).count();
        assert_eq!(
            src.matches("__global__").count(),
            s.passes.len() + finishing,
            "{}",
            k.name
        );
        assert_eq!(
            src.matches('{').count(),
            src.matches('}').count(),
            "{}",
            k.name
        );
        assert!(!src.contains("outside its loop"), "{}", k.name);
        for (i, pass) in s.passes.iter().enumerate() {
            let text = function_text(&src, k, &pass_name(k, i));
            let what = format!("{} pass {i}", k.name);
            let wide = is_wide(pass);
            let scans: Vec<&rlc_kernel::ir::Scan> = pass
                .loops
                .iter()
                .filter_map(|l| match l.kind {
                    rlc_kernel::schedule::LoopKind::Scan(n) => match &k.node(n).op {
                        rlc_kernel::ir::Op::Scan(sc) => Some(sc.as_ref()),
                        _ => None,
                    },
                    _ => None,
                })
                .collect();
            let chunked = if wide {
                scans.iter().filter(|sc| chunked_scan(sc)).count()
            } else {
                0
            };
            chunked_all += chunked;
            // A chunked scan has two loops over its chunk: its map's, then its values'.
            assert_eq!(
                text.matches("for (long long p ").count(),
                pass.loops.len() + chunked,
                "{what}"
            );
            assert_eq!(
                text.matches("rlc_chunk_carries(").count(),
                chunked,
                "{what}"
            );
            let scans = scans.len();
            // Map loops strided over the block; other scans on its thread 0, then a barrier.
            assert_eq!(
                text.matches("for (long long p = threadIdx.x; p < cols; p += blockDim.x)")
                    .count(),
                if wide { pass.loops.len() - scans } else { 0 },
                "{what}"
            );
            assert_eq!(
                text.matches("if (threadIdx.x == 0) {\n").count(),
                if wide { scans - chunked } else { 0 },
                "{what}"
            );
            let reductions: usize = pass.loops.iter().map(|l| l.reductions.len()).sum();
            assert_eq!(
                text.matches("rlc_block_reduce(").count(),
                if wide { reductions } else { 0 },
                "{what}"
            );
            let reverse = pass
                .loops
                .iter()
                .map(|l| match l.kind {
                    rlc_kernel::schedule::LoopKind::Scan(n) => match &k.node(n).op {
                        rlc_kernel::ir::Op::Scan(sc) if sc.reverse => {
                            1 + usize::from(wide && chunked_scan(sc))
                        }
                        _ => 0,
                    },
                    _ => 0,
                })
                .sum::<usize>();
            assert_eq!(text.matches("--p)").count(), reverse, "{what}");
            let has_rows = !pass.loops.is_empty() || !pass.row_stores.is_empty();
            let (row_loop, lead) = if wide {
                (
                    "for (long long row = blockIdx.x; row < rows; row += gridDim.x)",
                    "if (blockIdx.x == 0 && threadIdx.x == 0)",
                )
            } else {
                (
                    "for (long long row = tid; row < rows; row += nthreads)",
                    "if (tid == 0)",
                )
            };
            assert_eq!(
                text.matches(row_loop).count(),
                usize::from(has_rows),
                "{what}"
            );
            assert_eq!(
                text.contains(lead),
                !pass.scalar_stores.is_empty(),
                "{what}"
            );
            let stores = pass.scalar_stores.len()
                + pass.row_stores.len()
                + pass.loops.iter().map(|l| l.stores.len()).sum::<usize>();
            assert_eq!(text.matches("// store %").count(), stores, "{what}");
            // The barriers: each finished once, on the device, by the kernel after the pass.
            if !pass.host.is_empty() {
                let fin = function_text(&src, k, &finish_name(k, i));
                for &b in &pass.host {
                    assert_eq!(
                        fin.matches(&format!("// %{b}: ")).count(),
                        1,
                        "{what}: %{b}"
                    );
                }
            }
        }
    }
    // std's scans (GAE, discounted returns…) are affine in their carries: chunked.
    let mut sequential = Vec::new();
    for k in &kernels {
        for n in &k.nodes {
            if let rlc_kernel::ir::Op::Scan(sc) = &n.op
                && !chunked_scan(sc)
            {
                sequential.push(k.name.clone());
            }
        }
    }
    eprintln!("{chunked_all} chunked scans; on one thread: {sequential:?}");
    assert!(sequential.is_empty(), "scans on one thread: {sequential:?}");
    assert!(chunked_all >= 3, "{chunked_all} chunked scans");
}

//! The fused kernels alone (no libtorch), at B·T = 512·1024 on 2 threads: GAE + whitening,
//! GRPO advantages, the PPO loss with its gradient. The comparison with tch eager operations
//! and a memory copy is `cargo bench -p rlc-runtime --bench kernels`; this one builds in
//! seconds, for working on the code generator.
//!
//! `cargo bench -p rlc-kernel --bench jit`

use rlc_check::SourceLoader;
use rlc_diagnostics::Files;
use rlc_kernel::jit::{Jit, Slice, SliceMut};
use rlc_kernel::lower::lower_fn;
use std::time::Instant;

const B: usize = 512;
const T: usize = 1024;

struct NoFiles;

impl SourceLoader for NoFiles {
    fn read(&self, path: &str) -> Result<String, String> {
        Err(format!("{path}: not found"))
    }
}

const ROOT: &str = r#"
import std.algo { gae, gae_whitened, grpo_advantage, ppo_clip, token_mean }

fn ppo_loss(logp: f32[B, T], old: f32[B, T], adv: f32[B, T], m: Mask[B, T]) -> f32 {
  token_mean(ppo_clip(logp, old, adv, eps: 0.2), m)
}
"#;

fn fastest(mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..30)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[0]
}

/// Threads for the rows (`RLC_BENCH_THREADS`, 2 by default).
fn threads() -> usize {
    std::env::var("RLC_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2)
}

fn main() {
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, "bench.rl", ROOT.to_string());
    let m = &checked.modules;
    let x: Vec<f32> = (0..B * T)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mask: Vec<u8> = (0..B * T)
        .map(|i| u8::from(i % T < T / 4 + (i / T * 7919) % (3 * T / 4)))
        .collect();
    let ids: Vec<i32> = (0..B as i32).map(|i| i / 16).collect();
    let score: Vec<f32> = x[..B].to_vec();
    let (one, gamma) = ([1.0f32], [0.95f32]);
    let mut out = vec![0f32; B * T];
    let mut scalar = [0f32];
    let copy_src = vec![1u8; B * T * 8];
    let mut copy_dst = vec![0u8; B * T * 8];
    let copy = fastest(|| copy_dst.copy_from_slice(&copy_src));
    println!(
        "copy of {} MiB (1 thread): {:.3} ms",
        (B * T * 8) >> 20,
        copy * 1e3
    );

    // GAE + whitening, and the scan alone (one pass), to tell its cost from the whitening's.
    let gae_time = |function: &str| {
        let k = Jit::compile(&lower_fn(m, function, &["r", "v", "m", "gamma", "lam"]).unwrap())
            .unwrap();
        let mut out = vec![0f32; B * T];
        let t = fastest(|| {
            k.run(
                &[B, T],
                &[
                    Slice::F32(&x),
                    Slice::F32(&x),
                    Slice::Bool(&mask),
                    Slice::F32(&one),
                    Slice::F32(&gamma),
                ],
                &mut [SliceMut::F32(&mut out)],
                threads(),
            )
            .unwrap()
        });
        (t, k.schedule().passes.len())
    };
    let (t, passes) = gae_time("gae_whitened");
    println!("gae_whitened: {:.3} ms ({passes} passes)", t * 1e3);
    let (t, _) = gae_time("gae");
    println!("gae (the scan alone): {:.3} ms", t * 1e3);

    let grpo =
        Jit::compile(&lower_fn(m, "grpo_advantage", &["score", "group", "mask"]).unwrap()).unwrap();
    let t = fastest(|| {
        grpo.run(
            &[B, T],
            &[Slice::F32(&score), Slice::I32(&ids), Slice::Bool(&mask)],
            &mut [SliceMut::F32(&mut out)],
            threads(),
        )
        .unwrap()
    });
    println!(
        "grpo_advantage: {:.3} ms ({} passes)",
        t * 1e3,
        grpo.schedule().passes.len()
    );

    let k = lower_fn(m, "ppo_loss", &["logp", "old", "adv", "m"]).unwrap();
    let k = rlc_kernel::grad::differentiate(&k, "result", &["logp"]).unwrap();
    let ppo = Jit::compile(&k).unwrap();
    let t = fastest(|| {
        ppo.run(
            &[B, T],
            &[
                Slice::F32(&x),
                Slice::F32(&x),
                Slice::F32(&x),
                Slice::Bool(&mask),
            ],
            &mut [SliceMut::F32(&mut scalar), SliceMut::F32(&mut out)],
            threads(),
        )
        .unwrap()
    });
    println!(
        "ppo_loss fwd+bwd: {:.3} ms ({} passes)",
        t * 1e3,
        ppo.schedule().passes.len()
    );
}

//! The fused kernels alone (no libtorch), at B·T = 512·1024 on 2 threads: GAE + whitening,
//! GRPO advantages, the PPO loss with its gradient. The comparison with tch eager operations
//! and a memory copy is `cargo bench -p rlc-runtime --bench kernels`; this one builds in
//! seconds, for working on the code generator.
//!
//! `cargo bench -p rlc-kernel-exec --bench jit`

use rlc_check::SourceLoader;
use rlc_diagnostics::Files;
use rlc_kernel::lower::lower_fn;
use rlc_kernel_exec::jit::{Jit, Slice, SliceMut};
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

/// The fastest and the median of 200 calls (after one to warm up), in ms: the fastest shows
/// what the code can do, the median what a call costs on a machine with neighbours.
fn timed(mut f: impl FnMut()) -> String {
    f();
    let mut times: Vec<f64> = (0..200)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    format!(
        "fastest {:.3} ms, median {:.3} ms",
        times[0] * 1e3,
        times[times.len() / 2] * 1e3
    )
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
    let m = &checked.bodies;
    // Distinct arrays for distinct inputs: one array passed twice would share its cache lines
    // (and make PPO's ratio exactly 1).
    let pattern = |prime: usize, scale: f32| -> Vec<f32> {
        (0..B * T)
            .map(|i| ((i * prime) % 1000) as f32 / 1000.0 * scale - scale / 2.0)
            .collect()
    };
    let x = pattern(7919, 2.0);
    let y = pattern(7907, 2.0);
    let z = pattern(7901, 0.2);
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
    let copy = timed(|| copy_dst.copy_from_slice(&copy_src));
    println!("copy of {} MiB (1 thread): {copy}", (B * T * 8) >> 20);

    // GAE + whitening, and the scan alone (one pass), to tell its cost from the whitening's.
    let gae_time = |function: &str| {
        let k = Jit::compile(&lower_fn(m, function, &["r", "v", "m", "gamma", "lam"]).unwrap())
            .unwrap();
        let mut out = vec![0f32; B * T];
        let t = timed(|| {
            k.run(
                &[B, T],
                &[
                    Slice::F32(&x),
                    Slice::F32(&y),
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
    println!("gae_whitened ({passes} passes): {t}");
    let (t, _) = gae_time("gae");
    println!("gae (the scan alone): {t}");

    let grpo =
        Jit::compile(&lower_fn(m, "grpo_advantage", &["score", "group", "mask"]).unwrap()).unwrap();
    let t = timed(|| {
        grpo.run(
            &[B, T],
            &[Slice::F32(&score), Slice::I32(&ids), Slice::Bool(&mask)],
            &mut [SliceMut::F32(&mut out)],
            threads(),
        )
        .unwrap()
    });
    println!(
        "grpo_advantage ({} passes): {t}",
        grpo.schedule().passes.len()
    );

    let k = lower_fn(m, "ppo_loss", &["logp", "old", "adv", "m"]).unwrap();
    let k = rlc_kernel::grad::differentiate(&k, "result", &["logp"]).unwrap();
    let ppo = Jit::compile(&k).unwrap();
    let t = timed(|| {
        ppo.run(
            &[B, T],
            &[
                Slice::F32(&z),
                Slice::F32(&x),
                Slice::F32(&y),
                Slice::Bool(&mask),
            ],
            &mut [SliceMut::F32(&mut scalar), SliceMut::F32(&mut out)],
            threads(),
        )
        .unwrap()
    });
    println!(
        "ppo_loss fwd+bwd ({} passes): {t}",
        ppo.schedule().passes.len()
    );
}

//! `rlc kernel --emit ir|cuda`: the fused kernel of a `fn`, without libtorch.

use std::process::Command;

const PROGRAM: &str = r#"import std.algo { ppo_clip, token_mean, gae_whitened }

fn ppo_loss(logp: f32[B, T], old: f32[B, T], adv: f32[B, T], m: Mask[B, T]) -> f32 {
  token_mean(ppo_clip(logp, old, adv, eps: 0.2), m)
}

fn advantages(r: f32[B, T], v: f32[B, T], m: Mask[B, T]) -> f32[B, T] {
  gae_whitened(r, v, m, gamma: 1.0, lam: 0.95)
}
"#;

fn rlc(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rlc"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("rlc runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn program_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rlc-kernel-emit-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("k.rl"), PROGRAM).expect("program written");
    dir
}

#[test]
fn emits_the_ir_with_its_passes_and_the_derivative() {
    let dir = program_dir("ir");
    let (code, out, err) = rlc(
        &dir,
        &[
            "kernel", "k.rl", "--fn", "ppo_loss", "--emit", "ir", "--grad", "logp",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("kernel ppo_loss over [B, T]"), "{out}");
    assert!(out.contains("out d_logp = %"), "{out}");
    // The token count, then the loss sum with the gradient, then the scalar epilogue.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("pass ")).count(),
        3,
        "{out}"
    );
    let (_, again, _) = rlc(
        &dir,
        &[
            "kernel", "k.rl", "--fn", "ppo_loss", "--emit", "ir", "--grad", "logp",
        ],
    );
    assert_eq!(out, again, "the same bytes twice");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn emits_cuda_c_one_global_function_per_pass_and_per_barrier_step() {
    let dir = program_dir("cuda");
    let (code, out, err) = rlc(
        &dir,
        &["kernel", "k.rl", "--fn", "advantages", "--emit", "cuda"],
    );
    assert_eq!(code, 0, "{err}");
    let passes = out.matches("__global__ void advantages_pass").count();
    assert_eq!(passes, 3, "GAE, the variance, the whitened values: {out}");
    assert!(out.contains("advantages_pass2"), "{out}");
    // The mean and the variance finished on the device after the first two passes.
    let finishing = out.matches("__global__ void advantages_finish").count();
    assert_eq!(finishing, 2, "{out}");
    assert_eq!(out.matches("__global__").count(), passes + finishing);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_fn_or_a_derivative_of_a_tensor_is_an_error() {
    let dir = program_dir("errors");
    let (code, _, err) = rlc(&dir, &["kernel", "k.rl", "--fn", "nope", "--emit", "ir"]);
    assert_eq!(code, 2);
    assert!(err.contains("has no fn `nope`"), "{err}");
    let (code, _, err) = rlc(
        &dir,
        &[
            "kernel",
            "k.rl",
            "--fn",
            "advantages",
            "--emit",
            "ir",
            "--grad",
            "r",
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("does not return a float scalar"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

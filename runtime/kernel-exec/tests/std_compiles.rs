//! Every `fn` of `std.algo` lowers to the kernel IR, and all but `entropy` (three
//! dimensions) compile with the JIT. Numerical agreement with the reference evaluator is
//! tested in the runtime (`runtime/tests/kernels_fused.rs`), which has libtorch.

use rlc_check::SourceLoader;
use rlc_diagnostics::Files;
use rlc_kernel::KernelError;
use rlc_kernel::lower::lower_fn;
use rlc_kernel_exec::jit::Jit;
use rlc_syntax::ast::ItemKind;

struct NoFiles;

impl SourceLoader for NoFiles {
    fn read(&self, path: &str) -> Result<String, String> {
        Err(format!("{path}: not found"))
    }
}

#[test]
fn every_std_function_lowers_and_compiles() {
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, "t.rl", "import std.algo\n".into());
    let m = checked
        .modules
        .modules
        .iter()
        .find(|m| m.name == "std.algo")
        .expect("std.algo");
    let mut compiled = 0;
    for item in &m.ast.items {
        let ItemKind::Fn(f) = &item.kind else {
            continue;
        };
        let given: Vec<&str> = f.params.iter().map(|p| p.name.name.as_str()).collect();
        let name = format!("std.algo.{}", f.name.name);
        let kernel =
            lower_fn(&checked.bodies, &name, &given).unwrap_or_else(|e| panic!("{name}: {e}"));
        match Jit::compile(&kernel) {
            Ok(_) => compiled += 1,
            Err(KernelError::Unsupported { what, .. }) if f.name.name == "entropy" => {
                assert!(what.contains("more than two dimensions"), "{what}");
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
    assert!(compiled >= 45, "{compiled} compiled");
}

/// Work on a row's positions joins a scan's loop when the loop has its operands at each
/// position: GAE's returns are stored as the scan runs, and whitening's mean and count are
/// summed there, so neither reads the scan back in a second loop over the row.
#[test]
fn work_at_each_position_of_a_scan_rides_in_its_loop() {
    use rlc_kernel::schedule::{LoopKind, schedule};
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, "t.rl", "import std.algo\n".into());
    let given = ["r", "v", "m", "gamma", "lam"];
    let first_pass_loops = |f: &str| {
        let k = lower_fn(&checked.bodies, f, &given).unwrap_or_else(|e| panic!("{f}: {e}"));
        let s = schedule(&k).unwrap_or_else(|e| panic!("{f}: {e}"));
        s.passes[0].loops.clone()
    };
    let returns = first_pass_loops("std.algo.gae_returns");
    assert_eq!(returns.len(), 1, "{returns:?}");
    assert!(matches!(returns[0].kind, LoopKind::Scan(_)), "{returns:?}");
    assert_eq!(returns[0].stores.len(), 1, "{returns:?}");
    let whitened = first_pass_loops("std.algo.gae_whitened");
    assert_eq!(whitened.len(), 1, "{whitened:?}");
    assert!(
        matches!(whitened[0].kind, LoopKind::Scan(_)),
        "{whitened:?}"
    );
    assert_eq!(whitened[0].reductions.len(), 2, "{whitened:?}");
}

/// PPO's ratio is `exp` of a log-ratio clamped to ±20: the IR shows the bounds (so the JIT
/// leaves out `exp`'s own range checks), and a clamp's selects each compare the value they
/// pass on (the form of x86's `maxps`/`minps`).
#[test]
fn clamped_arguments_have_known_ranges() {
    use rlc_kernel::ir::{Bin, Op, Un, value_range};
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, "t.rl", "import std.algo\n".into());
    let k = lower_fn(
        &checked.bodies,
        "std.algo.ppo_clip",
        &["logp", "old_logp", "adv", "eps"],
    )
    .unwrap();
    let exp_args: Vec<_> = k
        .nodes
        .iter()
        .filter_map(|n| match n.op {
            Op::Unary(Un::Exp, a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(exp_args.len(), 1, "{k}");
    assert_eq!(value_range(&k, exp_args[0], 4), (-20.0, 20.0), "{k}");
    // Looking less deep than the clamp's two selects shows only one bound.
    assert_eq!(value_range(&k, exp_args[0], 1), (f64::NEG_INFINITY, 20.0));
    let Op::Select(c, _, passed) = k.node(exp_args[0]).op else {
        panic!("the clamp ends in a select: {k}")
    };
    assert!(
        matches!(k.node(c).op, Op::Binary(Bin::Gt, x, _) if x == passed),
        "{k}"
    );
    // An input is unbounded.
    assert_eq!(value_range(&k, 0, 4), (f64::NEG_INFINITY, f64::INFINITY));
}

/// The bytes each pass of GAE + whitening moves per position: the scan reads rewards, values
/// and mask and stores the advantages; the variance reads them back with the mask; the
/// whitening reads them once more and writes the result. 26 bytes where the kernel's inputs
/// and output are 13 (the bandwidth reference's count).
#[test]
fn each_pass_moves_what_it_reads_and_writes() {
    use rlc_kernel::schedule::{pass_traffic, schedule};
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, "t.rl", "import std.algo\n".into());
    let traffic = |f: &str, given: &[&str]| {
        let k = lower_fn(&checked.bodies, f, given).unwrap_or_else(|e| panic!("{f}: {e}"));
        let s = schedule(&k).unwrap();
        s.passes
            .iter()
            .map(|p| pass_traffic(&k, &s, p))
            .collect::<Vec<_>>()
    };
    let gae = ["r", "v", "m", "gamma", "lam"];
    assert_eq!(
        traffic("std.algo.gae_whitened", &gae),
        [(9, 4), (5, 0), (4, 4)]
    );
    // GRPO: the scores' pass is level 1 only; the advantages' writes them under the mask.
    assert_eq!(
        traffic("std.algo.grpo_advantage", &["score", "group", "mask"]),
        [(0, 0), (1, 4)]
    );
}

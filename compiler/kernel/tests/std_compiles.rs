//! Every `fn` of `std.algo` lowers to the kernel IR, and all but `entropy` (three
//! dimensions) compile with the JIT. Numerical agreement with the reference evaluator is
//! tested in the runtime (`runtime/tests/kernels_fused.rs`), which has libtorch.

use rlc_check::SourceLoader;
use rlc_diagnostics::Files;
use rlc_kernel::KernelError;
use rlc_kernel::jit::Jit;
use rlc_kernel::lower::lower_fn;
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
            lower_fn(&checked.modules, &name, &given).unwrap_or_else(|e| panic!("{name}: {e}"));
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

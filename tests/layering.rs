//! The crates' boundaries, kept by reading their sources (no libtorch needed, so this runs with
//! the compiler's tests):
//!
//! - `runtime_modules_are_layered`: the runtime's top-level modules form layers, bottom to top
//!   in [`RUNTIME_LAYERS`]; a module's non-test code names (`crate::…`) only modules below it,
//!   so there is no import cycle between them. Test code (`tests.rs`, `#[cfg(test)]` modules)
//!   may use any module: it exercises layers together.
//! - `compiler_crates_do_no_io_threads_or_device_work`: the non-test sources of the compiler
//!   crates (`compiler/*/src`) name no `std::fs`, `std::thread`, `std::process`, `std::net`,
//!   `std::env`, standard streams or printing macros: files reach the checker through its
//!   `SourceLoader`, which the CLI implements, and what a compiler crate produces is returned,
//!   never written.
//! - `compiler_crates_depend_on_no_executor`: by `cargo metadata`, no compiler crate depends
//!   (directly or not, outside dev-dependencies) on the runtime, the kernel executors
//!   (`rlc-kernel-exec`: the Cranelift JIT, CUDA), libtorch, CUDA, MPI or a JIT back end.
//! - `lowering_reads_the_checkers_data_not_the_ast`: neither `rlc-kernel` nor `rlc-plan` depends
//!   on `rlc-syntax` (tests included): plan lowering reads the checker's `Program` and
//!   `Dataflow`, kernel lowering its `body::Bodies` (names resolved, types attached).
//! - `lowering_passes_are_functions_of_their_input`: plan lowering is five passes, each a module
//!   of `compiler/plan/src/lower/`; those around the dataflow walk (instances, syncs, schedule)
//!   name no `Lowerer`: they read their input, not the walk's state.

use std::path::{Path, PathBuf};

/// The runtime's top-level modules, bottom first. Each may use only the modules before it.
const RUNTIME_LAYERS: &[&str] = &[
    "rng",
    "panics",
    "dylib",
    "device",
    "cuda_graph",
    "report",
    "kernels",
    "tensor_file",
    "model",
    "optim",
    "collectives",
    "generate",
    "checkpoint",
    "hf",
    "data",
    "parallel",
    "verify",
    "exec",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `source` with comments, string and character literals blanked (newlines kept, so byte
/// offsets and line numbers stay), leaving only code.
fn code_only(source: &str) -> String {
    let b = source.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#"))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let start = i + 2 + hashes;
            let end = b[start..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |n| start + n + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, (j + 1).min(b.len()));
            i = j + 1;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\u{7f}'), not a lifetime ('a).
            let end = if rest.get(1) == Some(&b'\\') {
                rest[2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|n| i + 2 + n + 1)
            } else {
                let width = std::str::from_utf8(&rest[1..])
                    .ok()
                    .or_else(|| source.get(i + 1..))
                    .and_then(|s| s.chars().next())
                    .map_or(1, char::len_utf8);
                (rest.get(1 + width) == Some(&b'\'')).then_some(i + 2 + width)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced")
}

/// `code` without its `#[cfg(test)]` items (the attribute through the item's closing brace or
/// semicolon).
fn without_test_items(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]").map(|n| from + n) {
        let b = code.as_bytes();
        let mut j = at + "#[cfg(test)]".len();
        while j < b.len() && b[j] != b'{' && b[j] != b';' {
            j += 1;
        }
        if j < b.len() && b[j] == b'{' {
            let mut depth = 0;
            while j < b.len() {
                match b[j] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        let end = (j + 1).min(b.len());
        for c in &mut out[at..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    String::from_utf8(out).unwrap()
}

/// Each top-level module of the crate that `code` names, with the byte offset of the naming:
/// `crate::name…` and the names in `crate::{a…, b…}`.
fn crate_modules(code: &str) -> Vec<(usize, String)> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut named = Vec::new();
    let b = code.as_bytes();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let after = at + "crate::".len();
        if b.get(after) == Some(&b'{') {
            // Top-level names of the group: those at depth 1.
            let (mut depth, mut j, mut expect) = (0, after, true);
            while j < b.len() {
                match b[j] {
                    b'{' => {
                        depth += 1;
                        expect = depth == 1;
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b',' if depth == 1 => expect = true,
                    c if expect && depth == 1 && (c.is_ascii_alphabetic() || c == b'_') => {
                        named.push((j, ident(&code[j..])));
                        expect = false;
                    }
                    _ => {}
                }
                j += 1;
            }
        } else {
            named.push((at, ident(&code[after..])));
        }
    }
    named
}

fn line_of(source: &str, offset: usize) -> (usize, &str) {
    let number = source[..offset].matches('\n').count() + 1;
    (number, source.lines().nth(number - 1).unwrap_or("").trim())
}

fn is_test_file(relative: &Path) -> bool {
    relative.file_name().is_some_and(|n| n == "tests.rs")
        || relative.components().any(|c| c.as_os_str() == "tests")
}

/// Uses that go up or sideways in `layers`, as `file:line: text (why)`, for the crate in `src`.
fn layering_violations(src: &Path, layers: &[&str]) -> Vec<String> {
    let mut violations = Vec::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_str().unwrap().trim_end_matches(".rs");
        if matches!(module, "lib" | "main") || is_test_file(relative) {
            continue;
        }
        let Some(level) = layers.iter().position(|&l| l == module) else {
            violations.push(format!(
                "{}: module `{module}` has no place in the declared layers",
                file.display()
            ));
            continue;
        };
        let source = std::fs::read_to_string(&file).unwrap();
        let code = without_test_items(&code_only(&source));
        for (offset, used) in crate_modules(&code) {
            if used == module {
                continue;
            }
            let why = match layers.iter().position(|&l| l == used) {
                Some(l) if l < level => continue,
                Some(_) => format!("`{module}` may not use `{used}`, a layer above it"),
                None => format!("`{used}` has no place in the declared layers"),
            };
            let (line, text) = line_of(&source, offset);
            violations.push(format!("{}:{line}: {text}  ({why})", file.display()));
        }
    }
    violations
}

#[test]
fn runtime_modules_are_layered() {
    let src = root().join("runtime/src");
    let violations = layering_violations(&src, RUNTIME_LAYERS);
    assert!(
        violations.is_empty(),
        "the runtime's modules use only modules below them (RUNTIME_LAYERS in {}):\n{}",
        file!(),
        violations.join("\n")
    );
    // Every top-level module is declared, and every declared one exists.
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| {
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))
        })
        .map(|l| l.trim_end_matches(';'))
        .collect();
    let mut sorted_layers = RUNTIME_LAYERS.to_vec();
    sorted_layers.sort();
    let mut sorted_declared = declared.clone();
    sorted_declared.sort();
    assert_eq!(
        sorted_layers, sorted_declared,
        "RUNTIME_LAYERS lists lib.rs's modules"
    );
}

#[test]
fn the_layering_check_sees_cycles() {
    // The check itself: an upward use is reported with its line, comments and strings are not
    // code, test modules are exempt.
    let dir = std::env::temp_dir().join(format!("rlc-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("upper")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod lower;\npub mod upper;\n").unwrap();
    std::fs::write(dir.join("upper/mod.rs"), "use crate::lower::f;\n").unwrap();
    std::fs::write(
        dir.join("lower.rs"),
        "// crate::upper in a comment\nconst S: &str = \"crate::upper\";\nconst C: char = '}';\n\
         use crate::{\n    lower::x,\n    upper::g,\n};\n#[cfg(test)]\nmod tests {\n    use crate::upper::h;\n}\n",
    )
    .unwrap();
    let violations = layering_violations(&dir, &["lower", "upper"]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(violations.len(), 1, "{violations:#?}");
    assert!(
        violations[0]
            .ends_with("lower.rs:6: upper::g,  (`lower` may not use `upper`, a layer above it)"),
        "{}",
        violations[0]
    );
}

/// What a compiler crate's non-test code may not name: IO, threads, processes, the
/// environment, standard streams.
const COMPILER_FORBIDDEN: &[&str] = &[
    "std::fs",
    "std::thread",
    "std::process",
    "std::net",
    "std::env",
    "std::io::stdin",
    "std::io::stdout",
    "std::io::stderr",
    "print!",
    "println!",
    "eprint!",
    "eprintln!",
    "dbg!",
];

/// Uses of [`COMPILER_FORBIDDEN`] in the non-test code of the crate whose sources are `src`,
/// as `file:line: text (what)`. Grouped imports (`use std::{fs, io}`) count.
fn compiler_violations(src: &Path) -> Vec<String> {
    let mut violations = Vec::new();
    for file in rust_files(src) {
        if is_test_file(file.strip_prefix(src).unwrap()) {
            continue;
        }
        let source = std::fs::read_to_string(&file).unwrap();
        // `std :: fs` and `use std::{fs, …}` read as `std::fs`.
        let code: String = without_test_items(&code_only(&source));
        let mut found: Vec<(usize, &str)> = Vec::new();
        for &forbidden in COMPILER_FORBIDDEN {
            for (at, _) in code.match_indices(forbidden) {
                let b = code.as_bytes();
                let before_ok =
                    at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
                let end = at + forbidden.len();
                let after_ok = forbidden.ends_with('!')
                    || b.get(end)
                        .is_none_or(|c| !(c.is_ascii_alphanumeric() || *c == b'_'));
                if before_ok && after_ok {
                    found.push((at, forbidden));
                }
            }
        }
        for (at, _) in code.match_indices("std::{") {
            let close = code[at..].find('}').map_or(code.len(), |n| at + n);
            for name in ["fs", "thread", "process", "net", "env"] {
                let group = &code[at + "std::{".len()..close];
                let named = group
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .any(|word| word == name);
                if named {
                    found.push((at, name));
                }
            }
        }
        found.sort();
        for (at, what) in found {
            let (line, text) = line_of(&source, at);
            violations.push(format!("{}:{line}: {text}  ({what})", file.display()));
        }
    }
    violations
}

fn compiler_crates() -> Vec<PathBuf> {
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root().join("compiler"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    crates
}

#[test]
fn compiler_crates_do_no_io_threads_or_device_work() {
    let crates = compiler_crates();
    assert!(crates.len() >= 6, "the compiler crates: {crates:?}");
    let violations: Vec<String> = crates
        .iter()
        .flat_map(|c| compiler_violations(&c.join("src")))
        .collect();
    assert!(
        violations.is_empty(),
        "the compiler crates do no IO, threads or process work (the CLI and the runtime do):\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_compiler_check_sees_io() {
    let dir = std::env::temp_dir().join(format!("rlc-compiler-io-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("lib.rs"),
        "// std::fs in a comment\nconst S: &str = \"std::thread\";\nuse std::{collections::HashMap, fs};\n\
         fn f() { std::thread::spawn(|| ()); let _ = std::env::var(\"X\"); }\n\
         fn g() { println!(\"hi\"); }\n#[cfg(test)]\nmod tests {\n    use std::fs;\n}\n",
    )
    .unwrap();
    let violations = compiler_violations(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let whats: Vec<&str> = violations
        .iter()
        .map(|v| v.rsplit_once("  (").unwrap().1.trim_end_matches(')'))
        .collect();
    assert_eq!(
        whats,
        ["fs", "std::thread", "std::env", "println!"],
        "{violations:#?}"
    );
    assert!(violations[0].contains("lib.rs:3: use std::{collections::HashMap, fs};"));
}

/// Crates a compiler crate may not depend on: they run or reach devices.
const EXECUTOR_CRATES: &[&str] = &[
    "rlc-runtime",
    "rlc-kernel-exec",
    "tch",
    "torch-sys",
    "cudarc",
    "mpi-sys",
    "cranelift-jit",
    "cranelift-native",
    "cranelift-codegen",
];

#[test]
fn compiler_crates_depend_on_no_executor() {
    // This machine's platform only: the packages of others (Windows') may not be downloaded.
    let rustc = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    let rustc = String::from_utf8(rustc.stdout).unwrap();
    let host = rustc
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host");
    let metadata = cargo_metadata(&["--locked", "--filter-platform", host]);
    let packages = metadata["packages"].as_array().unwrap();
    let name_of = |id: &str| -> String {
        let package = packages.iter().find(|p| p["id"] == id).unwrap();
        package["name"].as_str().unwrap().to_string()
    };
    let nodes = metadata["resolve"]["nodes"].as_array().unwrap();
    // Normal (and build) dependencies of a package id: what its library links.
    let normal_deps = |id: &str| -> Vec<String> {
        let node = nodes.iter().find(|n| n["id"] == id).unwrap();
        node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"] != "dev")
            })
            .map(|d| d["pkg"].as_str().unwrap().to_string())
            .collect()
    };
    let compiler = root().join("compiler");
    let mut checked = 0;
    for package in packages {
        let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap());
        if !manifest.starts_with(&compiler) {
            continue;
        }
        checked += 1;
        let name = package["name"].as_str().unwrap();
        // Depth-first over the dependency graph, keeping the path for the message.
        let mut stack = vec![vec![package["id"].as_str().unwrap().to_string()]];
        let mut seen = std::collections::HashSet::new();
        while let Some(path) = stack.pop() {
            let id = path.last().unwrap().clone();
            if !seen.insert(id.clone()) {
                continue;
            }
            let dep_name = name_of(&id);
            let chain: Vec<String> = path.iter().map(|i| name_of(i)).collect();
            assert!(
                !EXECUTOR_CRATES.contains(&dep_name.as_str()),
                "the compiler crate {name} depends on {dep_name}, which runs kernels or reaches \
                 devices: {}",
                chain.join(" -> ")
            );
            for dep in normal_deps(&id) {
                let mut next = path.clone();
                next.push(dep);
                stack.push(next);
            }
        }
    }
    assert!(checked >= 6, "cargo metadata lists the compiler crates");
}

#[test]
fn lowering_passes_are_functions_of_their_input() {
    let dir = root().join("compiler/plan/src/lower");
    for pass in ["instances", "dataflow", "transfers", "syncs", "schedule"] {
        let file = dir.join(format!("{pass}.rs"));
        assert!(
            file.is_file(),
            "the lowering pass `{pass}` is {}",
            file.display()
        );
    }
    for pass in ["instances", "syncs", "schedule"] {
        let file = dir.join(format!("{pass}.rs"));
        let source = std::fs::read_to_string(&file).unwrap();
        let code = code_only(&source);
        if let Some(at) = code.find("Lowerer") {
            let (line, text) = line_of(&source, at);
            panic!(
                "{}:{line}: {text}  (the {pass} pass is a function of its input, not of the \
                 dataflow walk's state)",
                file.display()
            );
        }
    }
}

/// The plan is the contract (#22): the runtime reads plans, so its manifest names neither the
/// parser nor the checker, and takes the plan's data model and the kernel IR without their
/// lowering from the AST (`default-features = false`; their `lower` features bring the AST).
#[test]
fn the_runtime_depends_on_the_plan_not_the_ast() {
    let metadata = cargo_metadata(&["--no-deps"]);
    let runtime = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "rlc-runtime")
        .expect("the runtime is a workspace member");
    let normal: Vec<&serde_json::Value> = runtime["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"].is_null())
        .collect();
    for ast in [
        "rlc-syntax",
        "rlc-check",
        "rlc-diagnostics",
        "rlc-reference",
    ] {
        assert!(
            !normal.iter().any(|d| d["name"] == ast),
            "the runtime depends on {ast}: plans, not sources, are its input"
        );
    }
    for model in ["rlc-plan", "rlc-kernel"] {
        let dep = normal
            .iter()
            .find(|d| d["name"] == model)
            .unwrap_or_else(|| panic!("the runtime reads {model}"));
        assert_eq!(
            dep["uses_default_features"], false,
            "{model} without its lowering (default features off)"
        );
        assert!(
            dep["features"].as_array().unwrap().is_empty(),
            "{model}: no features"
        );
    }
}

/// `cargo metadata` of the workspace (offline), with `args`.
fn cargo_metadata(args: &[&str]) -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(args)
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn lowering_reads_the_checkers_data_not_the_ast() {
    let metadata = cargo_metadata(&["--no-deps"]);
    for (crate_name, dir) in [
        ("rlc-kernel", "compiler/kernel"),
        ("rlc-plan", "compiler/plan"),
    ] {
        let package = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == crate_name)
            .unwrap_or_else(|| panic!("{crate_name} is a workspace member"));
        let deps: Vec<&str> = package["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["name"].as_str())
            .collect();
        assert!(deps.contains(&"rlc-check"), "{crate_name}: {deps:?}");
        assert!(
            !deps.contains(&"rlc-syntax"),
            "{crate_name} reads syntax trees: {deps:?}"
        );
        let sources: String = rust_files(&root().join(dir))
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect();
        assert!(
            !sources.contains("rlc_syntax"),
            "{crate_name} names rlc_syntax"
        );
    }
}

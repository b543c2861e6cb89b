//! Embeds the standard library (`stdlib/std/**/*.rl`) in the compiler, so `import std.…` works
//! offline and from any directory.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn main() {
    // Read when the script runs, not when it was compiled: a build script shared by two
    // checkouts (one target folder) must embed the std of the checkout being built.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join("../../stdlib");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root.join("std"), &mut files);
    files.sort();
    let mut out = String::from(
        "/// `(module path, file name, source)` of every std module, sorted.\npub static STD_MODULES: &[(&str, &str, &str)] = &[\n",
    );
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        let rel = file.strip_prefix(&root).unwrap().with_extension("");
        let module = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(".");
        let name = format!(
            "<std>/{}",
            file.strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        );
        writeln!(
            out,
            "    ({module:?}, {name:?}, include_str!({:?})),",
            file.canonicalize().unwrap()
        )
        .unwrap();
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("std_modules.rs");
    std::fs::write(dest, out).unwrap();
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rl") {
            out.push(path);
        }
    }
}

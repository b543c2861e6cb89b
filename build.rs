//! With the `runtime` feature, embeds an rpath to libtorch's `lib` directory in the `rlc-run`
//! binary (the one that links libtorch; `rlc` does not) so that `rlc run` starts without
//! `LD_LIBRARY_PATH`. The runtime's build script reports the directory torch-sys linked against.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_RLC_RUNTIME_LIBTORCH_LIB");
    if let Ok(lib_dir) = std::env::var("DEP_RLC_RUNTIME_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg-bin=rlc-run=-Wl,-rpath,{lib_dir}");
        // Integration tests that hand the binary tensors link libtorch too.
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{lib_dir}");
    }
}

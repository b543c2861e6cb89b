//! Embeds an rpath to libtorch's `lib` directory in this package's test, example and bench
//! binaries, so they run without `LD_LIBRARY_PATH`. torch-sys only passes `-rpath` when compiling
//! its own C++ wrapper (a static library), which does not reach the final link.

fn main() {
    // Set by torch-sys (`links = "tch"`) to the directory it linked against.
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    match std::env::var("DEP_TCH_LIBTORCH_LIB") {
        Ok(lib_dir) => {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
            // Read by the `rlc` binary's build script as DEP_RLC_RUNTIME_LIBTORCH_LIB.
            println!("cargo:libtorch_lib={lib_dir}");
        }
        Err(_) => println!(
            "cargo:warning=torch-sys did not report its libtorch directory; \
             binaries will need LD_LIBRARY_PATH"
        ),
    }
}

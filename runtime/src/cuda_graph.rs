//! Captured CUDA graphs: a piece of device work recorded once and replayed with one launch.
//! tch exposes no graph API, so this goes through a small C library over ATen's
//! `at::cuda::CUDAGraph` (`runtime/cuda-graph/graph.cpp`), built by
//! `scripts/build-cuda-graph.sh` against the CUDA libtorch the runtime runs with and opened
//! here at run time (the runtime links the CPU libtorch alone, [`crate::device`]).
//!
//! Where it is looked for: `RLC_CUDA_GRAPH_LIB` (a path, one that does not load being an error;
//! `off`: no graphs), else `librlc_cuda_graph.so` beside the running executable; neither: no
//! graphs, and generation on a GPU decodes eagerly.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::dylib::{self, Library, Scope};

/// The environment variable naming the library.
pub const LIBRARY_VARIABLE: &str = "RLC_CUDA_GRAPH_LIB";
/// The library's file name beside the executable.
pub const LIBRARY_NAME: &str = "librlc_cuda_graph.so";

type Body = unsafe extern "C" fn(*mut c_void) -> c_int;
type Capture = unsafe extern "C" fn(c_int, Body, *mut c_void, *mut c_char, usize) -> *mut c_void;
type Replay = unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void);

/// The library's three functions.
struct Api {
    capture: Capture,
    replay: Replay,
    free: Free,
}

/// Whether graphs can be captured in this process: `Ok(false)` when no library is there (or
/// graphs are off), `Err` when the one named cannot be used. Call only once CUDA is open
/// ([`crate::device`]): the library needs libtorch's CUDA library loaded. The answer is
/// computed once.
pub fn available() -> Result<bool, String> {
    api().map(|api| api.is_some())
}

fn api() -> Result<Option<&'static Api>, String> {
    static API: OnceLock<Result<Option<Api>, String>> = OnceLock::new();
    API.get_or_init(open)
        .as_ref()
        .map(Option::as_ref)
        .map_err(Clone::clone)
}

fn open() -> Result<Option<Api>, String> {
    let path = match std::env::var_os(LIBRARY_VARIABLE) {
        Some(off) if off == "off" => return Ok(None),
        Some(path) => PathBuf::from(path),
        None => match beside_executable() {
            Some(path) => path,
            None => return Ok(None),
        },
    };
    load(&path).map(Some)
}

fn beside_executable() -> Option<PathBuf> {
    let path = std::env::current_exe().ok()?.parent()?.join(LIBRARY_NAME);
    path.exists().then_some(path)
}

fn load(path: &Path) -> Result<Api, String> {
    let library = dylib::open(path, Scope::Local)
        .map_err(|why| format!("cannot load {}: {why}", path.display()))?;
    /// # Safety
    /// `F` is the C signature of `name`.
    unsafe fn function<F: Copy>(library: Library, path: &Path, name: &str) -> Result<F, String> {
        // SAFETY: as the caller vouches.
        unsafe { dylib::symbol(library, name) }
            .map_err(|why| format!("{}: no symbol {name} ({why})", path.display()))
    }
    // SAFETY: the types are graph.cpp's C signatures. The library is never closed: graphs
    // hold its code.
    unsafe {
        Ok(Api {
            capture: function(library, path, "rlc_graph_capture")?,
            replay: function(library, path, "rlc_graph_replay")?,
            free: function(library, path, "rlc_graph_free")?,
        })
    }
}

/// A captured graph, replayable until dropped.
pub struct Graph {
    api: &'static Api,
    raw: *mut c_void,
}

/// What the C side calls back: the step, and a panic of it to resume once back in Rust.
struct Callback<'a> {
    step: &'a mut dyn FnMut(),
    panic: Option<Box<dyn std::any::Any + Send>>,
}

unsafe extern "C" fn run_callback(context: *mut c_void) -> c_int {
    // SAFETY: `context` is the `Callback` that `Graph::capture` passed, alive for the call.
    let callback = unsafe { &mut *context.cast::<Callback>() };
    // A panic must not unwind through C++: it is caught, and resumed after the capture.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (callback.step)())) {
        Ok(()) => 0,
        Err(panic) => {
            callback.panic = Some(panic);
            1
        }
    }
}

const MESSAGE_ROOM: usize = 1024;

fn message(buffer: &[u8]) -> String {
    CStr::from_bytes_until_nul(buffer)
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "no message".into())
}

impl Graph {
    /// Runs `step` once on the CUDA device `device` (a warm-up: a real run, on a side stream),
    /// then captures its next run into a graph without running it: `step` must enqueue the same
    /// work on the same tensors every time, read nothing back to the host and allocate nothing
    /// that outlives it. `Ok(None)` when no graph library is available ([`available`]).
    ///
    /// # Panics
    /// Resumes a panic of `step`.
    pub fn capture(device: usize, step: &mut dyn FnMut()) -> Result<Option<Graph>, String> {
        let Some(api) = api()? else {
            return Ok(None);
        };
        let mut callback = Callback { step, panic: None };
        let mut why = [0u8; MESSAGE_ROOM];
        let device = c_int::try_from(device).map_err(|_| format!("no CUDA device {device}"))?;
        // SAFETY: the callback outlives the call (the library does not keep it); `why` has
        // MESSAGE_ROOM bytes.
        let raw = unsafe {
            (api.capture)(
                device,
                run_callback,
                (&raw mut callback).cast(),
                why.as_mut_ptr().cast(),
                MESSAGE_ROOM,
            )
        };
        if let Some(panic) = callback.panic {
            std::panic::resume_unwind(panic);
        }
        if raw.is_null() {
            return Err(format!("capturing a CUDA graph: {}", message(&why)));
        }
        Ok(Some(Graph { api, raw }))
    }

    /// Enqueues the captured work once more, on the current stream.
    pub fn replay(&self) -> Result<(), String> {
        let mut why = [0u8; MESSAGE_ROOM];
        // SAFETY: `raw` is a live graph of this library; `why` has MESSAGE_ROOM bytes.
        let failed = unsafe { (self.api.replay)(self.raw, why.as_mut_ptr().cast(), MESSAGE_ROOM) };
        if failed != 0 {
            return Err(format!("replaying a CUDA graph: {}", message(&why)));
        }
        Ok(())
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live graph of this library, freed once.
        unsafe { (self.api.free)(self.raw) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_that_does_not_load_says_why() {
        let Err(why) = load(Path::new("/nonexistent/librlc_cuda_graph.so")) else {
            panic!("loaded a library that is not there");
        };
        assert!(why.contains("/nonexistent/librlc_cuda_graph.so"), "{why}");
    }

    #[test]
    fn a_library_without_the_functions_is_refused() {
        // libc is loaded in every process, and has no rlc_graph_capture.
        let Err(why) = load(Path::new("libc.so.6")) else {
            panic!("libc passed for the graph library");
        };
        assert!(why.contains("rlc_graph_capture"), "{why}");
    }

    #[test]
    fn the_callback_catches_a_panic_for_the_caller() {
        let mut step = || panic!("a failing step");
        let mut callback = Callback {
            step: &mut step,
            panic: None,
        };
        // SAFETY: the context is a live Callback.
        let status = unsafe { run_callback((&raw mut callback).cast()) };
        assert_eq!(status, 1);
        assert!(callback.panic.is_some());
    }
}

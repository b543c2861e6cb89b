//! The per-input memory limit: a global allocator that counts the bytes live on the heap and
//! aborts the worker when an allocation would take them past the cap. The supervisor sees the
//! worker die with this module's message on its standard error and records the input as
//! having exceeded the limit.
//!
//! Why counting rather than `RLIMIT_AS`: the address-space limit counts what the process
//! reserves, not what an input makes the program hold (every thread's stack, the allocator's
//! arenas, the executable's mappings), so its threshold depends on the machine and the libc; the
//! count is exact and deterministic (the same input peaks at the same number of bytes anywhere),
//! and the peak of each input is reported. Memory that an input's work holds outside the Rust
//! heap (none in the compiler crates) would not be counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// 0: no limit.
static CAP: AtomicUsize = AtomicUsize::new(0);

/// What the worker prints when an input exceeds the limit.
pub const OVER_LIMIT: &str = "rlc-fuzz: memory limit exceeded";

pub fn set_cap(bytes: usize) {
    CAP.store(bytes, Ordering::Relaxed);
}

/// Starts measuring one input's peak from what is live now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

fn grow(size: usize) {
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
    let cap = CAP.load(Ordering::Relaxed);
    if cap != 0 && live > cap {
        // No allocation from here: the message is static and stderr is unbuffered.
        let _ = std::io::stderr().write_all(OVER_LIMIT.as_bytes());
        let _ = std::io::stderr().write_all(b"\n");
        std::process::abort();
    }
}

// SAFETY: every method forwards to `System` with the caller's layout and pointer unchanged; the
// counting touches only atomics, and the abort on the limit never returns a pointer.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: forwarded as given.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: forwarded as given.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            grow(new_size - layout.size());
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: forwarded as given.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

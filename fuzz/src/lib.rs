//! `rlc-fuzz`: a fuzzing campaign over the compiler's front end and the plan loader, on stable
//! Rust with no instrumentation (docs/fuzzing.md).
//!
//! A supervisor process generates inputs from a corpus (the UI tests, the examples, std) with a
//! deterministic PRNG and structure-aware mutations ([`mutate`]), and runs each in a worker
//! process ([`worker`]) through parse → fmt → check → render → build → plan load, or through
//! `rlc lsp`'s wire reader ([`lsp_wire`]) ([`target`]).
//! A panic is caught in the worker; a time limit is kept by the supervisor (a worker that does
//! not answer in time is killed); the memory limit by the worker's counting allocator
//! ([`alloc`]), which aborts it. A worker that dies (the memory limit, a stack overflow, an
//! abort) is restarted and the input it was running is recorded. Failing inputs are minimized
//! and saved to the findings folder, one per bucket (the class and, for a panic, its location).

pub mod alloc;
pub mod campaign;
pub mod lsp_wire;
pub mod mutate;
pub mod rng;
pub mod target;
pub mod worker;

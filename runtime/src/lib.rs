//! The runtime of `rlc`: models, generation, optimisers, collectives and checkpoint loading on
//! libtorch (through `tch`).

/// The libtorch binding the runtime is built on, for crates that hand it tensors.
pub use tch;

pub mod checkpoint;
pub mod collectives;
pub mod cuda_graph;
pub mod data;
pub mod device;
mod dylib;
pub mod exec;
pub mod generate;
pub mod hf;
pub mod kernels;
pub mod model;
pub mod optim;
pub mod panics;
pub mod parallel;
pub mod report;
pub mod rng;
pub mod tensor_file;
pub mod verify;

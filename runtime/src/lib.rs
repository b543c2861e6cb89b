//! The runtime of `rlc`: models, generation, optimisers, collectives and checkpoint loading on
//! libtorch (through `tch`).

pub mod collectives;
pub mod generate;
pub mod hf;
pub mod kernels;
pub mod model;
pub mod optim;
pub mod rng;

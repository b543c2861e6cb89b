//! What can go wrong building or running a fused kernel. Never a panic: a program the fused
//! back ends do not cover is an [`KernelError::Unsupported`], and callers fall back to the
//! reference evaluator.

use crate::builtins::ArgError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    #[error("there is no fn `{0}`")]
    UnknownFunction(String),
    #[error("in `{function}`: unknown name `{name}`")]
    UnknownName { function: String, name: String },
    #[error(transparent)]
    Arguments(#[from] ArgError),
    #[error("`{function}`: missing argument `{name}`")]
    MissingArgument { function: String, name: String },
    #[error("in `{function}`: {detail}")]
    Type { function: String, detail: String },
    #[error("in `{function}`: {what} is not supported by the fused kernels")]
    Unsupported { function: String, what: String },
    #[error("no derivative: {0}")]
    NoDerivative(String),
    #[error("kernel inputs: {0}")]
    Inputs(String),
    #[error("code generation: {0}")]
    Codegen(String),
    /// The GPU back end: CUDA missing, NVRTC or the driver failing.
    #[error("{0}")]
    Cuda(String),
}

pub type Result<T> = std::result::Result<T, KernelError>;

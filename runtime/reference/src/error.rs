//! What can go wrong while evaluating a `fn` on tensors. Every failure is a value of
//! [`EvalError`]; the evaluator never panics on a program or on its inputs.

/// An evaluation error. `function` is the `fn` being evaluated when it happened.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("there is no fn `{0}` in the root module")]
    UnknownFunction(String),
    #[error("in `{function}`: unknown name `{name}`")]
    UnknownName { function: String, name: String },
    #[error("in `{function}`: `{name}` is not callable")]
    NotCallable { function: String, name: String },
    #[error("`{function}` has no parameter `{name}`")]
    UnknownArgument { function: String, name: String },
    #[error("`{function}`: argument `{name}` is given twice")]
    RepeatedArgument { function: String, name: String },
    #[error("`{function}`: missing argument `{name}`")]
    MissingArgument { function: String, name: String },
    #[error("in `{function}`: shape mismatch: {detail}")]
    ShapeMismatch { function: String, detail: String },
    #[error("in `{function}`: element type mismatch: {detail}")]
    DtypeMismatch { function: String, detail: String },
    #[error("in `{function}`: no axis `{axis}` in a value of dimensions [{dims}]")]
    UnknownAxis {
        function: String,
        axis: String,
        dims: String,
    },
    #[error("in `{function}`: {what} is not supported by the reference evaluator")]
    Unsupported { function: String, what: String },
    #[error("in `{function}`: {detail}")]
    Scan { function: String, detail: String },
    #[error("calls nested deeper than {0} (recursion?)")]
    TooDeep(usize),
    #[error(transparent)]
    Arguments(#[from] rlc_kernel::builtins::ArgError),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

pub type Result<T> = std::result::Result<T, EvalError>;

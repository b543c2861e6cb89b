//! The builtin tensor functions of `fn` bodies and how call arguments match parameters: one
//! table for every evaluator of `fn`s (the tch reference, the kernel IR).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    Unary(Unary),
    Cast(Cast),
    Where,
    Pow,
    Clamp,
    Min,
    Max,
    Sum,
    Mean,
    Count,
    LogSumExp,
    Softmax,
    GroupSum,
    GroupMean,
    GroupStd,
    GroupCount,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unary {
    Exp,
    Log,
    Abs,
    Sqrt,
    Rsqrt,
    Sigmoid,
    Tanh,
    StopGrad,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cast {
    Float,
    Int,
    Bool,
}

/// The builtin called `name`, if any (a local or module item of that name shadows it).
pub fn lookup(name: &str) -> Option<Builtin> {
    use Builtin::*;
    Some(match name {
        "exp" => Unary(self::Unary::Exp),
        "log" => Unary(self::Unary::Log),
        "abs" => Unary(self::Unary::Abs),
        "sqrt" => Unary(self::Unary::Sqrt),
        "rsqrt" => Unary(self::Unary::Rsqrt),
        "sigmoid" => Unary(self::Unary::Sigmoid),
        "tanh" => Unary(self::Unary::Tanh),
        "stop_grad" => Unary(self::Unary::StopGrad),
        "f32" | "f16" | "bf16" => Cast(self::Cast::Float),
        "i32" | "i64" => Cast(self::Cast::Int),
        "bool" => Cast(self::Cast::Bool),
        "where" => Where,
        "pow" => Pow,
        "clamp" => Clamp,
        "min" => Min,
        "max" => Max,
        "sum" => Sum,
        "mean" => Mean,
        "count" => Count,
        "logsumexp" => LogSumExp,
        "softmax" => Softmax,
        "group_sum" => GroupSum,
        "group_mean" => GroupMean,
        "group_std" => GroupStd,
        "group_count" => GroupCount,
        _ => return None,
    })
}

/// The parameter names of a builtin, in positional order.
pub fn params(b: Builtin) -> &'static [&'static str] {
    use Builtin::*;
    match b {
        Unary(_) | Cast(_) => &["x"],
        Where => &["cond", "then", "otherwise"],
        Pow => &["x", "p"],
        Clamp => &["x", "lo", "hi"],
        Min | Max => &["x", "y", "over", "mask"],
        Sum | Mean => &["x", "over", "mask"],
        Count => &["m", "over"],
        LogSumExp | Softmax => &["z", "over"],
        GroupSum | GroupMean | GroupStd => &["x", "by"],
        GroupCount => &["by"],
    }
}

/// A call whose arguments do not match the parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgError {
    #[error("`{function}` has no parameter `{name}`")]
    Unknown { function: String, name: String },
    #[error("`{function}` takes at most {max} positional arguments")]
    TooMany { function: String, max: usize },
    #[error("`{function}`: argument `{name}` is given twice")]
    Repeated { function: String, name: String },
}

//! Built-in functions: tensor math (element-wise, reductions over a named axis, group
//! reductions) and configuration constructors (`cpu`, `device`, `arch`, `task`, `adamw`, …).

use crate::program::{self, Cluster, DeviceSpec, LrSchedule, Optimizer, Origin, Sourced};
use crate::shapes;
use crate::value::*;
use rlc_diagnostics::{Code, Diagnostic, FileId, Span};
use rlc_syntax::ast::{BinaryOp, Ident};
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `exp log abs sqrt rsqrt sigmoid tanh stop_grad`
    Unary,
    Cast(DType),
    Where,
    Pow,
    Clamp,
    /// `min`/`max`: element-wise with two arguments, a reduction with one.
    MinMax,
    Sum,
    Mean,
    Count,
    LogSumExp,
    Softmax,
    Group,
    GroupCount,
    Cpu,
    Device,
    Arch,
    Task,
    Jsonl,
    Random,
    Hf,
    Load,
    Frozen,
    AdamW,
}

#[derive(Clone, Copy, Debug)]
pub struct Builtin {
    pub kind: Kind,
    /// `(name, required)` in positional order.
    pub params: &'static [(&'static str, bool)],
}

const X: &[(&str, bool)] = &[("x", true)];
const REDUCE: &[(&str, bool)] = &[("x", true), ("over", false), ("mask", false)];

pub fn lookup(name: &str) -> Option<Builtin> {
    let b = |kind, params| Some(Builtin { kind, params });
    match name {
        "exp" | "log" | "abs" | "sqrt" | "rsqrt" | "sigmoid" | "tanh" | "stop_grad" => {
            b(Kind::Unary, X)
        }
        "f32" => b(Kind::Cast(DType::F32), X),
        "i32" => b(Kind::Cast(DType::I32), X),
        "bool" => b(Kind::Cast(DType::Bool), X),
        "where" => b(
            Kind::Where,
            &[("cond", true), ("then", true), ("otherwise", true)],
        ),
        "pow" => b(Kind::Pow, &[("x", true), ("p", true)]),
        "clamp" => b(Kind::Clamp, &[("x", true), ("lo", true), ("hi", true)]),
        "min" | "max" => b(
            Kind::MinMax,
            &[("x", true), ("y", false), ("over", false), ("mask", false)],
        ),
        "sum" => b(Kind::Sum, REDUCE),
        "mean" => b(Kind::Mean, REDUCE),
        "count" => b(Kind::Count, &[("m", true), ("over", false)]),
        "logsumexp" => b(Kind::LogSumExp, &[("z", true), ("over", true)]),
        "softmax" => b(Kind::Softmax, &[("z", true), ("over", true)]),
        "group_sum" | "group_mean" | "group_std" => b(Kind::Group, &[("x", true), ("by", true)]),
        "group_count" => b(Kind::GroupCount, &[("by", true)]),
        "cpu" => b(Kind::Cpu, &[("devices", true)]),
        "device" => b(
            Kind::Device,
            &[("memory", true), ("flops", true), ("bandwidth", true)],
        ),
        "arch" => b(
            Kind::Arch,
            &[
                ("layers", true),
                ("hidden", true),
                ("heads", true),
                ("kv_heads", false),
                ("ffn", false),
                ("vocab", true),
                ("max_len", true),
                ("rope_theta", false),
                ("tie_embeddings", false),
                ("norm_eps", false),
                ("positions", false),
            ],
        ),
        "task" => b(Kind::Task, &[("kind", true), ("digits", false)]),
        "jsonl" => b(
            Kind::Jsonl,
            &[
                ("path", true),
                ("field", true),
                ("tokenizer", false),
                ("keep", false),
            ],
        ),
        "random" => b(Kind::Random, &[("seed", true)]),
        "hf" => b(Kind::Hf, &[("path", true)]),
        "load" => b(Kind::Load, &[("path", true)]),
        "frozen" => b(Kind::Frozen, &[("model", true)]),
        "adamw" => b(
            Kind::AdamW,
            &[
                ("lr", true),
                ("warmup", false),
                ("weight_decay", false),
                ("clip", false),
                ("beta1", false),
                ("beta2", false),
                ("eps", false),
                ("schedule", false),
                ("min_lr_ratio", false),
            ],
        ),
        _ => None,
    }
}

/// The configuration constructors: what a program states about its job rather than tensor math.
/// Every parameter of each, and of the role and dataset methods below, reaches the runtime or is
/// refused (`runtime/tests/settings.rs` enumerates them).
pub const CONFIGURATION: &[&str] = &[
    "cpu", "device", "arch", "task", "jsonl", "random", "hf", "load", "frozen", "adamw",
];

/// `role.generate(…)`'s parameters, `(name, required)` in positional order.
pub const GENERATE: &[(&str, bool)] = &[
    ("prompts", true),
    ("n", false),
    ("max_new", true),
    ("temperature", false),
    ("top_p", false),
    ("top_k", false),
    ("env", false),
    ("max_turns", false),
    ("max_obs", false),
    ("staleness", false),
    ("pause_at", false),
];

/// `role.update(…) { … }`'s parameters.
pub const UPDATE: &[(&str, bool)] = &[("rollout", true), ("epochs", false), ("minibatch", false)];

/// `dataset.sample(…)`'s parameters.
pub const SAMPLE: &[(&str, bool)] = &[("n", true)];

/// `task.demonstrations(…)` and `task.preferences(…)`'s parameters.
pub const SUPERVISED: &[(&str, bool)] = &[("n", true), ("split", false)];

/// The parameters of a configuration constructor or method named in the tables above.
pub fn parameters(name: &str) -> Option<&'static [(&'static str, bool)]> {
    match name {
        "generate" => Some(GENERATE),
        "update" => Some(UPDATE),
        "sample" => Some(SAMPLE),
        "demonstrations" | "preferences" => Some(SUPERVISED),
        _ => CONFIGURATION
            .contains(&name)
            .then(|| lookup(name).map(|b| b.params))
            .flatten(),
    }
}

/// Folds an operation on two constants.
pub fn fold(op: BinaryOp, l: &Val, r: &Val) -> Option<Val> {
    use BinaryOp::*;
    match (l, r) {
        (Val::Int(Some(a)), Val::Int(Some(b))) => Some(match op {
            Add => Val::Int(a.checked_add(*b)),
            Sub => Val::Int(a.checked_sub(*b)),
            Mul => Val::Int(a.checked_mul(*b)),
            Div if *b != 0 => Val::Float(Some(*a as f64 / *b as f64)),
            Rem if *b != 0 => Val::Int(Some(a % b)),
            Eq => Val::Bool(Some(a == b)),
            Ne => Val::Bool(Some(a != b)),
            Lt => Val::Bool(Some(a < b)),
            Le => Val::Bool(Some(a <= b)),
            Gt => Val::Bool(Some(a > b)),
            Ge => Val::Bool(Some(a >= b)),
            _ => return None,
        }),
        (Val::Bool(Some(a)), Val::Bool(Some(b))) => match op {
            And => Some(Val::Bool(Some(*a && *b))),
            Or => Some(Val::Bool(Some(*a || *b))),
            Eq => Some(Val::Bool(Some(a == b))),
            Ne => Some(Val::Bool(Some(a != b))),
            _ => None,
        },
        _ => {
            let (a, b) = (num(l)?, num(r)?);
            Some(match op {
                Add => Val::Float(Some(a + b)),
                Sub => Val::Float(Some(a - b)),
                Mul => Val::Float(Some(a * b)),
                Div if b != 0.0 => Val::Float(Some(a / b)),
                Lt => Val::Bool(Some(a < b)),
                Le => Val::Bool(Some(a <= b)),
                Gt => Val::Bool(Some(a > b)),
                Ge => Val::Bool(Some(a >= b)),
                Eq => Val::Bool(Some(a == b)),
                Ne => Val::Bool(Some(a != b)),
                _ => return None,
            })
        }
    }
}

fn num(v: &Val) -> Option<f64> {
    match v {
        Val::Int(Some(i)) => Some(*i as f64),
        Val::Float(Some(f)) => Some(*f),
        _ => None,
    }
}

/// The values a configuration number may take.
#[derive(Clone, Copy, Debug)]
enum Range {
    /// > 0 (and finite).
    Positive,
    /// ≥ 0.
    NonNegative,
    /// In [0, 1): Adam's β.
    Fraction,
    /// In [0, 1].
    UpToOne,
}

impl Range {
    fn contains(self, v: f64) -> bool {
        v.is_finite()
            && match self {
                Range::Positive => v > 0.0,
                Range::NonNegative => v >= 0.0,
                Range::Fraction => (0.0..1.0).contains(&v),
                Range::UpToOne => (0.0..=1.0).contains(&v),
            }
    }

    fn describe(self) -> &'static str {
        match self {
            Range::Positive => "a positive number",
            Range::NonNegative => "at least 0",
            Range::Fraction => "at least 0 and below 1",
            Range::UpToOne => "between 0 and 1",
        }
    }
}

/// What a built-in call knows about its site.
pub struct Ctx<'a> {
    pub file: FileId,
    pub call: Span,
    pub name: &'a str,
    /// The `over:` axis name, when given.
    pub axis: Option<&'a Ident>,
}

type Args<'a> = &'a [Option<(Val, Span)>];
type Out = Result<Val, Box<Diagnostic>>;

impl Ctx<'_> {
    fn fail(&self, code: Code, message: String, span: Span, label: &str) -> Box<Diagnostic> {
        Box::new(Diagnostic::new(code, message, self.file, span).primary_label(label))
    }

    fn tensor(&self, args: Args, i: usize) -> Result<(TensorTy, bool), Box<Diagnostic>> {
        let (v, span) = args[i].as_ref().expect("required argument");
        match v.as_tensor() {
            Some(t) => Ok((t, matches!(v, Val::Int(_) | Val::Float(_) | Val::Bool(_)))),
            None => Err(self.fail(
                Code::TypeMismatch,
                format!(
                    "`{}` takes tensors or numbers, found {}",
                    self.name,
                    v.describe()
                ),
                *span,
                "not a tensor",
            )),
        }
    }

    fn float_tensor(&self, args: Args, i: usize) -> Result<TensorTy, Box<Diagnostic>> {
        let (t, literal) = self.tensor(args, i)?;
        if t.dtype.is_float() || (literal && t.dtype != DType::Bool) {
            return Ok(TensorTy {
                dtype: if t.dtype.is_float() {
                    t.dtype
                } else {
                    DType::F32
                },
                dims: t.dims,
            });
        }
        let span = args[i].as_ref().unwrap().1;
        Err(Box::new(
            Diagnostic::new(
                Code::DtypeMismatch,
                format!("`{}` takes floating-point values, found `{t}`", self.name),
                self.file,
                span,
            )
            .primary_label("not floating point")
            .help("convert with `f32(x)`"),
        ))
    }

    fn int(&self, args: Args, i: usize, what: &str) -> Result<Option<i64>, Box<Diagnostic>> {
        match &args[i] {
            None => Ok(None),
            Some((v, span)) => match v.as_int() {
                Some(n) => Ok(Some(n)),
                None => Err(self.fail(
                    Code::NotConstant,
                    format!(
                        "`{what}` must be an integer known before the job starts, found {}",
                        v.describe()
                    ),
                    *span,
                    "not a known integer",
                )),
            },
        }
    }

    fn positive(&self, args: Args, i: usize, what: &str) -> Result<Option<u64>, Box<Diagnostic>> {
        if let Some((v, span)) = &args[i]
            && let Some(found) = crate::limits::oversized(v)
        {
            return Err(Box::new(crate::limits::too_large(
                what, &found, self.file, *span,
            )));
        }
        match self.int(args, i, what)? {
            Some(n) if n >= 1 => Ok(Some(n as u64)),
            Some(n) => Err(self.fail(
                Code::TypeMismatch,
                format!("`{what}` must be at least 1, found {n}"),
                args[i].as_ref().unwrap().1,
                "not positive",
            )),
            None => Ok(None),
        }
    }

    fn float(&self, args: Args, i: usize, what: &str) -> Result<Option<f64>, Box<Diagnostic>> {
        match &args[i] {
            None => Ok(None),
            Some((v, span)) => match v.as_float() {
                Some(f) => Ok(Some(f)),
                None => Err(self.fail(
                    Code::NotConstant,
                    format!(
                        "`{what}` must be a number known before the job starts, found {}",
                        v.describe()
                    ),
                    *span,
                    "not a known number",
                )),
            },
        }
    }

    /// A number argument that must lie in `range`; `None` when not written.
    fn in_range(
        &self,
        args: Args,
        i: usize,
        what: &str,
        range: Range,
    ) -> Result<Option<f64>, Box<Diagnostic>> {
        match self.float(args, i, what)? {
            Some(v) if !range.contains(v) => {
                Err(self.out_of_range(args, i, what, v, range.describe()))
            }
            v => Ok(v),
        }
    }

    fn out_of_range(
        &self,
        args: Args,
        i: usize,
        what: &str,
        value: f64,
        expected: &str,
    ) -> Box<Diagnostic> {
        self.fail(
            Code::TypeMismatch,
            format!("`{what}` must be {expected}, found {value}"),
            args[i].as_ref().unwrap().1,
            "out of range",
        )
    }

    fn string(&self, args: Args, i: usize, what: &str) -> Result<String, Box<Diagnostic>> {
        match &args[i] {
            Some((Val::Str(Some(s)), _)) => Ok(s.clone()),
            Some((v, span)) => Err(self.fail(
                Code::TypeMismatch,
                format!("`{what}` must be a string, found {}", v.describe()),
                *span,
                "not a string",
            )),
            None => Ok(String::new()),
        }
    }

    fn bool(&self, args: Args, i: usize, what: &str) -> Result<Option<bool>, Box<Diagnostic>> {
        match &args[i] {
            None => Ok(None),
            Some((Val::Bool(Some(b)), _)) => Ok(Some(*b)),
            Some((v, span)) => Err(self.fail(
                Code::TypeMismatch,
                format!("`{what}` must be `true` or `false`, found {}", v.describe()),
                *span,
                "not a boolean",
            )),
        }
    }

    /// Removes the `over:` axis from `t`, or reduces to a scalar without one.
    fn reduce(&self, t: &TensorTy, dtype: DType) -> Out {
        let Some(axis) = self.axis else {
            return Ok(Val::Tensor(TensorTy::scalar(dtype)));
        };
        // In a pipeline tensors have sizes, not names; `B` and `T` name the rows and the
        // response tokens of a rollout's `[B, T]` tensors.
        let pipeline_axis = match (axis.name.as_str(), t.dims.as_slice()) {
            ("B", [Dim::Size(_), ..]) => Some(0),
            ("T", [Dim::Size(_), Dim::Size(_)]) => Some(1),
            _ => None,
        };
        match t
            .dims
            .iter()
            .position(|d| *d == Dim::Sym(axis.name.clone()))
            .or(pipeline_axis)
        {
            Some(p) => {
                let mut dims = t.dims.clone();
                dims.remove(p);
                Ok(Val::Tensor(TensorTy { dtype, dims }))
            }
            None => Err(Box::new(
                Diagnostic::new(
                    Code::UnknownAxis,
                    format!("`{t}` has no axis `{}`", axis.name),
                    self.file,
                    axis.span,
                )
                .primary_label("not an axis of the reduced tensor")
                .help("name one of the tensor's dimensions as written in its type"),
            )),
        }
    }

    fn mask_fits(&self, args: Args, i: usize, x: &TensorTy) -> Result<(), Box<Diagnostic>> {
        let Some((m, span)) = &args[i] else {
            return Ok(());
        };
        let Some(mt) = m.as_tensor() else {
            return Err(self.fail(
                Code::TypeMismatch,
                format!("`mask` must be a mask, found {}", m.describe()),
                *span,
                "not a mask",
            ));
        };
        if mt.dtype != DType::Bool {
            return Err(Box::new(
                Diagnostic::new(
                    Code::DtypeMismatch,
                    format!("`mask` must be a `bool` tensor, found `{mt}`"),
                    self.file,
                    *span,
                )
                .primary_label("not a mask")
                .help("compare to make a mask, e.g. `x > 0.0`"),
            ));
        }
        if mt.dims != x.dims {
            return Err(Box::new(
                Diagnostic::new(
                    Code::ShapeMismatch,
                    format!("the mask `{mt}` does not match the reduced `{x}`"),
                    self.file,
                    *span,
                )
                .primary_label("mask of another shape"),
            ));
        }
        Ok(())
    }
}

pub fn apply(b: Builtin, ctx: Ctx, args: Args) -> Out {
    match b.kind {
        Kind::Unary => ctx.float_tensor(args, 0).map(Val::Tensor),
        Kind::Cast(dtype) => {
            let (t, _) = ctx.tensor(args, 0)?;
            Ok(Val::Tensor(TensorTy {
                dtype,
                dims: t.dims,
            }))
        }
        Kind::Pow => {
            let x = ctx.float_tensor(args, 0)?;
            let p = ctx.float_tensor(args, 1)?;
            let dims = shapes::broadcast(&x, &p)
                .map_err(|m| ctx.fail(Code::ShapeMismatch, m.text.clone(), ctx.call, &m.text))?;
            Ok(Val::Tensor(TensorTy {
                dtype: x.dtype,
                dims,
            }))
        }
        Kind::Clamp => {
            let x = ctx.float_tensor(args, 0)?;
            let mut dims = x.dims.clone();
            for i in 1..3 {
                let bound = ctx.float_tensor(args, i)?;
                dims = shapes::broadcast(
                    &TensorTy {
                        dtype: x.dtype,
                        dims,
                    },
                    &bound,
                )
                .map_err(|m| {
                    ctx.fail(
                        Code::ShapeMismatch,
                        m.text.clone(),
                        args[i].as_ref().unwrap().1,
                        &m.text,
                    )
                })?;
            }
            Ok(Val::Tensor(TensorTy {
                dtype: x.dtype,
                dims,
            }))
        }
        Kind::Where => {
            let (cond, _) = ctx.tensor(args, 0)?;
            if cond.dtype != DType::Bool {
                return Err(Box::new(
                    Diagnostic::new(
                        Code::DtypeMismatch,
                        format!("the condition of `where` must be a mask, found `{cond}`"),
                        ctx.file,
                        args[0].as_ref().unwrap().1,
                    )
                    .primary_label("not a `bool` tensor")
                    .help("compare to make a mask, e.g. `where(x > 0.0, x, 0.0)`"),
                ));
            }
            let (a, a_lit) = ctx.tensor(args, 1)?;
            let (b, b_lit) = ctx.tensor(args, 2)?;
            let value = shapes::binary(BinaryOp::Add, &a, &b, a_lit, b_lit)
                .or_else(|_| {
                    if a.dtype == DType::Bool && b.dtype == DType::Bool {
                        shapes::binary(BinaryOp::And, &a, &b, false, false)
                    } else {
                        Err(mismatch_of(&a, &b))
                    }
                })
                .map_err(|m| {
                    Box::new(
                        Diagnostic::new(
                            m.code(),
                            format!("the branches of `where` are `{a}` and `{b}`"),
                            ctx.file,
                            ctx.call,
                        )
                        .primary_label(m.text)
                        .help(m.help),
                    )
                })?;
            let dims = shapes::broadcast(&cond, &value).map_err(|m| {
                Box::new(
                    Diagnostic::new(
                        Code::ShapeMismatch,
                        format!("the condition `{cond}` does not fit the values `{value}`"),
                        ctx.file,
                        args[0].as_ref().unwrap().1,
                    )
                    .primary_label(m.text)
                    .help(m.help),
                )
            })?;
            let dtype = if a_lit && b_lit && value.dtype.is_int() {
                DType::F32
            } else {
                value.dtype
            };
            Ok(Val::Tensor(TensorTy { dtype, dims }))
        }
        Kind::MinMax if args[1].is_some() => {
            let x = ctx.float_tensor(args, 0)?;
            let y = ctx.float_tensor(args, 1)?;
            let dims = shapes::broadcast(&x, &y).map_err(|m| {
                ctx.fail(
                    Code::ShapeMismatch,
                    format!("`{}` of `{x}` and `{y}`", ctx.name),
                    ctx.call,
                    &m.text,
                )
            })?;
            Ok(Val::Tensor(TensorTy {
                dtype: x.dtype,
                dims,
            }))
        }
        Kind::MinMax | Kind::Sum => {
            let (x, _) = ctx.tensor(args, 0)?;
            ctx.mask_fits(args, if b.kind == Kind::Sum { 2 } else { 3 }, &x)?;
            let dtype = if x.dtype == DType::Bool {
                DType::F32
            } else {
                x.dtype
            };
            ctx.reduce(&x, dtype)
        }
        Kind::Mean => {
            let x = ctx.float_tensor(args, 0)?;
            ctx.mask_fits(args, 2, &x)?;
            ctx.reduce(&x, DType::F32)
        }
        Kind::Count => {
            let (m, _) = ctx.tensor(args, 0)?;
            if m.dtype != DType::Bool {
                return Err(ctx.fail(
                    Code::DtypeMismatch,
                    format!("`count` counts the true entries of a mask, found `{m}`"),
                    args[0].as_ref().unwrap().1,
                    "not a mask",
                ));
            }
            ctx.reduce(&m, DType::F32)
        }
        Kind::LogSumExp => {
            let z = ctx.float_tensor(args, 0)?;
            ctx.reduce(&z, z.dtype)
        }
        Kind::Softmax => {
            let z = ctx.float_tensor(args, 0)?;
            ctx.reduce(&z, z.dtype)?;
            Ok(Val::Tensor(z))
        }
        Kind::Group | Kind::GroupCount => {
            let by_index = if b.kind == Kind::Group { 1 } else { 0 };
            let (by, _) = ctx.tensor(args, by_index)?;
            if !by.dtype.is_int() || by.dims.len() != 1 {
                return Err(Box::new(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!("`by:` takes one group id per row (`i32[B]`), found `{by}`"),
                        ctx.file,
                        args[by_index].as_ref().unwrap().1,
                    )
                    .primary_label("not group ids")
                    .help("pass `rollout.group`"),
                ));
            }
            if b.kind == Kind::GroupCount {
                return Ok(Val::Tensor(TensorTy {
                    dtype: DType::F32,
                    dims: by.dims,
                }));
            }
            let x = ctx.float_tensor(args, 0)?;
            if x.dims != by.dims {
                return Err(Box::new(
                    Diagnostic::new(Code::ShapeMismatch, format!("a group reduction needs one value per row: `{x}` against group ids `{by}`"), ctx.file, args[0].as_ref().unwrap().1)
                        .primary_label("not one value per row")
                        .help("reduce over the sequence first, e.g. `sum(r, over: T)`"),
                ));
            }
            Ok(Val::Tensor(x))
        }
        Kind::Cpu => {
            let devices = ctx.positive(args, 0, "devices")?.unwrap_or(1);
            let origin = Origin {
                file: ctx.file,
                span: args[0].as_ref().unwrap().1,
            };
            Ok(Val::ClusterSpec(Rc::new(Cluster {
                name: "cpu".into(),
                nodes: Sourced { value: 1, origin },
                devices_per_node: Sourced {
                    value: devices,
                    origin,
                },
                device: DeviceSpec {
                    name: "cpu".into(),
                    memory: 16.0 * 1024f64.powi(3),
                    flops: 50e9,
                    bandwidth: 20e9,
                },
                intra_bandwidth: 10e9,
                inter_bandwidth: 10e9,
                is_cpu: true,
                origin: Origin {
                    file: ctx.file,
                    span: ctx.call,
                },
            })))
        }
        Kind::Device => {
            let memory = ctx.float(args, 0, "memory")?.unwrap_or(0.0);
            let flops = ctx.float(args, 1, "flops")?.unwrap_or(0.0);
            let bandwidth = ctx.float(args, 2, "bandwidth")?.unwrap_or(0.0);
            for (i, v, what) in [
                (0, memory, "memory"),
                (1, flops, "flops"),
                (2, bandwidth, "bandwidth"),
            ] {
                if v <= 0.0 {
                    return Err(ctx.fail(
                        Code::TypeMismatch,
                        format!("a device's `{what}` must be positive"),
                        args[i].as_ref().unwrap().1,
                        "not positive",
                    ));
                }
            }
            Ok(Val::Device(Rc::new(DeviceSpec {
                name: "device".into(),
                memory,
                flops,
                bandwidth,
            })))
        }
        Kind::Arch => {
            let layers = ctx.positive(args, 0, "layers")?.unwrap_or(1);
            let hidden = ctx.positive(args, 1, "hidden")?.unwrap_or(1);
            let heads = ctx.positive(args, 2, "heads")?.unwrap_or(1);
            let kv_heads = ctx.positive(args, 3, "kv_heads")?.unwrap_or(heads);
            let ffn = ctx.positive(args, 4, "ffn")?.unwrap_or(4 * hidden);
            let vocab = ctx.positive(args, 5, "vocab")?.unwrap_or(1);
            let max_len = ctx.positive(args, 6, "max_len")?.unwrap_or(1);
            let rope_theta = ctx.in_range(args, 7, "rope_theta", Range::Positive)?;
            let tie_embeddings = ctx.bool(args, 8, "tie_embeddings")?.unwrap_or(false);
            let norm_eps = ctx.in_range(args, 9, "norm_eps", Range::Positive)?;
            let positions = match &args[10] {
                None => program::Positions::default(),
                Some((_, span)) => {
                    let name = ctx.string(args, 10, "positions")?;
                    program::Positions::from_name(&name).ok_or_else(|| {
                        Box::new(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                format!("unknown position encoding `{name}`"),
                                ctx.file,
                                *span,
                            )
                            .primary_label("not a position encoding")
                            .help("the position encodings are \"rope\" (rotary, the default) and \"learned\" (a learned table of `max_len` rows)"),
                        )
                    })?
                }
            };
            if positions == program::Positions::Learned
                && let Some((_, span)) = &args[7]
            {
                return Err(ctx.fail(
                    Code::TypeMismatch,
                    "`rope_theta` is the base of rotary positions; `positions: \"learned\"` has none".into(),
                    *span,
                    "would have no effect",
                ));
            }
            if hidden % heads != 0 {
                return Err(ctx.fail(
                    Code::TypeMismatch,
                    format!("`hidden` ({hidden}) is not a multiple of `heads` ({heads})"),
                    args[1].as_ref().unwrap().1,
                    "each head needs hidden / heads channels",
                ));
            }
            if heads % kv_heads != 0 {
                return Err(ctx.fail(
                    Code::TypeMismatch,
                    format!("`heads` ({heads}) is not a multiple of `kv_heads` ({kv_heads})"),
                    args[3].as_ref().unwrap().1,
                    "query heads share key/value heads in equal groups",
                ));
            }
            Ok(Val::Arch(Rc::new(program::Arch {
                preset: None,
                layers,
                hidden,
                heads,
                kv_heads,
                ffn,
                vocab,
                max_len,
                tie_embeddings,
                rope_theta,
                norm_eps,
                positions,
            })))
        }
        Kind::Task => {
            let kind = ctx.string(args, 0, "kind")?;
            let digits = ctx.positive(args, 1, "digits")?.unwrap_or(6) as i64;
            // Prompt: BOS, the operands, `=`; see the runtime's task tokenizer.
            let prompt_len = match kind.as_str() {
                "reverse_digits" | "sort_digits" => digits + 2,
                "add_numbers" | "add_with_tool" => 2 * digits + 3,
                _ => {
                    return Err(Box::new(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!("unknown task kind `{kind}`"),
                            ctx.file,
                            args[0].as_ref().unwrap().1,
                        )
                        .primary_label("not a task")
                        .help(
                            "the tasks are reverse_digits, add_numbers, sort_digits and \
                             add_with_tool",
                        ),
                    ));
                }
            };
            Ok(Val::Dataset(Rc::new(DatasetSpec {
                name: kind.clone(),
                kind,
                digits: Some(digits),
                path: None,
                field: None,
                tokenizer: None,
                tokenizer_unusable: false,
                vocab: Some(TASK_VOCAB),
                prompt_len: Some(prompt_len),
                keep: vec!["answer".into()],
                origin: Origin {
                    file: ctx.file,
                    span: ctx.call,
                },
            })))
        }
        Kind::Jsonl => {
            let path = ctx.string(args, 0, "path")?;
            let field = ctx.string(args, 1, "field")?;
            let tokenizer = ctx.string(args, 2, "tokenizer")?;
            let keep = match &args[3] {
                None => Vec::new(),
                Some((v, span)) => string_list(&ctx, v, *span, "keep")?,
            };
            Ok(Val::Dataset(Rc::new(DatasetSpec {
                name: path.clone(),
                kind: "jsonl".into(),
                digits: None,
                path: Some(path),
                field: Some(field),
                tokenizer: (!tokenizer.is_empty()).then_some(tokenizer),
                tokenizer_unusable: false,
                vocab: None,
                prompt_len: None,
                keep,
                origin: Origin {
                    file: ctx.file,
                    span: ctx.call,
                },
            })))
        }
        Kind::Random => {
            let seed = ctx.int(args, 0, "seed")?.unwrap_or(0);
            Ok(Val::Init(Rc::new(InitVal::Random(seed))))
        }
        Kind::Hf => Ok(Val::Init(Rc::new(InitVal::Hf(
            ctx.string(args, 0, "path")?,
        )))),
        Kind::Load => Ok(Val::Init(Rc::new(InitVal::Load(
            ctx.string(args, 0, "path")?,
        )))),
        Kind::Frozen => match &args[0] {
            Some((Val::Model(m), _)) => Ok(Val::Init(Rc::new(InitVal::Frozen(*m)))),
            Some((v, span)) => Err(ctx.fail(
                Code::TypeMismatch,
                format!("`frozen` takes a model, found {}", v.describe()),
                *span,
                "not a model",
            )),
            None => unreachable!("required"),
        },
        Kind::AdamW => {
            let mut o =
                Optimizer::adamw(ctx.in_range(args, 0, "lr", Range::Positive)?.unwrap_or(0.0));
            if let Some(warmup) = ctx.int(args, 1, "warmup")? {
                o.warmup = u64::try_from(warmup).map_err(|_| {
                    ctx.out_of_range(args, 1, "warmup", warmup as f64, "at least 0")
                })?;
            }
            let settings = [
                (2, "weight_decay", Range::NonNegative, &mut o.weight_decay),
                (3, "clip", Range::Positive, &mut o.clip),
                (4, "beta1", Range::Fraction, &mut o.beta1),
                (5, "beta2", Range::Fraction, &mut o.beta2),
                (6, "eps", Range::Positive, &mut o.eps),
                (8, "min_lr_ratio", Range::UpToOne, &mut o.min_lr_ratio),
            ];
            for (i, what, range, slot) in settings {
                if let Some(v) = ctx.in_range(args, i, what, range)? {
                    *slot = v;
                }
            }
            if args[7].is_some() {
                let name = ctx.string(args, 7, "schedule")?;
                o.schedule = LrSchedule::from_name(&name).ok_or_else(|| {
                    Box::new(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!("unknown learning-rate schedule `{name}`"),
                            ctx.file,
                            args[7].as_ref().unwrap().1,
                        )
                        .primary_label("not a schedule")
                        .help("the schedules are \"cosine\" (the default), \"linear\" and \"constant\""),
                    )
                })?;
            }
            if o.schedule == LrSchedule::Constant
                && let Some((_, span)) = &args[8]
            {
                return Err(ctx.fail(
                    Code::TypeMismatch,
                    "`min_lr_ratio` is the floor of a decaying schedule; `schedule: \"constant\"` has none".into(),
                    *span,
                    "would have no effect",
                ));
            }
            Ok(Val::Optim(Rc::new(o)))
        }
    }
}

/// `["a", "b"]`: a list of string literals (`keep:`, a verifier's `fields:` and `metrics:`),
/// each a name (letters, digits, `_`), none twice.
pub fn string_list(
    ctx: &Ctx,
    v: &Val,
    span: Span,
    what: &str,
) -> Result<Vec<String>, Box<Diagnostic>> {
    let Val::List(items) = v else {
        return Err(ctx.fail(
            Code::TypeMismatch,
            format!(
                "`{what}` is a list of names such as `[\"answer\"]`, found {}",
                v.describe()
            ),
            span,
            "not a list",
        ));
    };
    let mut out: Vec<String> = Vec::new();
    for item in items.iter() {
        let Val::Str(Some(s)) = item else {
            return Err(ctx.fail(
                Code::TypeMismatch,
                format!("`{what}` lists names as strings, found {}", item.describe()),
                span,
                "not a list of strings",
            ));
        };
        if s.is_empty() || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(ctx.fail(
                Code::TypeMismatch,
                format!("`{what}`: {s:?} is not a name (letters, digits and `_`)"),
                span,
                "not a name",
            ));
        }
        if out.contains(s) {
            return Err(ctx.fail(
                Code::DuplicateName,
                format!("`{what}` lists {s:?} twice"),
                span,
                "listed twice",
            ));
        }
        out.push(s.clone());
    }
    Ok(out)
}

/// Tokens of the synthetic digit tasks: 0–9, `+`, `=`, BOS, EOS, PAD, and one spare.
pub const TASK_VOCAB: i64 = 16;

fn mismatch_of(a: &TensorTy, b: &TensorTy) -> shapes::Mismatch {
    shapes::Mismatch {
        text: format!("`{a}` and `{b}`"),
        help: "both branches need one kind of value".into(),
        dtype: true,
    }
}

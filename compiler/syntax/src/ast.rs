//! The abstract syntax tree. Every node carries the byte [`Span`] of its source text; no pest
//! type appears here, so later passes depend on this module and not on the parser generator.

pub use rlc_diagnostics::Span;

/// One parsed file.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// The `//!` comments at the top of the file, without their markers.
    pub doc: Option<String>,
    pub items: Vec<Item>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// The `///` comments right above the item, without their markers.
    pub doc: Option<String>,
    pub is_pub: bool,
    pub kind: ItemKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ItemKind {
    Import(Import),
    Cluster(Cluster),
    Model(Model),
    Dataset(Dataset),
    Struct(StructDef),
    Fn(FnDef),
    Const(ConstDef),
    Place(Place),
    Pipeline(Pipeline),
    Verifier(VerifierDef),
    Environment(EnvironmentDef),
}

impl Item {
    /// The name the item declares, if it declares one (imports and placements do not).
    pub fn name(&self) -> Option<&Ident> {
        match &self.kind {
            ItemKind::Cluster(c) => Some(&c.name),
            ItemKind::Model(m) => Some(&m.name),
            ItemKind::Dataset(d) => Some(&d.name),
            ItemKind::Struct(s) => Some(&s.name),
            ItemKind::Fn(f) => Some(&f.name),
            ItemKind::Const(c) => Some(&c.name),
            ItemKind::Pipeline(p) => Some(&p.name),
            ItemKind::Verifier(v) => Some(&v.name),
            ItemKind::Environment(e) => Some(&e.name),
            ItemKind::Import(_) | ItemKind::Place(_) => None,
        }
    }

    /// The keyword that introduces the item, as a user reads it.
    pub fn keyword(&self) -> &'static str {
        match &self.kind {
            ItemKind::Import(_) => "import",
            ItemKind::Cluster(_) => "cluster",
            ItemKind::Model(_) => "model",
            ItemKind::Dataset(_) => "dataset",
            ItemKind::Struct(_) => "struct",
            ItemKind::Fn(_) => "fn",
            ItemKind::Const(_) => "let",
            ItemKind::Place(_) => "place",
            ItemKind::Pipeline(_) => "pipeline",
            ItemKind::Verifier(_) => "verifier",
            ItemKind::Environment(_) => "environment",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Import {
    pub source: ImportSource,
    /// `as name`: the module's own binding.
    pub alias: Option<Ident>,
    /// `{ a, b as c }`: the items bound directly.
    pub names: Option<Vec<ImportName>>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ImportSource {
    /// `std.algo.grpo`
    Path(Vec<Ident>),
    /// `"./lib/rewards.rl"`
    File(StrLit),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ImportName {
    pub name: Ident,
    pub alias: Option<Ident>,
    pub span: Span,
}

impl ImportName {
    /// The name the import binds in this module.
    pub fn binding(&self) -> &Ident {
        self.alias.as_ref().unwrap_or(&self.name)
    }
}

/// The right-hand side of `cluster`, `model`, `dataset`, `verifier` and `environment`: `= expr` or
/// `{ key = value … }`.
#[derive(Clone, Debug, PartialEq)]
pub enum Definition {
    Expr(Expr),
    Fields(FieldBlock),
}

#[derive(Clone, Debug, PartialEq)]
pub struct FieldBlock {
    pub fields: Vec<Field>,
    pub span: Span,
}

/// `key = value` inside a definition block.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub key: Ident,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    pub name: Ident,
    pub def: Definition,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub name: Ident,
    /// `CausalLM`, `ValueModel`, `RewardModel`.
    pub kind: Ident,
    pub def: Definition,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    pub name: Ident,
    pub def: Definition,
}

/// `verifier answer = program("python3", "answer.py", workers: 2)`: an external reward.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifierDef {
    pub name: Ident,
    pub def: Definition,
}

/// `environment calc = program("python3", "calc.py", workers: 2)`: the other side of a
/// multi-turn rollout, used only through `generate(env: calc, …)`.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvironmentDef {
    pub name: Ident,
    pub def: Definition,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StructDef {
    pub name: Ident,
    pub fields: Vec<StructField>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StructField {
    pub name: Ident,
    pub ty: TypeExpr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FnDef {
    pub name: Ident,
    pub params: Vec<Param>,
    pub ret: Option<TypeExpr>,
    pub body: Block,
}

/// A parameter of a `fn` or `pipeline`: `name`, `name: Type`, `name = default` or both.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub ty: Option<TypeExpr>,
    pub default: Option<Expr>,
    pub span: Span,
}

/// A module-level constant: `let h100 = device(…)`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstDef {
    pub name: Ident,
    pub ty: Option<TypeExpr>,
    pub value: Expr,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Place {
    pub target: PlaceTarget,
    /// `on local[0..2]`; `None` means every device of the only cluster.
    pub devices: Option<Expr>,
    pub layout: Layout,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PlaceTarget {
    /// `place auto`: every role not placed by hand.
    AllRoles(Span),
    /// `place policy.train`: one role, optionally one of its phases.
    Role { role: Ident, phase: Option<Ident> },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// The planner chooses.
    Auto(Span),
    /// `with dp(2), tp(4), micro(8)`
    Explicit(Vec<LayoutItem>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayoutKind {
    Dp,
    Tp,
    Pp,
    Fsdp,
    Sp,
    Micro,
}

impl LayoutKind {
    pub const ALL: [LayoutKind; 6] = [
        LayoutKind::Dp,
        LayoutKind::Tp,
        LayoutKind::Pp,
        LayoutKind::Fsdp,
        LayoutKind::Sp,
        LayoutKind::Micro,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LayoutKind::Dp => "dp",
            LayoutKind::Tp => "tp",
            LayoutKind::Pp => "pp",
            LayoutKind::Fsdp => "fsdp",
            LayoutKind::Sp => "sp",
            LayoutKind::Micro => "micro",
        }
    }

    pub fn from_name(name: &str) -> Option<LayoutKind> {
        LayoutKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct LayoutItem {
    pub kind: LayoutKind,
    pub kind_span: Span,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Pipeline {
    pub name: Ident,
    pub params: Vec<Param>,
    pub body: Block,
}

/// `f32`, `f32[B, T]`, `Tokens[B, 8]`, `Rollout`.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeExpr {
    pub name: Ident,
    /// `None` for a scalar or record type; `Some(vec![])` for `f32[]`.
    pub dims: Option<Vec<Dim>>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    Named(Ident),
    Size(u64, Span),
}

impl Dim {
    pub fn span(&self) -> Span {
        match self {
            Dim::Named(i) => i.span,
            Dim::Size(_, s) => *s,
        }
    }
}

/// `{ stmt … }`. In a `fn`, a closure or a scan the last statement, when it is an
/// expression, is the block's value.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

impl Block {
    /// Calls `f` on every expression of the block, outer before inner, in source order
    /// (closures', scans' and nested blocks' included).
    pub fn visit_exprs(&self, f: &mut impl FnMut(&Expr)) {
        for s in &self.stmts {
            match &s.kind {
                StmtKind::Let { value, .. }
                | StmtKind::Assign { value, .. }
                | StmtKind::Emit { value }
                | StmtKind::Expr(value) => value.visit(f),
                StmtKind::Loop {
                    range,
                    carries,
                    body,
                    ..
                } => {
                    range.visit(f);
                    carries.iter().for_each(|c| c.init.visit(f));
                    body.visit_exprs(f);
                }
                StmtKind::Every { interval, body } => {
                    interval.visit(f);
                    body.visit_exprs(f);
                }
                StmtKind::Log { record } => record.fields.iter().for_each(|x| x.value.visit(f)),
                StmtKind::Checkpoint { .. } => {}
            }
        }
    }

    /// The trailing expression that gives the block its value.
    pub fn tail(&self) -> Option<&Expr> {
        match self.stmts.last().map(|s| &s.kind) {
            Some(StmtKind::Expr(e)) => Some(e),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// `let x: T = e`
    Let {
        name: Ident,
        ty: Option<TypeExpr>,
        value: Expr,
    },
    /// `x = e` (updates a carried value of a scan or of the pipeline's `loop`)
    Assign {
        name: Ident,
        value: Expr,
    },
    /// `loop step in 0..steps with (beta = 0.1) { … }`: the carries are values a step reads
    /// as the previous step left them (an assignment in the body gives the next step's value).
    Loop {
        var: Ident,
        range: Expr,
        carries: Vec<Carry>,
        body: Block,
    },
    /// `log { reward: mean(r) }`
    Log {
        record: Record,
    },
    /// `every 100 steps { … }`
    Every {
        interval: Expr,
        body: Block,
    },
    /// `checkpoint policy, critic`
    Checkpoint {
        roles: Vec<Ident>,
    },
    /// `emit last` (inside a scan)
    Emit {
        value: Expr,
    },
    Expr(Expr),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Number(NumberLit),
    Str(StrLit),
    Bool(bool),
    Name(Ident),
    /// `base.name`
    Member {
        base: Box<Expr>,
        name: Ident,
    },
    /// `callee(args) { params -> body }`
    Call {
        callee: Box<Expr>,
        args: Vec<Arg>,
        closure: Option<Closure>,
    },
    /// `base[i, j]`
    Index {
        base: Box<Expr>,
        indices: Vec<Expr>,
    },
    Unary {
        op: UnaryOp,
        op_span: Span,
        operand: Box<Expr>,
    },
    Binary {
        op: BinaryOp,
        op_span: Span,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `(e)`, kept so that tools see what the user wrote.
    Paren(Box<Expr>),
    Record(Record),
    Scan(Box<Scan>),
    /// `["answer", "steps"]`
    List(Vec<Expr>),
}

impl Expr {
    /// Calls `f` on this expression, then on each one inside it, in source order.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        match &self.kind {
            ExprKind::Member { base, .. } => base.visit(f),
            ExprKind::Call {
                callee,
                args,
                closure,
            } => {
                callee.visit(f);
                args.iter().for_each(|a| a.value.visit(f));
                if let Some(c) = closure {
                    c.body.visit_exprs(f);
                }
            }
            ExprKind::Index { base, indices } => {
                base.visit(f);
                indices.iter().for_each(|i| i.visit(f));
            }
            ExprKind::Unary { operand, .. } => operand.visit(f),
            ExprKind::Binary { lhs, rhs, .. } => {
                lhs.visit(f);
                rhs.visit(f);
            }
            ExprKind::Paren(inner) => inner.visit(f),
            ExprKind::Record(r) => r.fields.iter().for_each(|x| x.value.visit(f)),
            ExprKind::List(items) => items.iter().for_each(|x| x.visit(f)),
            ExprKind::Scan(s) => {
                s.carries.iter().for_each(|c| c.init.visit(f));
                s.body.visit_exprs(f);
            }
            ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) | ExprKind::Name(_) => {}
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct NumberLit {
    /// The text as written (kept for the formatter).
    pub text: String,
    /// The value of the number part, before the unit.
    pub value: f64,
    /// Whether the number part has neither a fraction nor an exponent.
    pub is_integer: bool,
    pub unit: Option<Unit>,
}

impl NumberLit {
    /// The value with the unit applied (bytes, bytes/s, FLOP/s).
    pub fn scaled(&self) -> f64 {
        self.value * self.unit.map_or(1.0, Unit::scale)
    }
}

/// Units a number may carry. Bytes are binary (KiB) or decimal (KB); rates are per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    KB,
    MB,
    GB,
    TB,
    KiB,
    MiB,
    GiB,
    TiB,
    /// gigabytes per second
    GBps,
    /// terabytes per second
    TBps,
    /// gigabits per second
    Gbps,
    GFLOPS,
    TFLOPS,
    PFLOPS,
    /// milliseconds (durations are in seconds)
    Millis,
    Seconds,
    Minutes,
}

impl Unit {
    pub const ALL: [Unit; 17] = [
        Unit::KB,
        Unit::MB,
        Unit::GB,
        Unit::TB,
        Unit::KiB,
        Unit::MiB,
        Unit::GiB,
        Unit::TiB,
        Unit::GBps,
        Unit::TBps,
        Unit::Gbps,
        Unit::GFLOPS,
        Unit::TFLOPS,
        Unit::PFLOPS,
        Unit::Millis,
        Unit::Seconds,
        Unit::Minutes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Unit::KB => "KB",
            Unit::MB => "MB",
            Unit::GB => "GB",
            Unit::TB => "TB",
            Unit::KiB => "KiB",
            Unit::MiB => "MiB",
            Unit::GiB => "GiB",
            Unit::TiB => "TiB",
            Unit::GBps => "GBps",
            Unit::TBps => "TBps",
            Unit::Gbps => "Gbps",
            Unit::GFLOPS => "GFLOPS",
            Unit::TFLOPS => "TFLOPS",
            Unit::PFLOPS => "PFLOPS",
            Unit::Millis => "ms",
            Unit::Seconds => "s",
            Unit::Minutes => "min",
        }
    }

    pub fn from_name(name: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.as_str() == name)
    }

    /// A duration (`ms`, `s`, `min`).
    pub fn is_time(self) -> bool {
        matches!(self, Unit::Millis | Unit::Seconds | Unit::Minutes)
    }

    /// A size in bytes (`KB` … `TiB`).
    pub fn is_bytes(self) -> bool {
        matches!(
            self,
            Unit::KB
                | Unit::MB
                | Unit::GB
                | Unit::TB
                | Unit::KiB
                | Unit::MiB
                | Unit::GiB
                | Unit::TiB
        )
    }

    /// The factor to the base unit (byte, byte/s, FLOP/s or second).
    pub fn scale(self) -> f64 {
        match self {
            Unit::KB => 1e3,
            Unit::MB => 1e6,
            Unit::GB | Unit::GBps => 1e9,
            Unit::TB | Unit::TBps => 1e12,
            Unit::KiB => 1024.0,
            Unit::MiB => 1024.0 * 1024.0,
            Unit::GiB => 1024.0 * 1024.0 * 1024.0,
            Unit::TiB => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            Unit::Gbps => 1e9 / 8.0,
            Unit::GFLOPS => 1e9,
            Unit::TFLOPS => 1e12,
            Unit::PFLOPS => 1e15,
            Unit::Millis => 1e-3,
            Unit::Seconds => 1.0,
            Unit::Minutes => 60.0,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct StrLit {
    /// The value, escapes resolved.
    pub value: String,
    /// The source text between the quotes (kept for the formatter).
    pub raw: String,
    pub span: Span,
}

/// A call argument, positional (`x`) or named (`n: 8`).
#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    pub name: Option<Ident>,
    pub value: Expr,
    pub span: Span,
}

/// The block after a call: `{ logp -> loss }` (or `{ logp, values -> loss }`).
#[derive(Clone, Debug, PartialEq)]
pub struct Closure {
    pub params: Vec<Ident>,
    pub body: Block,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub fields: Vec<RecordField>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RecordField {
    pub name: Ident,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanDirection {
    Forward,
    Reverse,
}

/// `scan reverse over T with (next_v = 0.0, last = 0.0) { t -> … emit last }`
#[derive(Clone, Debug, PartialEq)]
pub struct Scan {
    pub direction: ScanDirection,
    pub axis: Ident,
    pub carries: Vec<Carry>,
    pub index: Ident,
    pub body: Block,
}

/// `name = init` in the `with (…)` of a scan or a `loop`.
#[derive(Clone, Debug, PartialEq)]
pub struct Carry {
    pub name: Ident,
    pub init: Expr,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Not,
}

impl UnaryOp {
    pub fn as_str(self) -> &'static str {
        match self {
            UnaryOp::Neg => "-",
            UnaryOp::Not => "!",
        }
    }

    /// The name of the kernel op that computes it in a plan (`neg`, `not`).
    pub fn kernel_name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Not => "not",
        }
    }

    /// The operator a kernel op named `name` computes.
    pub fn from_kernel_name(name: &str) -> Option<UnaryOp> {
        [UnaryOp::Neg, UnaryOp::Not]
            .into_iter()
            .find(|op| op.kernel_name() == name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Range,
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl BinaryOp {
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryOp::Range => "..",
            BinaryOp::Or => "||",
            BinaryOp::And => "&&",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
        }
    }

    /// The name of the kernel op that computes it in a plan (`sub` for `-`); a range is not
    /// computed.
    pub fn kernel_name(self) -> Option<&'static str> {
        Some(match self {
            BinaryOp::Range => return None,
            BinaryOp::Or => "or",
            BinaryOp::And => "and",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Rem => "rem",
        })
    }

    /// The operator a kernel op named `name` computes.
    pub fn from_kernel_name(name: &str) -> Option<BinaryOp> {
        use BinaryOp::*;
        [Or, And, Eq, Ne, Lt, Le, Gt, Ge, Add, Sub, Mul, Div, Rem]
            .into_iter()
            .find(|op| op.kernel_name() == Some(name))
    }

    /// Binding power: higher binds tighter. Shared by the parser and the formatter.
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Range => 1,
            BinaryOp::Or => 2,
            BinaryOp::And => 3,
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => 4,
            BinaryOp::Add | BinaryOp::Sub => 5,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => 6,
        }
    }

    pub fn is_comparison(self) -> bool {
        self.precedence() == 4
    }
}

/// Every reserved keyword, in the order of the grammar's `keyword` rule.
pub const KEYWORDS: &[&str] = &[
    "import",
    "as",
    "pub",
    "cluster",
    "model",
    "dataset",
    "struct",
    "fn",
    "let",
    "place",
    "on",
    "with",
    "auto",
    "pipeline",
    "loop",
    "in",
    "log",
    "every",
    "checkpoint",
    "scan",
    "emit",
    "true",
    "false",
    "verifier",
    "environment",
];

/// Words that are keywords only where the grammar names them.
pub const CONTEXTUAL_KEYWORDS: &[&str] = &[
    "forward", "reverse", "over", "steps", "step", "dp", "tp", "pp", "fsdp", "sp", "micro",
];

/// Keywords that start an item (the parser resumes after an error at the next one).
pub const ITEM_KEYWORDS: &[&str] = &[
    "import",
    "pub",
    "cluster",
    "model",
    "dataset",
    "struct",
    "fn",
    "let",
    "place",
    "pipeline",
    "verifier",
    "environment",
];

//! A [`Schedule`] as CUDA C, the same semantics as the Cranelift passes (`rlc-kernel-exec`'s
//! `jit/codegen.rs`). Two shapes of pass, and a finishing kernel per barrier step:
//!
//! ```text
//! extern "C" __global__ void <kernel>_pass<p>(void** bufs, const long long* sizes,
//!                                              long long rows, float* scratch)
//!   level-0 values; scalar stores by one thread (also when there are no rows)
//!   wide (the pass loops over T): a block per row
//!     for row in blockIdx.x, + gridDim.x, … < rows:
//!       a map loop: for p in threadIdx.x, + blockDim.x, … < cols (strided over the block);
//!         its row reductions: each thread's partial, then rlc_block_reduce (a fixed tree in
//!         shared memory; every thread gets the result)
//!       a scan loop, when the body is affine in its carries (`c' = A c + b`, A and b free of
//!         carries: GAE, discounted returns): in chunks, thread t the t-th chunk of the row in
//!         the scan's order. Each thread composes its chunk's maps (A, b), a fixed tree over
//!         the threads (`rlc_chunk_carries`) gives each chunk its first carries, then each runs
//!         the body over its chunk. Any other body: thread 0 runs it position after position.
//!         __syncthreads, then the block reads the scan's values
//!       level-1 stores by thread 0; __syncthreads before the next row reuses scratch
//!   narrow (no loop over T, only [B] values): a thread per row, grid-stride
//! extern "C" __global__ void <kernel>_finish<p>(same parameters)
//!   the barriers after pass p, from the level-1 values it stored: a reduction to a scalar by
//!   block 0, a group statistic by a block per row (`rlc_group`: the block strides over every
//!   row's id); sums in f64 like the host's, combined in the fixed tree
//! ```
//!
//! The runner launches the kernels one after the other on one stream, with no host step
//! between them: the stream orders a finishing kernel after its pass and the next pass after
//! it. Reduction orders are fixed by the block size alone (no atomics), so a run is
//! reproducible; they differ from the JIT's sequential order only in rounding.
//!
//! Values are `const` locals named after their nodes (`v12` is `%12` of the IR listing at
//! the top of the source), memoised per region like the JIT's: before the rows, in a row, at
//! a position; C scopes give the same visibility as the JIT's dominance. Each block's scan
//! scratch is `scans.len() · T` floats at `scratch + blockIdx.x · scans.len() · T` (each
//! thread's, `tid`, in a narrow pass, which never has scans).

use crate::ir::{Bin, Elem, GroupOp, Kernel, NodeId, Op, Red, Scan, Un, operands};
use crate::schedule::{Loop, LoopKind, Pass, Role, Schedule, Store, identity};
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;

/// Helpers the passes call: CUDA's `fminf`/`fmaxf` return the other operand for a NaN, the
/// CPU back end (and torch) propagate it; C's conversions and signed overflow are undefined
/// where the JIT's instructions saturate or wrap.
const PRELUDE: &str = r#"#define RLC_INF __int_as_float(0x7f800000)
#define RLC_NAN __int_as_float(0x7fffffff)

static __device__ __forceinline__ float rlc_min(float a, float b) {
  return (a != a || b != b) ? RLC_NAN : fminf(a, b);
}
static __device__ __forceinline__ float rlc_max(float a, float b) {
  return (a != a || b != b) ? RLC_NAN : fmaxf(a, b);
}
/* The remainder with the sign of the divisor: x - y * floor(x / y). */
static __device__ __forceinline__ float rlc_rem(float x, float y) {
  return x - y * floorf(x / y);
}
/* Truncating and saturating; NaN gives 0. */
static __device__ __forceinline__ int rlc_f2i(float x) {
  return x != x ? 0 : x >= 2147483648.0f ? 2147483647 : x <= -2147483648.0f ? (-2147483647 - 1) : (int)x;
}
static __device__ __forceinline__ int rlc_iadd(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
static __device__ __forceinline__ int rlc_isub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
static __device__ __forceinline__ int rlc_imul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
static __device__ __forceinline__ int rlc_ineg(int a) { return (int)(0u - (unsigned)a); }
static __device__ __forceinline__ int rlc_iabs(int a) { return a < 0 ? rlc_ineg(a) : a; }
static __device__ __forceinline__ int rlc_imin(int a, int b) { return a < b ? a : b; }
static __device__ __forceinline__ int rlc_imax(int a, int b) { return a > b ? a : b; }
/* The sign of the divisor; a zero divisor gives 0 (no trap). */
static __device__ __forceinline__ int rlc_irem(int x, int y) {
  if (y == 0 || y == -1) return 0;
  int r = x % y;
  return (r != 0 && ((r ^ y) < 0)) ? r + y : r;
}
static __device__ __forceinline__ double rlc_dmin(double a, double b) {
  return (a != a || b != b) ? (double)RLC_NAN : fmin(a, b);
}
static __device__ __forceinline__ double rlc_dmax(double a, double b) {
  return (a != a || b != b) ? (double)RLC_NAN : fmax(a, b);
}

/* The block's partial reductions combined in a fixed tree: thread t takes t + s for
   s = blockDim.x / 2, ..., 1 (blockDim.x a power of two, at most RLC_BLOCK_MAX), so the order
   depends on the block size alone. op: 0 sum, 1 max, 2 min; no thread's `any` gives 0. Every
   thread of the block calls it (in uniform control flow) and gets the result. */
#define RLC_BLOCK_MAX 256
static __device__ __forceinline__ float rlc_combine(int op, float a, float b) {
  return op == 0 ? a + b : op == 1 ? rlc_max(a, b) : rlc_min(a, b);
}
static __device__ __forceinline__ double rlc_combine(int op, double a, double b) {
  return op == 0 ? a + b : op == 1 ? rlc_dmax(a, b) : rlc_dmin(a, b);
}
/* T: float for a row's reduction, double for a reduction over rows (the host's sums are f64). */
template <typename T>
static __device__ T rlc_block_reduce(int op, T v, unsigned char any, T* sh, unsigned char* sany) {
  const unsigned t = threadIdx.x;
  sh[t] = v;
  sany[t] = any;
  __syncthreads();
  for (unsigned s = blockDim.x >> 1; s > 0; s >>= 1) {
    if (t < s) {
      sh[t] = rlc_combine(op, sh[t], sh[t + s]);
      sany[t] = (unsigned char)(sany[t] | sany[t + s]);
    }
    __syncthreads();
  }
  const T r = sany[0] ? sh[0] : (T)0;
  __syncthreads();  /* before the arrays are reused */
  return r;
}
/* Affine maps c -> A c + b of a scan's k carries (A row-major, k <= RLC_CARRIES_MAX): a scan
   whose body is affine in its carries runs as chunks of the row, one per thread, each chunk's
   carry in from the maps of the chunks before it. A zero coefficient drops its term even
   against an infinity or NaN, as the body's select (`where(m, ..., c)`) does. */
#define RLC_CARRIES_MAX 3
static __device__ __forceinline__ float rlc_zmul(float coef, float x) { return coef == 0.0f ? 0.0f : coef * x; }
/* (A, b) <- (P, q) after (A, b): A <- P A, b <- P b + q. */
static __device__ __forceinline__ void rlc_compose(int k, const float* P, const float* q, float* A, float* b) {
  float tA[RLC_CARRIES_MAX * RLC_CARRIES_MAX], tb[RLC_CARRIES_MAX];
  for (int c = 0; c < k; ++c) {
    for (int d = 0; d < k; ++d) {
      float s = 0.0f;
      for (int e = 0; e < k; ++e) s = s + rlc_zmul(P[c * k + e], A[e * k + d]);
      tA[c * k + d] = s;
    }
    float s = 0.0f;
    for (int e = 0; e < k; ++e) s = s + rlc_zmul(P[c * k + e], b[e]);
    tb[c] = s + q[c];
  }
  for (int i = 0; i < k * k; ++i) A[i] = tA[i];
  for (int i = 0; i < k; ++i) b[i] = tb[i];
}
/* The block's chunk maps (thread t's at maps + t * (k*k + k), in scan order) become inclusive
   prefixes in a fixed tree (Hillis-Steele over the threads), and each thread gets the carries
   its chunk starts from: the init through the chunks before it. Every thread calls it. */
static __device__ void rlc_chunk_carries(int k, float* A, float* b, float* maps, float* carry) {
  const unsigned t = threadIdx.x;
  const int w = k * k + k;
  for (int i = 0; i < k * k; ++i) maps[t * w + i] = A[i];
  for (int i = 0; i < k; ++i) maps[t * w + k * k + i] = b[i];
  __syncthreads();
  for (unsigned d = 1; d < blockDim.x; d <<= 1) {
    float pA[RLC_CARRIES_MAX * RLC_CARRIES_MAX], pb[RLC_CARRIES_MAX];
    if (t >= d) {
      for (int i = 0; i < k * k; ++i) pA[i] = maps[(t - d) * w + i];
      for (int i = 0; i < k; ++i) pb[i] = maps[(t - d) * w + k * k + i];
      rlc_compose(k, A, b, pA, pb);
    }
    __syncthreads();
    if (t >= d) {
      for (int i = 0; i < k * k; ++i) { A[i] = pA[i]; maps[t * w + i] = pA[i]; }
      for (int i = 0; i < k; ++i) { b[i] = pb[i]; maps[t * w + k * k + i] = pb[i]; }
    }
    __syncthreads();
  }
  if (t > 0) {
    float c[RLC_CARRIES_MAX];
    for (int i = 0; i < k; ++i) {
      float s = 0.0f;
      for (int d = 0; d < k; ++d) s = s + rlc_zmul(maps[(t - 1) * w + i * k + d], carry[d]);
      c[i] = s + maps[(t - 1) * w + k * k + i];
    }
    for (int i = 0; i < k; ++i) carry[i] = c[i];
  }
  __syncthreads();  /* before the maps are reused */
}
/* Row i's group statistic, as the host's `group_in` computes it: over the rows whose id is
   by[i], in double, deviations taken from the group's first member (so a group of equal values
   has a std of exactly 0). The block's threads stride over all rows and combine their partials
   with the fixed tree (the host sums in row order: the two differ only in f64 rounding). op: 0
   count, 1 sum, 2 mean, 3 std (unbiased, 0 for a group of one). x may be null (a count). Every
   thread of the block calls it and gets the result. */
static __device__ float rlc_group(int op, const float* x, const int* by, long long rows, long long i,
                                  double* sh, unsigned char* sany) {
  const int g = by[i];
  /* The first member: each thread's first match is its smallest; the block's least. */
  double first = (double)rows;
  for (long long j = threadIdx.x; j < rows; j += blockDim.x) {
    if (by[j] == g) { first = (double)j; break; }
  }
  first = rlc_block_reduce(2, first, 1, sh, sany);
  const double shift = x ? (double)x[(long long)first] : 0.0;
  double n = 0.0, s = 0.0;
  for (long long j = threadIdx.x; j < rows; j += blockDim.x) {
    if (by[j] != g) continue;
    n = n + 1.0;
    if (x) s = s + ((double)x[j] - shift);
  }
  n = rlc_block_reduce(0, n, 1, sh, sany);
  if (op == 0) return (float)n;
  s = rlc_block_reduce(0, s, 1, sh, sany);
  const double mean = s / n;
  if (op == 1) return (float)(s + shift * n);
  if (op == 2) return (float)(mean + shift);
  double sq = 0.0;
  for (long long j = threadIdx.x; j < rows; j += blockDim.x) {
    if (by[j] != g) continue;
    const double d = (x ? (double)x[j] : 0.0) - shift - mean;
    sq = sq + d * d;
  }
  sq = rlc_block_reduce(0, sq, 1, sh, sany);
  return n > 1.0 ? (float)sqrt(sq / (n - 1.0)) : 0.0f;
}
"#;

/// The most threads a block may have (the size of the shared arrays the reductions use).
pub const BLOCK_MAX: usize = 256;

/// Whether pass `p` runs a block per row (it loops over the last axis) or a thread per row.
pub fn is_wide(pass: &Pass) -> bool {
    !pass.loops.is_empty()
}

/// The threads of a wide pass's block for rows of `cols` positions: a power of two from a
/// warp to [`BLOCK_MAX`], about one position per thread.
pub fn row_threads(cols: usize) -> usize {
    cols.next_power_of_two().clamp(32, BLOCK_MAX)
}

/// The most carries of a scan run in chunks (`RLC_CARRIES_MAX`: its maps are `k² + k` floats
/// per thread in shared memory).
pub const CARRIES_MAX: usize = 3;

/// Whether a wide pass runs scan `s` in chunks, one per thread, each from the carries the
/// chunks before it give (its body is affine in its carries: [`affine_nodes`]), rather than on
/// thread 0 alone.
pub fn chunked_scan(s: &Scan) -> bool {
    affine_nodes(s).is_some()
}

/// For each node of the scan's body, whether it depends on a carry; `None` unless every carry
/// is an `f32` whose next value is affine in the carries: `A c + b`, with `A` and `b` free of
/// carries. Sums, differences, negations, products and quotients by a carry-free factor, and
/// selects on a carry-free condition keep a value affine; anything else of a carry (`max`,
/// `exp`, a product of two) does not.
pub fn affine_nodes(s: &Scan) -> Option<Vec<bool>> {
    if s.inits.is_empty() || s.inits.len() > CARRIES_MAX {
        return None;
    }
    if s.next.iter().any(|&nx| s.body[nx].elem != Elem::F32) {
        return None;
    }
    let mut dep: Vec<bool> = Vec::with_capacity(s.body.len());
    for bn in &s.body {
        let d = match &bn.op {
            Op::Carry(_) => {
                if bn.elem != Elem::F32 {
                    return None;
                }
                true
            }
            Op::Column(_) | Op::Outer(_) | Op::Const(_) => false,
            op => {
                if !operands(op).iter().any(|&o| dep[o]) {
                    false
                } else {
                    let affine = bn.elem == Elem::F32
                        && match op {
                            Op::Binary(Bin::Add | Bin::Sub, _, _) => true,
                            Op::Binary(Bin::Mul, a, b) => !(dep[*a] && dep[*b]),
                            Op::Binary(Bin::Div, _, b) => !dep[*b],
                            Op::Select(c, _, _) => !dep[*c],
                            Op::Unary(Un::Neg | Un::StopGrad, _) => true,
                            Op::Unary(Un::Cast, a) => s.body[*a].elem == Elem::F32,
                            _ => false,
                        };
                    if !affine {
                        return None;
                    }
                    true
                }
            }
        };
        dep.push(d);
    }
    Some(dep)
}

/// A body node in a chunk's map: a carry-free value, or an affine form (a coefficient per
/// carry and a constant; `None` is zero) as C expressions.
#[derive(Clone)]
enum Form {
    Free(String),
    Affine(Vec<Option<String>>, Option<String>),
}

impl Form {
    fn affine(&self, k: usize) -> (Vec<Option<String>>, Option<String>) {
        match self {
            Form::Free(x) => (vec![None; k], Some(x.clone())),
            Form::Affine(c, b) => (c.clone(), b.clone()),
        }
    }

    fn free(&self) -> String {
        match self {
            Form::Free(x) => x.clone(),
            Form::Affine(..) => unreachable!("a carry-free operand depends on a carry"),
        }
    }
}

/// `x ± y` of optional terms, `None` being zero.
fn combine(x: &Option<String>, y: &Option<String>, sub: bool) -> Option<String> {
    match (x, y) {
        (None, None) => None,
        (Some(x), None) => Some(x.clone()),
        (None, Some(y)) if sub => Some(format!("-{y}")),
        (None, Some(y)) => Some(y.clone()),
        (Some(x), Some(y)) => Some(format!("{x} {} {y}", if sub { "-" } else { "+" })),
    }
}

/// The C name of the kernel that finishes the barriers after pass `p`.
pub fn finish_name(kernel: &Kernel, p: usize) -> String {
    format!("{}_finish{p}", c_base(kernel))
}

fn c_base(kernel: &Kernel) -> String {
    kernel
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The C name of pass `p` of `kernel` (`.` and other characters C does not allow become `_`).
pub fn pass_name(kernel: &Kernel, p: usize) -> String {
    format!("{}_pass{p}", c_base(kernel))
}

/// The CUDA C source of every pass of `schedule`, one `extern "C" __global__` function each,
/// and after each pass with barriers the function that finishes them.
pub fn emit(kernel: &Kernel, schedule: &Schedule) -> String {
    let mut out = String::new();
    let wide = schedule.passes.iter().filter(|p| is_wide(p)).count();
    let finishing = schedule
        .passes
        .iter()
        .filter(|p| !p.host.is_empty())
        .count();
    let _ = writeln!(
        out,
        "// rlc-kernel: `{}` as {} CUDA pass(es) ({wide} a block per row, the others a thread per row) and {finishing} finishing kernel(s).",
        kernel.name,
        schedule.passes.len()
    );
    out.push_str("/*\n");
    for line in kernel.to_string().lines() {
        let _ = writeln!(out, " * {line}");
    }
    out.push_str(" */\n\n");
    out.push_str(PRELUDE);
    for (p, pass) in schedule.passes.iter().enumerate() {
        out.push('\n');
        out.push_str(&PassEmitter::new(kernel, schedule).pass(p, pass));
        if !pass.host.is_empty() {
            out.push('\n');
            out.push_str(&finish(kernel, schedule, p, pass));
        }
    }
    out
}

/// The kernel that finishes the barriers of `pass` from the level-1 values it stored. Block 0
/// reduces to scalars (f64 partials strided over its threads, then the fixed tree); for the
/// group statistics each block takes rows, its threads striding over every row's id. The
/// barriers of one pass read only that pass's stores, never each other, so one kernel finishes
/// them all.
fn finish(k: &Kernel, s: &Schedule, p: usize, pass: &Pass) -> String {
    let mut used = BTreeSet::new();
    let mut body = String::new();
    let mut buffer = |n: NodeId, role: fn(NodeId) -> Role| -> String {
        let b = s.buffer_of(role(n)).unwrap_or(0);
        used.insert(b);
        format!("b{b}")
    };
    for &b in &pass.host {
        let out = buffer(b, Role::Barrier);
        match &k.node(b).op {
            Op::Reduce { op, x, mask } => {
                let xs = buffer(*x, Role::Stored);
                let (name, code) = match op {
                    Red::Sum => ("sum", 0),
                    Red::Max => ("max", 1),
                    Red::Min => ("min", 2),
                };
                let init = match op {
                    Red::Sum => "0.0",
                    Red::Max => "-(double)RLC_INF",
                    Red::Min => "(double)RLC_INF",
                };
                let combine = match op {
                    Red::Sum => "acc + (double)xi".to_string(),
                    Red::Max => "rlc_dmax(acc, (double)xi)".to_string(),
                    Red::Min => "rlc_dmin(acc, (double)xi)".to_string(),
                };
                let update = match mask {
                    Some(m) => format!(
                        "if ({}[i]) {{ acc = {combine}; any = 1; }}",
                        buffer(*m, Role::Stored)
                    ),
                    None => format!("acc = {combine}; any = 1;"),
                };
                let _ = writeln!(
                    body,
                    "  if (blockIdx.x == 0) {{  // %{b}: {name} over rows\n    double acc = {init};\n    unsigned char any = 0;\n    for (long long i = threadIdx.x; i < rows; i += blockDim.x) {{\n      const float xi = {xs}[i];\n      {update}\n    }}\n    const double r = rlc_block_reduce({code}, acc, any, rlc_dred, rlc_any);\n    if (threadIdx.x == 0) {out}[0] = (float)r;\n  }}"
                );
            }
            Op::Group { op, x, by } => {
                let (name, code) = match op {
                    GroupOp::Count => ("count", 0),
                    GroupOp::Sum => ("sum", 1),
                    GroupOp::Mean => ("mean", 2),
                    GroupOp::Std => ("std", 3),
                };
                let xs = match x {
                    Some(x) => buffer(*x, Role::Stored),
                    None => "(const float*)0".to_string(),
                };
                let ids = buffer(*by, Role::Stored);
                let _ = writeln!(
                    body,
                    "  for (long long i = blockIdx.x; i < rows; i += gridDim.x) {{  // %{b}: group {name}, a block per row\n    const float r = rlc_group({code}, {xs}, {ids}, rows, i, rlc_dred, rlc_any);\n    if (threadIdx.x == 0) {out}[i] = r;\n  }}"
                );
            }
            _ => {}
        }
    }
    let mut out = String::new();
    let names: Vec<String> = pass.host.iter().map(|b| format!("%{b}")).collect();
    let _ = writeln!(
        out,
        "// After pass {p}, on the device: {}.",
        names.join(", ")
    );
    let _ = writeln!(
        out,
        "extern \"C\" __global__ void {}(void** bufs, const long long* sizes, long long rows, float* scratch) {{",
        finish_name(k, p)
    );
    // Both kinds of barrier combine the block's partials in its tree.
    out.push_str("  __shared__ double rlc_dred[RLC_BLOCK_MAX];\n");
    out.push_str("  __shared__ unsigned char rlc_any[RLC_BLOCK_MAX];\n");
    for &b in &used {
        let buf = &s.buffers[b];
        let ty = c_type(buf.elem);
        let what = match buf.role {
            Role::Stored(n) => format!("stored %{n}"),
            Role::Barrier(n) => format!("barrier %{n}"),
            Role::Input(i) => format!("input {}", k.inputs[i].name),
            Role::Output(i) => format!("output {}", k.outputs[i].name),
        };
        let _ = writeln!(out, "  {ty}* b{b} = ({ty}*)bufs[{b}];  // {what}");
    }
    out.push_str(&body);
    out.push_str("}\n");
    out
}

pub fn c_type(elem: Elem) -> &'static str {
    match elem {
        Elem::F32 => "float",
        Elem::I32 => "int",
        Elem::Bool => "unsigned char",
    }
}

/// A float constant that C reads back to the same bits.
fn float_lit(x: f32) -> String {
    if x.is_nan() {
        "RLC_NAN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "RLC_INF" } else { "(-RLC_INF)" }.into()
    } else {
        // Rust's shortest round-trip form ("0.5", "1e-6"), read by C as a float literal.
        format!("{x:?}f")
    }
}

fn int_lit(x: i32) -> String {
    if x == i32::MIN {
        "(-2147483647 - 1)".into()
    } else {
        x.to_string()
    }
}

/// A conversion of the C expression `v` between element types (as the JIT's `convert`).
fn convert(v: &str, from: Elem, to: Elem) -> String {
    match (from, to) {
        _ if from == to => v.to_string(),
        (Elem::F32, Elem::I32) => format!("rlc_f2i({v})"),
        (Elem::F32, Elem::Bool) => format!("(unsigned char)({v} != 0.0f)"),
        (Elem::I32, Elem::F32) | (Elem::Bool, Elem::F32) => format!("(float){v}"),
        (Elem::I32, Elem::Bool) => format!("(unsigned char)({v} != 0)"),
        (Elem::Bool, Elem::I32) => format!("(int){v}"),
        _ => v.to_string(),
    }
}

/// Where a value is read: the row (`row`) and the position (`p`) when they are fixed.
#[derive(Clone, Copy)]
struct At {
    row: bool,
    pos: bool,
}

const TOP: At = At {
    row: false,
    pos: false,
};
const ROW: At = At {
    row: true,
    pos: false,
};
const POS: At = At {
    row: true,
    pos: true,
};

struct PassEmitter<'a> {
    k: &'a Kernel,
    s: &'a Schedule,
    body: String,
    indent: usize,
    /// The region being written: 0 before the rows, 1 in a row, 2 in a loop over the last
    /// axis, 3 in the scalar stores' block. A value is reused only from its region or an
    /// enclosing one.
    phys: usize,
    memo: [HashMap<NodeId, String>; 4],
    /// Buffers the pass touches, declared as typed pointers at its top.
    used: BTreeSet<usize>,
    /// Whether the pass reads or writes scan scratch.
    scratch: bool,
    /// The pass's scans that later loops read from scratch.
    scratch_scans: BTreeSet<NodeId>,
    /// A block per row (the pass loops over the last axis), else a thread per row.
    wide: bool,
    /// Whether the pass reduces over a row's positions (shared arrays for the block's tree).
    reduces: bool,
    /// The most carries of the pass's chunked scans (0: none; their maps in shared memory).
    chunk_carries: usize,
}

impl<'a> PassEmitter<'a> {
    fn new(k: &'a Kernel, s: &'a Schedule) -> Self {
        PassEmitter {
            k,
            s,
            body: String::new(),
            indent: 1,
            phys: 0,
            memo: Default::default(),
            used: BTreeSet::new(),
            scratch: false,
            scratch_scans: BTreeSet::new(),
            wide: false,
            reduces: false,
            chunk_carries: 0,
        }
    }

    fn line(&mut self, text: &str) {
        for _ in 0..self.indent {
            self.body.push_str("  ");
        }
        self.body.push_str(text);
        self.body.push('\n');
    }

    fn pass(mut self, p: usize, pass: &Pass) -> String {
        self.scratch_scans = crate::schedule::scans_read_later(self.k, self.s, pass);
        self.wide = is_wide(pass);
        // Level-0 values first: every thread computes them, before any branch.
        let level0 = crate::schedule::pass_scalars(self.k, self.s, pass);
        for n in level0 {
            self.value(n, TOP);
        }
        if !pass.scalar_stores.is_empty() {
            if self.wide {
                self.line("if (blockIdx.x == 0 && threadIdx.x == 0) {  // scalar stores, once");
            } else {
                self.line("if (tid == 0) {  // scalar stores, once");
            }
            self.indent += 1;
            self.phys = 3;
            for &st in &pass.scalar_stores {
                let v = self.value(st.node, TOP);
                self.store(st, &v, false);
            }
            self.memo[3].clear();
            self.phys = 0;
            self.indent -= 1;
            self.line("}");
        }
        if !pass.loops.is_empty() || !pass.row_stores.is_empty() {
            if self.wide {
                self.line("for (long long row = blockIdx.x; row < rows; row += gridDim.x) {  // a block per row");
            } else {
                self.line(
                    "for (long long row = tid; row < rows; row += nthreads) {  // a thread per row",
                );
            }
            self.indent += 1;
            self.phys = 1;
            for (i, l) in pass.loops.iter().enumerate() {
                self.row_loop(i, l);
            }
            for &st in &pass.row_stores {
                let v = self.value(st.node, ROW);
                // Every thread of a block has the row's values; one writes them.
                self.store(st, &v, self.wide);
            }
            if self.wide && self.scratch {
                self.line("__syncthreads();  // the row done before the next reuses scratch");
            }
            self.memo[1].clear();
            self.phys = 0;
            self.indent -= 1;
            self.line("}");
        }
        let k = self.k;
        let mut out = String::new();
        let host: Vec<String> = pass.host.iter().map(|b| format!("%{b}")).collect();
        let _ = writeln!(
            out,
            "// Pass {p}: {}, {} loop(s) per row, {} row store(s), {} scalar store(s){}.",
            if self.wide {
                "a block per row"
            } else {
                "a thread per row"
            },
            pass.loops.len(),
            pass.row_stores.len(),
            pass.scalar_stores.len(),
            if host.is_empty() {
                String::new()
            } else {
                format!("; {} then finishes {}", finish_name(k, p), host.join(", "))
            }
        );
        let _ = writeln!(
            out,
            "extern \"C\" __global__ void {}(void** bufs, const long long* sizes, long long rows, float* scratch) {{",
            pass_name(k, p)
        );
        if !self.wide {
            out.push_str(
                "  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
            );
            out.push_str("  const long long nthreads = (long long)gridDim.x * blockDim.x;\n");
        }
        if k.axes.len() >= 2 {
            let _ = writeln!(out, "  const long long cols = sizes[1];  // {}", k.axes[1]);
        } else {
            out.push_str("  const long long cols = 1;\n");
        }
        if self.chunk_carries > 0 {
            let k = self.chunk_carries;
            let _ = writeln!(
                out,
                "  __shared__ float rlc_maps[RLC_BLOCK_MAX * {}];  // the chunks' affine maps",
                k * k + k
            );
        }
        if self.reduces {
            out.push_str(
                "  __shared__ float rlc_red[RLC_BLOCK_MAX];  // the block's reduction tree\n",
            );
            out.push_str("  __shared__ unsigned char rlc_any[RLC_BLOCK_MAX];\n");
        }
        if self.scratch {
            let (owner, what) = if self.wide {
                ("(long long)blockIdx.x", "this block's")
            } else {
                ("tid", "this thread's")
            };
            let _ = writeln!(
                out,
                "  float* scr = scratch + {owner} * ({} * cols);  // {what} scan rows",
                self.s.scans.len()
            );
        }
        for &b in &self.used {
            let buf = &self.s.buffers[b];
            let what = match buf.role {
                Role::Input(i) => format!("input {}", k.inputs[i].name),
                Role::Output(i) => format!("output {}", k.outputs[i].name),
                Role::Stored(n) => format!("stored %{n}"),
                Role::Barrier(n) => format!("barrier %{n}"),
            };
            let ty = c_type(buf.elem);
            let dims = k.axes[..buf.level.min(k.axes.len())].join(", ");
            let _ = writeln!(out, "  {ty}* b{b} = ({ty}*)bufs[{b}];  // {what} [{dims}]");
        }
        out.push_str(&self.body);
        out.push_str("}\n");
        out
    }

    fn row_loop(&mut self, index: usize, l: &Loop) {
        let k = self.k;
        // Level-1 values the loop reads, computed once per row before it.
        let mut level1 = Vec::new();
        for st in &l.stores {
            level1.extend(self.needed_at_level(st.node, 1));
        }
        for &r in &l.reductions {
            if let Op::Reduce { x, mask, .. } = k.node(r).op {
                for o in std::iter::once(x).chain(mask) {
                    level1.extend(self.needed_at_level(o, 1));
                }
            }
        }
        let scan = match l.kind {
            LoopKind::Scan(n) => match &k.node(n).op {
                Op::Scan(s) => Some((n, s.as_ref())),
                _ => None,
            },
            LoopKind::Map => None,
        };
        if let Some((n, s)) = scan {
            level1.extend(self.needed_at_level(n, 1));
            level1.extend(&s.inits);
        }
        level1.sort_unstable();
        level1.dedup();
        for n in level1 {
            if k.node(n).level <= 1 {
                self.value(n, ROW);
            }
        }
        let mut what = Vec::new();
        if !l.reductions.is_empty() {
            let r: Vec<String> = l.reductions.iter().map(|r| format!("%{r}")).collect();
            what.push(format!("reduces {}", r.join(", ")));
        }
        if !l.stores.is_empty() {
            let st: Vec<String> = l.stores.iter().map(|s| format!("%{}", s.node)).collect();
            what.push(format!("stores {}", st.join(", ")));
        }
        let head = match scan {
            Some((n, s)) => format!(
                "// Loop {index}: scan %{n} {} over {}",
                if s.reverse { "reverse" } else { "forward" },
                k.axes.last().map_or("T", String::as_str)
            ),
            None => format!(
                "// Loop {index}: map over {}",
                k.axes.last().map_or("T", String::as_str)
            ),
        };
        if what.is_empty() {
            self.line(&head);
        } else {
            self.line(&format!("{head}; {}", what.join("; ")));
        }
        // Accumulators with a flag "any position selected": an empty selection gives 0.
        for &r in &l.reductions {
            if let Op::Reduce { op, .. } = k.node(r).op {
                let init = float_lit(identity(op));
                self.line(&format!("float acc{r} = {init};"));
                self.line(&format!("unsigned char any{r} = 0;"));
            }
        }
        // Carries, as the types of their body nodes.
        let mut carries: Vec<(String, Elem)> = Vec::new();
        if let Some((n, s)) = scan {
            for (c, &init) in s.inits.iter().enumerate() {
                let elem = s
                    .body
                    .iter()
                    .find_map(|b| match b.op {
                        Op::Carry(i) if i == c => Some(b.elem),
                        _ => None,
                    })
                    .unwrap_or(k.node(init).elem);
                let v = self.value(init, ROW);
                let name = format!("c{n}_{c}");
                let init_v = convert(&v, k.node(init).elem, elem);
                self.line(&format!("{} {name} = {init_v};", c_type(elem)));
                carries.push((name, elem));
            }
        }
        // In a block, a scan affine in its carries runs in chunks, one per thread, from the
        // carries the chunks before give; thread 0 runs any other (sequential); a map loop's
        // positions are strided over the threads.
        let chunked = match scan {
            Some((n, s)) if self.wide => affine_nodes(s).map(|dep| (n, s, dep)),
            _ => None,
        };
        if let Some((n, s, dep)) = &chunked {
            self.chunk_maps(*n, s, dep, &carries);
        }
        let lead_scan = self.wide && scan.is_some() && chunked.is_none();
        if lead_scan {
            self.line("if (threadIdx.x == 0) {");
            self.indent += 1;
        }
        if let Some((n, s, _)) = &chunked {
            if s.reverse {
                self.line(&format!(
                    "for (long long p = rlc_hi{n} - 1; p >= rlc_lo{n}; --p) {{  // this thread's chunk"
                ));
            } else {
                self.line(&format!(
                    "for (long long p = rlc_lo{n}; p < rlc_hi{n}; ++p) {{  // this thread's chunk"
                ));
            }
        } else if scan.is_some_and(|(_, s)| s.reverse) {
            self.line("for (long long p = cols - 1; p >= 0; --p) {");
        } else if scan.is_some() || !self.wide {
            self.line("for (long long p = 0; p < cols; ++p) {");
        } else {
            self.line("for (long long p = threadIdx.x; p < cols; p += blockDim.x) {");
        }
        self.indent += 1;
        self.memo[2].clear();
        self.phys = 2;
        if let Some((n, s)) = scan {
            let mut names: Vec<String> = Vec::with_capacity(s.body.len());
            for (bi, bn) in s.body.iter().enumerate() {
                let v = match &bn.op {
                    Op::Carry(c) => carries[*c].0.clone(),
                    Op::Column(o) => self.value(*o, POS),
                    Op::Outer(o) => self.value(*o, ROW),
                    op => {
                        let expr =
                            compute(op, bn.elem, &|id| names[id].clone(), &|id| s.body[id].elem);
                        let name = format!("s{n}_{bi}");
                        self.line(&format!("const {} {name} = {expr};", c_type(bn.elem)));
                        name
                    }
                };
                names.push(v);
            }
            for (c, &nx) in s.next.iter().enumerate() {
                let line = format!("{} = {};", carries[c].0, names[nx]);
                self.line(&line);
            }
            let emitted = names[s.emit].clone();
            self.memo[2].insert(n, emitted.clone());
            if self.scratch_scans.contains(&n) {
                // Later loops of the row read the scan from scratch.
                let slot = self.scan_slot(n);
                self.scratch = true;
                let e32 = convert(&emitted, s.body[s.emit].elem, Elem::F32);
                self.line(&format!("scr[{slot} * cols + p] = {e32};  // scan %{n}"));
            }
        }
        // After the scan's body: a reduction in a scan's loop may read the scan.
        for &r in &l.reductions {
            let Op::Reduce { op, x, mask } = k.node(r).op else {
                continue;
            };
            let xv = self.value(x, POS);
            let combined = match op {
                Red::Sum => format!("acc{r} + {xv}"),
                Red::Max => format!("rlc_max(acc{r}, {xv})"),
                Red::Min => format!("rlc_min(acc{r}, {xv})"),
            };
            match mask {
                Some(m) => {
                    let mv = self.value(m, POS);
                    self.line(&format!("if ({mv}) {{ acc{r} = {combined}; any{r} = 1; }}"));
                }
                None => self.line(&format!("acc{r} = {combined}; any{r} = 1;")),
            }
        }
        for &st in &l.stores {
            let v = self.value(st.node, POS);
            self.store(st, &v, false);
        }
        self.memo[2].clear();
        self.phys = 1;
        self.indent -= 1;
        self.line("}");
        if lead_scan {
            self.indent -= 1;
            self.line("}");
            // The scan's scratch and stores, and thread 0's partials, seen by the block.
            self.line("__syncthreads();");
        } else if chunked.is_some() {
            // Every chunk's scratch and stores seen by the block.
            self.line("__syncthreads();");
        }
        for &r in &l.reductions {
            let name = format!("v{r}");
            if self.wide {
                let Op::Reduce { op, .. } = k.node(r).op else {
                    continue;
                };
                let code = match op {
                    Red::Sum => 0,
                    Red::Max => 1,
                    Red::Min => 2,
                };
                self.reduces = true;
                self.line(&format!(
                    "const float {name} = rlc_block_reduce({code}, acc{r}, any{r}, rlc_red, rlc_any);  // reduce %{r}"
                ));
            } else {
                self.line(&format!(
                    "const float {name} = any{r} ? acc{r} : 0.0f;  // reduce %{r}"
                ));
            }
            self.memo[1].insert(r, name);
        }
    }

    /// A chunked scan's first two phases: each thread composes the affine maps of its chunk's
    /// positions (in the scan's direction), then `rlc_chunk_carries` gives each thread the
    /// carries its chunk starts from; the third phase is the scan's loop over the chunk.
    fn chunk_maps(&mut self, n: NodeId, s: &Scan, dep: &[bool], carries: &[(String, Elem)]) {
        let k = s.inits.len();
        self.chunk_carries = self.chunk_carries.max(k);
        self.line(&format!(
            "// Affine in its {k} carrie(s): thread t runs the t-th chunk of the row in the scan's order."
        ));
        self.line(&format!(
            "const long long rlc_chunk{n} = (cols + blockDim.x - 1) / blockDim.x;"
        ));
        self.line(&format!(
            "long long rlc_lo{n} = (long long)threadIdx.x * rlc_chunk{n}, rlc_hi{n} = rlc_lo{n} + rlc_chunk{n};"
        ));
        self.line(&format!("if (rlc_hi{n} > cols) rlc_hi{n} = cols;"));
        self.line(&format!("if (rlc_lo{n} > cols) rlc_lo{n} = cols;"));
        if s.reverse {
            self.line(&format!(
                "{{ const long long lo = cols - rlc_hi{n}; rlc_hi{n} = cols - rlc_lo{n}; rlc_lo{n} = lo; }}"
            ));
        }
        let identity: Vec<&str> = (0..k * k)
            .map(|i| if i % (k + 1) == 0 { "1.0f" } else { "0.0f" })
            .collect();
        self.line(&format!(
            "float rlc_A{n}[{}] = {{{}}};",
            k * k,
            identity.join(", ")
        ));
        self.line(&format!(
            "float rlc_b{n}[{k}] = {{{}}};",
            vec!["0.0f"; k].join(", ")
        ));
        if s.reverse {
            self.line(&format!(
                "for (long long p = rlc_hi{n} - 1; p >= rlc_lo{n}; --p) {{  // the chunk's map"
            ));
        } else {
            self.line(&format!(
                "for (long long p = rlc_lo{n}; p < rlc_hi{n}; ++p) {{  // the chunk's map"
            ));
        }
        self.indent += 1;
        self.memo[2].clear();
        self.phys = 2;
        let mut forms: Vec<Form> = Vec::with_capacity(s.body.len());
        for (bi, bn) in s.body.iter().enumerate() {
            if !dep[bi] {
                let v = match &bn.op {
                    Op::Column(o) => self.value(*o, POS),
                    Op::Outer(o) => self.value(*o, ROW),
                    op => {
                        let expr =
                            compute(op, bn.elem, &|id| forms[id].free(), &|id| s.body[id].elem);
                        let name = format!("s{n}_{bi}");
                        self.line(&format!("const {} {name} = {expr};", c_type(bn.elem)));
                        name
                    }
                };
                forms.push(Form::Free(v));
                continue;
            }
            let (coef, constant) = match &bn.op {
                Op::Carry(c) => {
                    let mut coef = vec![None; k];
                    coef[*c] = Some("1.0f".to_string());
                    (coef, None)
                }
                Op::Binary(bin @ (Bin::Add | Bin::Sub), a, b) => {
                    let ((ca, ba), (cb, bb)) = (forms[*a].affine(k), forms[*b].affine(k));
                    let sub = *bin == Bin::Sub;
                    (
                        (0..k).map(|i| combine(&ca[i], &cb[i], sub)).collect(),
                        combine(&ba, &bb, sub),
                    )
                }
                Op::Binary(Bin::Mul, a, b) => {
                    let (form, factor) = if dep[*a] { (*a, *b) } else { (*b, *a) };
                    let f = forms[factor].free();
                    let (c, b0) = forms[form].affine(k);
                    let scale = |x: &Option<String>| x.as_ref().map(|x| format!("{x} * {f}"));
                    (c.iter().map(scale).collect(), scale(&b0))
                }
                Op::Binary(Bin::Div, a, b) => {
                    let f = forms[*b].free();
                    let (c, b0) = forms[*a].affine(k);
                    let scale = |x: &Option<String>| x.as_ref().map(|x| format!("{x} / {f}"));
                    (c.iter().map(scale).collect(), scale(&b0))
                }
                Op::Select(cond, a, b) => {
                    let cv = forms[*cond].free();
                    let ((ca, ba), (cb, bb)) = (forms[*a].affine(k), forms[*b].affine(k));
                    let pick = |x: &Option<String>, y: &Option<String>| match (x, y) {
                        (None, None) => None,
                        _ => Some(format!(
                            "{cv} ? {} : {}",
                            x.as_deref().unwrap_or("0.0f"),
                            y.as_deref().unwrap_or("0.0f")
                        )),
                    };
                    (
                        (0..k).map(|i| pick(&ca[i], &cb[i])).collect(),
                        pick(&ba, &bb),
                    )
                }
                Op::Unary(Un::Neg, a) => {
                    let (c, b0) = forms[*a].affine(k);
                    let neg = |x: &Option<String>| x.as_ref().map(|x| format!("-({x})"));
                    (c.iter().map(neg).collect(), neg(&b0))
                }
                // A cast of an f32 to f32, or a stop-gradient: the value itself.
                Op::Unary(_, a) => forms[*a].affine(k),
                other => unreachable!("not affine: {other:?}"),
            };
            // Each term a local, so that the expressions do not grow with the body.
            let mut named = |what: String, e: Option<String>| -> Option<String> {
                e.map(|e| {
                    self.line(&format!("const float {what} = {e};"));
                    what
                })
            };
            let coef: Vec<Option<String>> = coef
                .into_iter()
                .enumerate()
                .map(|(i, e)| named(format!("f{n}_{bi}_{i}"), e))
                .collect();
            let constant = named(format!("g{n}_{bi}"), constant);
            forms.push(Form::Affine(coef, constant));
        }
        let mut p_terms = Vec::with_capacity(k * k);
        let mut q_terms = Vec::with_capacity(k);
        for &nx in &s.next {
            let (c, b0) = forms[nx].affine(k);
            p_terms.extend(c.into_iter().map(|x| x.unwrap_or_else(|| "0.0f".into())));
            q_terms.push(b0.unwrap_or_else(|| "0.0f".into()));
        }
        self.line(&format!(
            "const float rlc_P{n}[{}] = {{{}}};",
            k * k,
            p_terms.join(", ")
        ));
        self.line(&format!(
            "const float rlc_q{n}[{k}] = {{{}}};",
            q_terms.join(", ")
        ));
        self.line(&format!(
            "rlc_compose({k}, rlc_P{n}, rlc_q{n}, rlc_A{n}, rlc_b{n});"
        ));
        self.memo[2].clear();
        self.phys = 1;
        self.indent -= 1;
        self.line("}");
        let names: Vec<&str> = carries.iter().map(|c| c.0.as_str()).collect();
        self.line(&format!("float rlc_c{n}[{k}] = {{{}}};", names.join(", ")));
        self.line(&format!(
            "rlc_chunk_carries({k}, rlc_A{n}, rlc_b{n}, rlc_maps, rlc_c{n});"
        ));
        for (c, name) in names.iter().enumerate() {
            self.line(&format!("{name} = rlc_c{n}[{c}];"));
        }
    }

    fn scan_slot(&self, n: NodeId) -> usize {
        self.s.scans.iter().position(|&x| x == n).unwrap_or(0)
    }

    /// Nodes of exactly `level` that `n` depends on without passing a node computed in a
    /// loop or read from memory (the JIT's rule, so both compute the same values where).
    fn needed_at_level(&self, n: NodeId, level: usize) -> Vec<NodeId> {
        crate::schedule::needed_at_level(self.k, self.s, n, level)
    }

    /// The element of a buffer of `level` at `at`.
    fn element(&mut self, buffer: usize, at: At) -> String {
        self.used.insert(buffer);
        match self.s.buffers[buffer].level {
            0 => format!("b{buffer}[0]"),
            1 if at.row => format!("b{buffer}[row]"),
            _ if at.row && at.pos => format!("b{buffer}[row * cols + p]"),
            // Not reached for a schedule the JIT accepts (it would panic there).
            _ => format!("b{buffer}[0] /* read outside its loop */"),
        }
    }

    /// Writes `v` to the store's element; by thread 0 of the block alone when `lead`.
    fn store(&mut self, st: Store, v: &str, lead: bool) {
        let buf = &self.s.buffers[st.buffer];
        let (level, elem) = (buf.level, buf.elem);
        let v = convert(v, self.k.node(st.node).elem, elem);
        let at = At {
            row: level >= 1,
            pos: level >= 2,
        };
        let target = self.element(st.buffer, at);
        let guard = if lead { "if (threadIdx.x == 0) " } else { "" };
        self.line(&format!("{guard}{target} = {v};  // store %{}", st.node));
    }

    /// The C variable holding the value of outer node `n` at `at`, declaring it if needed.
    fn value(&mut self, n: NodeId, at: At) -> String {
        for l in 0..=self.phys {
            if let Some(v) = self.memo[l].get(&n) {
                return v.clone();
            }
        }
        let k = self.k;
        let node = k.node(n);
        let expr = if let Some(&buffer) = self.s.loaded.get(&n) {
            self.element(buffer, at)
        } else {
            match &node.op {
                // Inputs are the first buffers, in order.
                Op::Input(i) => self.element(*i, at),
                Op::AxisSize(a) => format!("(float)sizes[{a}]"),
                Op::Scan(_) => {
                    // Computed by an earlier loop of this row: its scratch row.
                    let slot = self.scan_slot(n);
                    self.scratch = true;
                    convert(&format!("scr[{slot} * cols + p]"), Elem::F32, node.elem)
                }
                Op::Reduce { .. } => {
                    unreachable!("row reduction {n} read before its loop")
                }
                op => {
                    let mut vals = HashMap::new();
                    for o in crate::ir::operands(op) {
                        let v = self.value(o, at);
                        vals.insert(o, v);
                    }
                    compute(op, node.elem, &|id| vals[&id].clone(), &|id| {
                        k.node(id).elem
                    })
                }
            }
        };
        let name = format!("v{n}");
        self.line(&format!("const {} {name} = {expr};", c_type(node.elem)));
        self.memo[self.phys].insert(n, name.clone());
        name
    }
}

/// An element-wise operation on computed operands, as a C expression.
fn compute(
    op: &Op,
    elem: Elem,
    get: &dyn Fn(NodeId) -> String,
    elem_of: &dyn Fn(NodeId) -> Elem,
) -> String {
    match op {
        Op::Const(x) => match elem {
            Elem::F32 => float_lit(*x as f32),
            Elem::I32 => int_lit(*x as i64 as i32),
            Elem::Bool => u8::from(*x != 0.0).to_string(),
        },
        Op::Unary(u, a) => {
            let (x, from) = (get(*a), elem_of(*a));
            match (u, elem) {
                (Un::Cast, _) => convert(&x, from, elem),
                (Un::StopGrad, _) => x,
                (Un::Neg, Elem::F32) => format!("-{x}"),
                (Un::Neg, Elem::I32) => format!("rlc_ineg({x})"),
                (Un::Neg, Elem::Bool) => format!("(unsigned char)(0u - {x})"),
                (Un::Not, _) => format!("(unsigned char)({x} ^ 1)"),
                (Un::Abs, Elem::F32) => format!("fabsf({x})"),
                (Un::Abs, _) => format!("rlc_iabs({x})"),
                (Un::Exp, _) => format!("expf({x})"),
                (Un::Log, _) => format!("logf({x})"),
                (Un::Tanh, _) => format!("tanhf({x})"),
                (Un::Sqrt, _) => format!("sqrtf({x})"),
                (Un::Rsqrt, _) => format!("rsqrtf({x})"),
                (Un::Sigmoid, _) => format!("1.0f / (1.0f + expf(-{x}))"),
            }
        }
        Op::Binary(bin, a, b) => binary(*bin, &get(*a), &get(*b), elem_of(*a)),
        Op::Select(c, a, b) => format!("{} ? {} : {}", get(*c), get(*a), get(*b)),
        other => unreachable!("not element-wise: {other:?}"),
    }
}

fn binary(bin: Bin, x: &str, y: &str, operand: Elem) -> String {
    let cmp = |o: &str| format!("(unsigned char)({x} {o} {y})");
    match (operand, bin) {
        (_, Bin::And) => format!("(unsigned char)({x} & {y})"),
        (_, Bin::Or) => format!("(unsigned char)({x} | {y})"),
        (Elem::F32 | Elem::I32, Bin::Lt) => cmp("<"),
        (Elem::F32 | Elem::I32, Bin::Le) => cmp("<="),
        (Elem::F32 | Elem::I32, Bin::Gt) => cmp(">"),
        (Elem::F32 | Elem::I32, Bin::Ge) => cmp(">="),
        (_, Bin::Eq) => cmp("=="),
        (_, Bin::Ne) => cmp("!="),
        (Elem::F32, Bin::Add) => format!("{x} + {y}"),
        (Elem::F32, Bin::Sub) => format!("{x} - {y}"),
        (Elem::F32, Bin::Mul) => format!("{x} * {y}"),
        (Elem::F32, Bin::Div) => format!("{x} / {y}"),
        (Elem::F32, Bin::Rem) => format!("rlc_rem({x}, {y})"),
        (Elem::F32, Bin::Pow) => format!("powf({x}, {y})"),
        (Elem::F32, Bin::Min) => format!("rlc_min({x}, {y})"),
        (Elem::F32, Bin::Max) => format!("rlc_max({x}, {y})"),
        (Elem::I32, Bin::Add) => format!("rlc_iadd({x}, {y})"),
        (Elem::I32, Bin::Sub) => format!("rlc_isub({x}, {y})"),
        (Elem::I32, Bin::Mul) => format!("rlc_imul({x}, {y})"),
        (Elem::I32, Bin::Rem) => format!("rlc_irem({x}, {y})"),
        (Elem::I32, Bin::Min) => format!("rlc_imin({x}, {y})"),
        (Elem::I32, Bin::Max) => format!("rlc_imax({x}, {y})"),
        // Lowering turns integer division and powers into floats (the JIT gives 0 too).
        (Elem::I32, Bin::Div | Bin::Pow) => "0".into(),
        (Elem::Bool, _) => "(unsigned char)0".into(),
    }
}

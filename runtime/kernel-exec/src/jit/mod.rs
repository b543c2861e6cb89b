//! The CPU back end: each pass of a [`Schedule`] compiled by Cranelift to native code, run
//! over row ranges on threads; the host finishes barriers between passes.
//!
//! ```ignore
//! let kernel = rlc_kernel::lower::lower_fn(&checked.bodies, "token_mean", &["loss", "m"])?;
//! let jit = Jit::compile(&kernel)?;
//! jit.run(&[b, t], &[Slice::F32(&loss), Slice::Bool(&mask)], &mut [SliceMut::F32(&mut out)], 2)?;
//! ```

mod codegen;
mod math;
mod pool;

use crate::host;
use cranelift_codegen::ir::{AbiParam, UserFuncName, types};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module, default_libcall_names};
use rlc_kernel::error::{KernelError, Result};
use rlc_kernel::ir::{Elem, Kernel, Op};
use rlc_kernel::schedule::{Role, Schedule, schedule};
use std::collections::HashSet;

/// Input data of a kernel (row-major, `[B]` or `[B, T]` as the parameter's level says).
#[derive(Clone, Copy, Debug)]
pub enum Slice<'a> {
    F32(&'a [f32]),
    I32(&'a [i32]),
    /// Masks, one byte per element (0 = false).
    Bool(&'a [u8]),
}

/// Output data of a kernel.
#[derive(Debug)]
pub enum SliceMut<'a> {
    F32(&'a mut [f32]),
    I32(&'a mut [i32]),
    Bool(&'a mut [u8]),
}

type PassFn = unsafe extern "C" fn(*const *mut u8, *const i64, i64, i64, *mut f32);

/// A kernel compiled for this CPU.
pub struct Jit {
    kernel: Kernel,
    schedule: Schedule,
    /// Each pass's function; `None` where a pass has nothing to do over the rows (it only
    /// stored inputs for its barriers, which the host reads in place).
    passes: Vec<Option<PassFn>>,
    /// Stored barrier operands that are level-1 inputs: (buffer, input). The host reads the
    /// input instead; no pass copies it.
    aliases: Vec<(usize, usize)>,
    /// The internal buffers of the last run, reused by the next (a stored scan holds B·T
    /// values: allocating it each call costs page faults).
    spare: std::sync::Mutex<Vec<Vec<u32>>>,
    /// Owns the code the pass functions point into.
    _module: JITModule,
}

// The compiled code is immutable once finalised; the pointers stay valid while `_module` lives.
unsafe impl Send for Jit {}
unsafe impl Sync for Jit {}

extern "C" fn rlc_logf(x: f32) -> f32 {
    x.ln()
}

extern "C" fn rlc_tanhf(x: f32) -> f32 {
    x.tanh()
}

extern "C" fn rlc_powf(x: f32, y: f32) -> f32 {
    x.powf(y)
}

fn codegen_err(e: impl std::fmt::Display) -> KernelError {
    KernelError::Codegen(e.to_string())
}

impl Jit {
    pub fn compile(kernel: &Kernel) -> Result<Jit> {
        let schedule = schedule(kernel)?;
        let mut flags = settings::builder();
        flags.set("opt_level", "none").map_err(codegen_err)?;
        flags.set("is_pic", "false").map_err(codegen_err)?;
        let isa = cranelift_native::builder()
            .map_err(codegen_err)?
            .finish(settings::Flags::new(flags))
            .map_err(codegen_err)?;
        let mut jb = JITBuilder::with_isa(isa, default_libcall_names());
        jb.symbol("rlc_logf", rlc_logf as *const u8);
        jb.symbol("rlc_tanhf", rlc_tanhf as *const u8);
        jb.symbol("rlc_powf", rlc_powf as *const u8);
        let mut module = JITModule::new(jb);
        let ptr = module.target_config().pointer_type();
        let unary = {
            let mut s = module.make_signature();
            s.params.push(AbiParam::new(types::F32));
            s.returns.push(AbiParam::new(types::F32));
            s
        };
        let binary = {
            let mut s = unary.clone();
            s.params.push(AbiParam::new(types::F32));
            s
        };
        let logf = module
            .declare_function("rlc_logf", Linkage::Import, &unary)
            .map_err(codegen_err)?;
        let tanhf = module
            .declare_function("rlc_tanhf", Linkage::Import, &unary)
            .map_err(codegen_err)?;
        let powf = module
            .declare_function("rlc_powf", Linkage::Import, &binary)
            .map_err(codegen_err)?;
        let mut sig = module.make_signature();
        for t in [ptr, ptr, types::I64, types::I64, ptr] {
            sig.params.push(AbiParam::new(t));
        }
        let aliases: Vec<(usize, usize)> = schedule
            .buffers
            .iter()
            .enumerate()
            .filter_map(|(b, buf)| match buf.role {
                Role::Stored(n) if buf.level == 1 => match kernel.node(n).op {
                    Op::Input(i) if kernel.inputs[i].level == 1 => Some((b, i)),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        let aliased: HashSet<usize> = aliases.iter().map(|&(b, _)| b).collect();
        let mut ctx = module.make_context();
        let mut fctx = FunctionBuilderContext::new();
        let mut ids = Vec::new();
        for (p, pass) in schedule.passes.iter().enumerate() {
            let idle = pass.scalar_stores.is_empty()
                && pass.loops.is_empty()
                && pass
                    .row_stores
                    .iter()
                    .all(|st| aliased.contains(&st.buffer));
            if idle {
                ids.push(None);
                continue;
            }
            let name = format!("{}_pass{p}", kernel.name);
            let id = module
                .declare_function(&name, Linkage::Local, &sig)
                .map_err(codegen_err)?;
            ctx.func.signature = sig.clone();
            ctx.func.name = UserFuncName::user(0, id.as_u32());
            {
                let b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
                let calls = codegen::Calls {
                    logf: module.declare_func_in_func(logf, b.func),
                    tanhf: module.declare_func_in_func(tanhf, b.func),
                    powf: module.declare_func_in_func(powf, b.func),
                };
                let g = codegen::PassGen::new(kernel, &schedule, b, calls, ptr, &aliased);
                g.emit(pass);
            }
            let dump = std::env::var_os("RLC_JIT_DUMP").is_some();
            ctx.set_disasm(dump);
            module.define_function(id, &mut ctx).map_err(codegen_err)?;
            if dump && let Some(code) = ctx.compiled_code() {
                eprintln!("{}", code.vcode.clone().unwrap_or_default());
            }
            module.clear_context(&mut ctx);
            ids.push(Some(id));
        }
        module.finalize_definitions().map_err(codegen_err)?;
        let passes = ids
            .into_iter()
            .map(|id| {
                id.map(|id| {
                    let f = module.get_finalized_function(id);
                    // SAFETY: every pass was defined with exactly this signature.
                    unsafe { std::mem::transmute::<*const u8, PassFn>(f) }
                })
            })
            .collect();
        Ok(Jit {
            kernel: kernel.clone(),
            schedule,
            passes,
            aliases,
            spare: Default::default(),
            _module: module,
        })
    }

    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Runs the kernel. `sizes` are the axes' sizes; inputs and outputs are in the kernel's
    /// order, each with as many elements as its level's axes hold. Rows are split over
    /// `threads` threads.
    pub fn run(
        &self,
        sizes: &[usize],
        inputs: &[Slice],
        outputs: &mut [SliceMut],
        threads: usize,
    ) -> Result<()> {
        let k = &self.kernel;
        if sizes.len() != k.axes.len() {
            return Err(KernelError::Inputs(format!(
                "{} axis sizes given, the kernel has axes [{}]",
                sizes.len(),
                k.axes.join(", ")
            )));
        }
        let count = |level: usize| sizes[..level].iter().product::<usize>();
        if inputs.len() != k.inputs.len() || outputs.len() != k.outputs.len() {
            return Err(KernelError::Inputs(format!(
                "{} inputs and {} outputs given, the kernel takes {} and gives {}",
                inputs.len(),
                outputs.len(),
                k.inputs.len(),
                k.outputs.len()
            )));
        }
        let mut ptrs: Vec<*mut u8> = Vec::with_capacity(self.schedule.buffers.len());
        // Internal buffers: 4-byte aligned storage for every element type.
        let mut owned: Vec<Vec<u32>> = Vec::new();
        // Buffers of an earlier run, in the same order; their old contents are never read
        // (passes and the host write every element before it is read).
        let mut spare = std::mem::take(
            &mut *self
                .spare
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        spare.reverse();
        for buf in &self.schedule.buffers {
            let n = if buf.padded() {
                count(1) * (sizes[1] + rlc_kernel::schedule::ROW_PAD)
            } else {
                count(buf.level)
            };
            let p = match buf.role {
                Role::Input(i) => {
                    let p = &k.inputs[i];
                    let (len, elem, ptr) = match inputs[i] {
                        Slice::F32(s) => (s.len(), Elem::F32, s.as_ptr() as *mut u8),
                        Slice::I32(s) => (s.len(), Elem::I32, s.as_ptr() as *mut u8),
                        Slice::Bool(s) => (s.len(), Elem::Bool, s.as_ptr() as *mut u8),
                    };
                    if elem != p.elem || len != n {
                        return Err(KernelError::Inputs(format!(
                            "`{}` needs {n} {} values, got {len} {}",
                            p.name,
                            p.elem.name(),
                            elem.name()
                        )));
                    }
                    ptr
                }
                Role::Output(i) => {
                    let (len, elem, ptr) = match &mut outputs[i] {
                        SliceMut::F32(s) => (s.len(), Elem::F32, s.as_mut_ptr() as *mut u8),
                        SliceMut::I32(s) => (s.len(), Elem::I32, s.as_mut_ptr() as *mut u8),
                        SliceMut::Bool(s) => (s.len(), Elem::Bool, s.as_mut_ptr()),
                    };
                    if elem != buf.elem || len != n {
                        return Err(KernelError::Inputs(format!(
                            "output `{}` needs {n} {} values, got {len} {}",
                            k.outputs[i].name,
                            buf.elem.name(),
                            elem.name()
                        )));
                    }
                    ptr
                }
                Role::Stored(_)
                    if let Some(&(_, i)) = self.aliases.iter().find(|a| a.0 == ptrs.len()) =>
                {
                    // An input the host reads in place (its length is checked above:
                    // inputs come first).
                    ptrs[i]
                }
                Role::Stored(_) | Role::Barrier(_) => {
                    let mut v = spare.pop().unwrap_or_default();
                    if v.len() < n.max(1) {
                        v.resize(n.max(1), 0);
                    }
                    owned.push(v);
                    owned
                        .last_mut()
                        .map_or(std::ptr::null_mut(), |v| v.as_mut_ptr() as *mut u8)
                }
            };
            ptrs.push(p);
        }
        let sizes_i64: Vec<i64> = sizes.iter().map(|&s| s as i64).collect();
        let rows = sizes.first().copied().unwrap_or(1) as i64;
        let cols = if sizes.len() >= 2 { sizes[1] } else { 1 };
        let threads = threads.max(1).min(rows.max(1) as usize);
        // A row per scan and lane of a block of rows scanned together (codegen's ROW_LANES),
        // padded as stored rows are.
        let scratch_len = self.schedule.scans.len()
            * (cols + rlc_kernel::schedule::ROW_PAD)
            * codegen::ROW_LANES as usize;
        let chunk = (rows + threads as i64 - 1) / threads as i64;
        let shared = Shared {
            bufs: &ptrs,
            sizes: &sizes_i64,
        };
        let passes = &self.passes;
        let host = |p: usize| !self.schedule.passes[p].host.is_empty();
        let lead = passes.iter().take_while(|f| f.is_none()).count();
        // Every thread runs its rows of each pass; threads meet only around a pass whose
        // barriers the host finishes (passes exchange nothing else between rows: a stored scan
        // is read back by the thread that wrote its rows). Thread 0 finishes the barriers
        // while the others wait; a panic there is held until the protocol is complete.
        let meet = pool::Meet::new(threads);
        let failed = std::sync::Mutex::new(None);
        let body = |t: usize| {
            // The whole struct is used (it is Sync), not its fields.
            let shared = &shared;
            let begin = t as i64 * chunk;
            let end = ((t as i64 + 1) * chunk).min(rows);
            let mut scratch = vec![0f32; scratch_len.max(1)];
            for (p, f) in passes.iter().enumerate().skip(lead) {
                // Thread 0 runs every pass, rows or not: its chunk holds the scalar stores
                // (a batch of no rows still has its scalar results).
                if let Some(f) = f
                    && (begin < end || t == 0)
                {
                    // SAFETY: the buffers hold `count(level)` elements of the right type
                    // (checked above); threads write disjoint rows, thread 0's chunk also the
                    // scalar stores.
                    unsafe {
                        f(
                            shared.bufs.as_ptr(),
                            shared.sizes.as_ptr(),
                            begin,
                            end,
                            scratch.as_mut_ptr(),
                        )
                    };
                }
                if host(p) {
                    if threads > 1 {
                        meet.wait();
                    }
                    if t == 0 {
                        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            self.finish_barriers(p, shared.bufs, rows as usize)
                        }));
                        if let Err(e) = done
                            && let Ok(mut slot) = failed.lock()
                        {
                            slot.get_or_insert(e);
                        }
                    }
                    if threads > 1 {
                        meet.wait();
                    }
                }
            }
        };
        // Barriers of passes with nothing to do over the rows before the first that has
        // (group statistics of inputs) are finished here, before any thread starts.
        for p in 0..lead {
            self.finish_barriers(p, &ptrs, rows as usize);
        }
        pool::run(threads, &body);
        *self
            .spare
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = owned;
        if let Some(e) = failed
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            std::panic::resume_unwind(e);
        }
        Ok(())
    }

    /// The host's part after pass `p`: each barrier from its stored operands.
    fn finish_barriers(&self, p: usize, ptrs: &[*mut u8], rows: usize) {
        let s = &self.schedule;
        let stored = |node: usize| s.buffer_of(Role::Stored(node)).map(|b| ptrs[b]);
        // Each group id node's numbering, for the statistics that share it.
        let mut numbered: Vec<(usize, host::Groups)> = Vec::new();
        for &b in &s.passes[p].host {
            let Some(out) = s.buffer_of(Role::Barrier(b)).map(|i| ptrs[i]) else {
                continue;
            };
            // SAFETY: stored operands are level-1 buffers of `rows` elements of their node's
            // type; barrier results hold `rows` f32 (a group) or one (a reduction).
            unsafe {
                match &self.kernel.node(b).op {
                    Op::Reduce { op, x, mask } => {
                        let xs = std::slice::from_raw_parts(
                            stored(*x).unwrap_or(out) as *const f32,
                            rows,
                        );
                        let ms = mask
                            .and_then(&stored)
                            .map(|p| std::slice::from_raw_parts(p as *const u8, rows));
                        *(out as *mut f32) = host::reduce_rows(*op, xs, ms);
                    }
                    Op::Group { op, x, by } => {
                        let xs = x
                            .and_then(&stored)
                            .map(|p| std::slice::from_raw_parts(p as *const f32, rows));
                        let at = match numbered.iter().position(|(n, _)| n == by) {
                            Some(at) => at,
                            None => {
                                let ids = std::slice::from_raw_parts(
                                    stored(*by).unwrap_or(out) as *const i32,
                                    rows,
                                );
                                numbered.push((*by, host::Groups::of(ids)));
                                numbered.len() - 1
                            }
                        };
                        let o = std::slice::from_raw_parts_mut(out as *mut f32, rows);
                        host::group_in(*op, xs, &numbered[at].1, o);
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The buffer table and sizes of one run, shared by its threads.
struct Shared<'a> {
    bufs: &'a [*mut u8],
    sizes: &'a [i64],
}

// SAFETY: the pointed-to buffers outlive the run (`pool::run` returns after every thread);
// threads write disjoint rows, and the host's barrier work happens while the others wait.
unsafe impl Sync for Shared<'_> {}

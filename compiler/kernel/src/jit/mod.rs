//! The CPU back end: each pass of a [`Schedule`] compiled by Cranelift to native code, run
//! over row ranges on threads; the host finishes barriers between passes.
//!
//! ```ignore
//! let kernel = rlc_kernel::lower::lower_fn(&modules, "token_mean", &["loss", "m"])?;
//! let jit = Jit::compile(&kernel)?;
//! jit.run(&[b, t], &[Slice::F32(&loss), Slice::Bool(&mask)], &mut [SliceMut::F32(&mut out)], 2)?;
//! ```

mod codegen;
mod math;

use crate::error::{KernelError, Result};
use crate::host;
use crate::ir::{Elem, Kernel, Op};
use crate::schedule::{Role, Schedule, schedule};
use cranelift_codegen::ir::{AbiParam, UserFuncName, types};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module, default_libcall_names};

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
    passes: Vec<PassFn>,
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
        flags.set("opt_level", "speed").map_err(codegen_err)?;
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
        let mut ctx = module.make_context();
        let mut fctx = FunctionBuilderContext::new();
        let mut ids = Vec::new();
        for (p, pass) in schedule.passes.iter().enumerate() {
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
                let g = codegen::PassGen::new(kernel, &schedule, b, calls, ptr);
                g.emit(pass);
            }
            let dump = std::env::var_os("RLC_JIT_DUMP").is_some();
            ctx.set_disasm(dump);
            module.define_function(id, &mut ctx).map_err(codegen_err)?;
            if dump && let Some(code) = ctx.compiled_code() {
                eprintln!("{}", code.vcode.clone().unwrap_or_default());
            }
            module.clear_context(&mut ctx);
            ids.push(id);
        }
        module.finalize_definitions().map_err(codegen_err)?;
        let passes = ids
            .into_iter()
            .map(|id| {
                let f = module.get_finalized_function(id);
                // SAFETY: every pass was defined with exactly this signature.
                unsafe { std::mem::transmute::<*const u8, PassFn>(f) }
            })
            .collect();
        Ok(Jit {
            kernel: kernel.clone(),
            schedule,
            passes,
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
        for buf in &self.schedule.buffers {
            let n = count(buf.level);
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
                Role::Stored(_) | Role::Barrier(_) => {
                    owned.push(vec![0u32; n.max(1)]);
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
        let scratch_len = self.schedule.scans.len() * cols;
        let chunk = (rows + threads as i64 - 1) / threads as i64;
        let shared = SendPtrs(ptrs.as_ptr(), sizes_i64.as_ptr());
        let passes = &self.passes;
        if threads == 1 || rows <= 1 {
            let mut scratch = vec![0f32; scratch_len.max(1)];
            for (p, f) in passes.iter().enumerate() {
                // SAFETY: the buffers hold `count(level)` elements of the right type (checked
                // above); the pass reads and writes only rows in [0, rows).
                unsafe { f(shared.0, shared.1, 0, rows, scratch.as_mut_ptr()) };
                self.finish_barriers(p, &ptrs, rows as usize);
            }
        } else {
            // One set of threads for every pass: each runs its rows, all meet, this thread
            // finishes the pass's barriers while the others wait for the next pass.
            let meet = std::sync::Barrier::new(threads);
            let rows_of = |t: i64| (t * chunk, ((t + 1) * chunk).min(rows));
            std::thread::scope(|s| {
                for t in 1..threads as i64 {
                    let meet = &meet;
                    s.spawn(move || {
                        // The whole struct is captured (it is Send), not its fields.
                        let shared = shared;
                        let (begin, end) = rows_of(t);
                        let mut scratch = vec![0f32; scratch_len.max(1)];
                        for f in passes {
                            if begin < end {
                                // SAFETY: as above; threads write disjoint rows.
                                unsafe { f(shared.0, shared.1, begin, end, scratch.as_mut_ptr()) };
                            }
                            meet.wait();
                            meet.wait();
                        }
                    });
                }
                let (begin, end) = rows_of(0);
                let mut scratch = vec![0f32; scratch_len.max(1)];
                for (p, f) in passes.iter().enumerate() {
                    // SAFETY: as above; row 0's chunk also writes the scalar stores.
                    unsafe { f(shared.0, shared.1, begin, end, scratch.as_mut_ptr()) };
                    meet.wait();
                    self.finish_barriers(p, &ptrs, rows as usize);
                    meet.wait();
                }
            });
        }
        Ok(())
    }

    /// The host's part after pass `p`: each barrier from its stored operands.
    fn finish_barriers(&self, p: usize, ptrs: &[*mut u8], rows: usize) {
        let s = &self.schedule;
        let stored = |node: usize| s.buffer_of(Role::Stored(node)).map(|b| ptrs[b]);
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
                        let ids = std::slice::from_raw_parts(
                            stored(*by).unwrap_or(out) as *const i32,
                            rows,
                        );
                        let o = std::slice::from_raw_parts_mut(out as *mut f32, rows);
                        host::group(*op, xs, ids, o);
                    }
                    _ => {}
                }
            }
        }
    }
}

#[derive(Clone, Copy)]
struct SendPtrs(*const *mut u8, *const i64);
// SAFETY: the pointed-to buffers outlive the scoped threads, which write disjoint rows.
unsafe impl Send for SendPtrs {}

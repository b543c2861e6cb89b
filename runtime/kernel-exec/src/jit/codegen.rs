//! One pass as Cranelift IR:
//!
//! ```text
//! pass(bufs: *const *mut u8, sizes: *const i64, row_begin: i64, row_end: i64, scratch: *mut f32)
//!   level-0 values; scalar stores when row_begin == 0
//!   for i in row_begin..row_end:
//!     for each loop over t (forward, or a scan in its direction): reductions, stores
//!     level-1 stores
//! ```
//!
//! Values are memoised per region (before the rows, per row, per position); a value of a
//! lower level needed inside a loop and not computed before it is computed in place.

mod lanes;
mod vector;

pub use lanes::ROW_LANES;

use super::math;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    Block, Endianness, FuncRef, InstBuilder, MemFlags, StackSlot, Type, Value, types,
};
use cranelift_frontend::{FunctionBuilder, Variable};
use rlc_kernel::ir::{Bin, Elem, Kernel, NodeId, Op, Red, Un};
use rlc_kernel::schedule::{LoopKind, Pass, Schedule, Store, identity};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Functions the generated code calls (libm), declared in the function being built.
pub struct Calls {
    pub logf: FuncRef,
    pub tanhf: FuncRef,
    pub powf: FuncRef,
}

pub fn ty(elem: Elem) -> Type {
    match elem {
        Elem::F32 => types::F32,
        Elem::I32 => types::I32,
        Elem::Bool => types::I8,
    }
}

/// Where evaluation happens: before the rows, in a row, or at a position of a row.
#[derive(Clone, Copy)]
struct At {
    row: Option<Value>,
    pos: Option<Value>,
}

pub struct PassGen<'a, 'b> {
    pub k: &'a Kernel,
    pub s: &'a Schedule,
    pub b: FunctionBuilder<'b>,
    pub calls: Calls,
    bufs: Value,
    sizes: Value,
    scratch: Value,
    /// The region the builder is in: 0 before the rows, 1 in a row, 2 in a loop over the
    /// last axis, 3 in a side block. A value is memoised where it was computed, so that it
    /// is reused only where it dominates.
    phys: usize,
    /// The size of the last axis (1 for kernels of one axis).
    cols: Value,
    /// The row stride of padded buffers (`cols + ROW_PAD`, `Buffer::padded`).
    padded_cols: Value,
    memo: [HashMap<NodeId, Value>; 4],
    /// Every buffer's base pointer, loaded once on entry.
    ptrs: Vec<Value>,
    /// In a row: the address of the row's first element in each buffer of level 1 or 2.
    row_base: HashMap<usize, Value>,
    /// Buffers no pass writes (stored barrier operands the host reads from the inputs).
    skip: &'a HashSet<usize>,
    /// In a vector loop: four `f32` zeros, made before the loop.
    vzero: Option<Value>,
    /// In a row after a scan of four rows in lanes: which of the four (its scratch rows).
    lane: Option<Value>,
    /// In a scan of four rows in lanes: the rows' offsets, whose loads gather a lane each.
    gather: Option<lanes::Gather>,
    /// Scans of the pass that a later loop of their row reads from scratch.
    scratch_scans: BTreeSet<NodeId>,
    /// After a scan of four rows in lanes: its row reductions, a lane per row, in stack slots.
    lane_results: Vec<(NodeId, StackSlot)>,
    /// In the sixteen-wide vector loop: the iteration's first position and the group of four
    /// being written; and the mask inputs' sixteen bytes loaded so far this iteration.
    wide: Option<(Value, u8)>,
    wide_masks: HashMap<usize, Value>,
}

fn flags() -> MemFlags {
    MemFlags::trusted()
}

/// Loads of memory no pass writes while it runs (buffer pointers, sizes, inputs, values of
/// earlier passes). Not `can_move`: Cranelift would then sink them, and what depends on
/// them, into the innermost loop; values are placed by hand where they dominate.
/// Vector loads and stores need not be aligned.
fn unaligned() -> MemFlags {
    MemFlags::new().with_notrap()
}

/// Lane order for bitcasts between vector types of different lane counts.
fn little() -> MemFlags {
    MemFlags::new().with_endianness(Endianness::Little)
}

fn readonly() -> MemFlags {
    MemFlags::trusted().with_readonly()
}

impl<'a, 'b> PassGen<'a, 'b> {
    pub fn new(
        k: &'a Kernel,
        s: &'a Schedule,
        b: FunctionBuilder<'b>,
        calls: Calls,
        ptr: Type,
        skip: &'a HashSet<usize>,
    ) -> Self {
        let mut g = PassGen {
            k,
            s,
            b,
            calls,
            bufs: Value::from_u32(0),
            sizes: Value::from_u32(0),
            phys: 0,
            scratch: Value::from_u32(0),
            cols: Value::from_u32(0),
            padded_cols: Value::from_u32(0),
            memo: Default::default(),
            ptrs: Vec::new(),
            row_base: HashMap::new(),
            skip,
            vzero: None,
            lane: None,
            gather: None,
            scratch_scans: BTreeSet::new(),
            lane_results: Vec::new(),
            wide: None,
            wide_masks: HashMap::new(),
        };
        let entry = g.b.create_block();
        g.b.append_block_params_for_function_params(entry);
        g.b.switch_to_block(entry);
        let params = g.b.block_params(entry).to_vec();
        g.bufs = params[0];
        g.sizes = params[1];
        g.scratch = params[4];
        g.ptrs = (0..s.buffers.len())
            .map(|i| g.b.ins().load(ptr, readonly(), params[0], (i * 8) as i32))
            .collect();
        g.cols = if k.axes.len() >= 2 {
            g.b.ins().load(types::I64, readonly(), params[1], 8)
        } else {
            g.b.ins().iconst(types::I64, 1)
        };
        g.padded_cols =
            g.b.ins()
                .iadd_imm(g.cols, rlc_kernel::schedule::ROW_PAD as i64);
        g
    }

    /// Emits the whole pass and finishes the function.
    pub fn emit(mut self, pass: &Pass) {
        let entry = self.b.current_block().expect("entry block");
        let params = self.b.block_params(entry).to_vec();
        let (row_begin, row_end) = (params[2], params[3]);
        let top = At {
            row: None,
            pos: None,
        };
        self.scratch_scans = rlc_kernel::schedule::scans_read_later(self.k, self.s, pass);
        // Level-0 values first: they dominate everything after.
        let level0 = rlc_kernel::schedule::pass_scalars(self.k, self.s, pass);
        for n in level0 {
            self.value(n, top);
        }
        if !pass.scalar_stores.is_empty() {
            let first = self.b.ins().icmp_imm(IntCC::Equal, row_begin, 0);
            let store = self.b.create_block();
            let after = self.b.create_block();
            self.b.ins().brif(first, store, &[], after, &[]);
            self.b.switch_to_block(store);
            self.phys = 3;
            for st in &pass.scalar_stores {
                let v = self.value(st.node, top);
                self.store(*st, v, top);
            }
            self.memo[3].clear();
            self.phys = 0;
            self.b.ins().jump(after, &[]);
            self.b.switch_to_block(after);
        }
        if !pass.loops.is_empty() || self.has_row_stores(pass) {
            self.rows(pass, row_begin, row_end);
        }
        self.b.ins().return_(&[]);
        self.b.seal_all_blocks();
        self.b.finalize();
    }

    fn rows(&mut self, pass: &Pass, begin: Value, end: Value) {
        let i = self.b.declare_var(types::I64);
        self.b.def_var(i, begin);
        if let Some(first) = self.lane_scan(pass) {
            // Blocks of four rows: the first loop with the rows in lanes, then each row's
            // other loops and stores.
            let (header, exit) = self.open_loop(i, |b, iv| {
                let last = b.ins().iadd_imm(iv, ROW_LANES);
                b.ins().icmp(IntCC::SignedLessThanOrEqual, last, end)
            });
            let row0 = self.b.use_var(i);
            self.phys = 1;
            self.scan_rows_in_lanes(first, row0);
            if pass.loops.len() > 1 || self.has_row_stores(pass) {
                let j = self.b.declare_var(types::I64);
                let zero = self.b.ins().iconst(types::I64, 0);
                self.b.def_var(j, zero);
                let (inner, done) = self.open_loop(j, |b, jv| {
                    b.ins().icmp_imm(IntCC::SignedLessThan, jv, ROW_LANES)
                });
                let jv = self.b.use_var(j);
                let row = self.b.ins().iadd(row0, jv);
                self.lane = Some(jv);
                self.row_body(pass, row, 1);
                self.lane = None;
                let next = self.b.ins().iadd_imm(jv, 1);
                self.b.def_var(j, next);
                self.close_loop(inner, done);
            }
            self.phys = 0;
            let next = self.b.ins().iadd_imm(row0, ROW_LANES);
            self.b.def_var(i, next);
            self.close_loop(header, exit);
        }
        let (header, exit) =
            self.open_loop(i, |b, iv| b.ins().icmp(IntCC::SignedLessThan, iv, end));
        let row = self.b.use_var(i);
        self.row_body(pass, row, 0);
        let next = self.b.ins().iadd_imm(row, 1);
        self.b.def_var(i, next);
        self.close_loop(header, exit);
    }

    fn has_row_stores(&self, pass: &Pass) -> bool {
        pass.row_stores
            .iter()
            .any(|st| !self.skip.contains(&st.buffer))
    }

    /// One row: its loops from `first_loop` on, then its level-1 stores.
    fn row_body(&mut self, pass: &Pass, row: Value, first_loop: usize) {
        self.memo[1].clear();
        self.phys = 1;
        self.set_row(row);
        if let Some(j) = self.lane {
            // The reductions of the loop that ran with the rows in lanes: this row's lane.
            for (r, slot) in self.lane_results.clone() {
                let lanes = self.b.ins().stack_addr(types::I64, slot, 0);
                let off = self.scaled(j, 4);
                let addr = self.b.ins().iadd(lanes, off);
                let v = self.b.ins().load(types::F32, flags(), addr, 0);
                self.memo[1].insert(r, v);
            }
        }
        for l in &pass.loops[first_loop..] {
            self.row_loop(l, row);
        }
        let at = At {
            row: Some(row),
            pos: None,
        };
        for st in pass
            .row_stores
            .iter()
            .filter(|st| !self.skip.contains(&st.buffer))
        {
            let v = self.value(st.node, at);
            self.store(*st, v, at);
        }
        self.memo[1].clear();
        self.phys = 0;
    }

    /// Points `row_base` at `row` of every buffer of level 1 or 2.
    fn set_row(&mut self, row: Value) {
        self.row_base.clear();
        for (bi, buf) in self.s.buffers.iter().enumerate() {
            if buf.level == 0 {
                continue;
            }
            let elems = match buf.level {
                2 if buf.padded() => self.b.ins().imul(row, self.padded_cols),
                2 => self.b.ins().imul(row, self.cols),
                _ => row,
            };
            let off = self.scaled(elems, buf.elem.bytes());
            let base = self.b.ins().iadd(self.ptrs[bi], off);
            self.row_base.insert(bi, base);
        }
    }

    /// The address of a scan's value at `pos` in this thread's scratch: a row per scan and
    /// lane of a block of four rows, rows padded as `Buffer::padded`'s.
    fn scratch_addr(&mut self, scan: NodeId, pos: Value) -> Value {
        let slot = self.s.scans.iter().position(|&x| x == scan).unwrap_or(0);
        let first = self
            .b
            .ins()
            .imul_imm(self.padded_cols, slot as i64 * ROW_LANES);
        let first = match self.lane {
            Some(j) => {
                let lane = self.b.ins().imul(j, self.padded_cols);
                self.b.ins().iadd(first, lane)
            }
            None => first,
        };
        let idx = self.b.ins().iadd(first, pos);
        let off = self.scaled(idx, 4);
        self.b.ins().iadd(self.scratch, off)
    }

    fn row_loop(&mut self, l: &rlc_kernel::schedule::Loop, row: Value) {
        let k = self.k;
        let at_row = At {
            row: Some(row),
            pos: None,
        };
        // Level-1 values the loop reads, computed once per row before it.
        let mut level1 = Vec::new();
        for st in &l.stores {
            level1.extend(self.needed_at_level(st.node, 1));
        }
        for &r in &l.reductions {
            level1.extend(
                rlc_kernel::ir::operands(&k.node(r).op)
                    .into_iter()
                    .flat_map(|o| self.needed_at_level(o, 1)),
            );
        }
        if let LoopKind::Scan(n) = l.kind {
            level1.extend(self.needed_at_level(n, 1));
            if let Op::Scan(s) = &self.k.node(n).op {
                for &init in &s.inits {
                    level1.push(init);
                }
            }
        }
        level1.sort_unstable();
        level1.dedup();
        for n in level1 {
            if self.k.node(n).level <= 1 {
                self.value(n, at_row);
            }
        }
        // Accumulators: (value, any selected).
        let mut accs: Vec<(NodeId, Variable, Variable)> = Vec::new();
        for &r in &l.reductions {
            let Op::Reduce { op, .. } = self.k.node(r).op else {
                continue;
            };
            let acc = self.b.declare_var(types::F32);
            let init = self.b.ins().f32const(identity(op));
            self.b.def_var(acc, init);
            let any = self.b.declare_var(types::I8);
            let zero = self.b.ins().iconst(types::I8, 0);
            self.b.def_var(any, zero);
            accs.push((r, acc, any));
        }
        // Scan carries.
        let mut carries: Vec<Variable> = Vec::new();
        let scan = match l.kind {
            LoopKind::Scan(n) => match &k.node(n).op {
                Op::Scan(s) => Some((n, s.as_ref())),
                _ => None,
            },
            LoopKind::Map => None,
        };
        if let Some((_, s)) = scan {
            for (c, &init) in s.inits.iter().enumerate() {
                let elem = s.body.iter().find_map(|n| match n.op {
                    Op::Carry(i) if i == c => Some(n.elem),
                    _ => None,
                });
                let elem = elem.unwrap_or(self.k.node(init).elem);
                let var = self.b.declare_var(ty(elem));
                let v = self.value(init, at_row);
                let v = self.convert(v, self.k.node(init).elem, elem);
                self.b.def_var(var, v);
                carries.push(var);
            }
        }
        let reverse = scan.is_some_and(|(_, s)| s.reverse);
        let t = self.b.declare_var(types::I64);
        let start = if reverse {
            self.cols
        } else {
            self.b.ins().iconst(types::I64, 0)
        };
        self.b.def_var(t, start);
        if l.kind == LoopKind::Map && self.vectorizable(l) {
            self.vector_loop(l, row, t, &accs);
        }
        let cols = self.cols;
        let (header, exit) = self.open_loop(t, |b, tv| {
            if reverse {
                b.ins().icmp_imm(IntCC::SignedGreaterThan, tv, 0)
            } else {
                b.ins().icmp(IntCC::SignedLessThan, tv, cols)
            }
        });
        let tv = self.b.use_var(t);
        let pos = if reverse {
            self.b.ins().iadd_imm(tv, -1)
        } else {
            tv
        };
        let at = At {
            row: Some(row),
            pos: Some(pos),
        };
        self.memo[2].clear();
        self.phys = 2;
        if let Some((n, s)) = scan {
            let mut body_vals: HashMap<NodeId, Value> = HashMap::new();
            for (bi, bn) in s.body.iter().enumerate() {
                let v = match &bn.op {
                    Op::Carry(c) => self.b.use_var(carries[*c]),
                    Op::Column(o) => self.value(*o, at),
                    Op::Outer(o) => self.value(*o, at_row),
                    op => {
                        let get = |id: NodeId| body_vals[&id];
                        self.compute(op, bn.elem, &|id| get(id), &|id| s.body[id].elem)
                    }
                };
                body_vals.insert(bi, v);
            }
            for (c, &nx) in s.next.iter().enumerate() {
                self.b.def_var(carries[c], body_vals[&nx]);
            }
            let emitted = body_vals[&s.emit];
            self.memo[2].insert(n, emitted);
            if self.scratch_scans.contains(&n) {
                let addr = self.scratch_addr(n, pos);
                let e32 = self.convert(emitted, s.body[s.emit].elem, Elem::F32);
                self.b.ins().store(flags(), e32, addr, 0);
            }
        }
        // After the scan's body: a reduction in a scan's loop may read the scan.
        for &(r, acc, any) in &accs {
            let Op::Reduce { op, x, mask } = self.k.node(r).op else {
                continue;
            };
            let xv = self.value(x, at);
            let a = self.b.use_var(acc);
            let combined = match op {
                Red::Sum => self.b.ins().fadd(a, xv),
                Red::Max => self.b.ins().fmax(a, xv),
                Red::Min => self.b.ins().fmin(a, xv),
            };
            let (new, sel) = match mask {
                Some(m) => {
                    let mv = self.value(m, at);
                    (self.b.ins().select(mv, combined, a), mv)
                }
                None => (combined, self.b.ins().iconst(types::I8, 1)),
            };
            self.b.def_var(acc, new);
            if op != Red::Sum {
                let an = self.b.use_var(any);
                let an = self.b.ins().bor(an, sel);
                self.b.def_var(any, an);
            }
        }
        for st in &l.stores {
            let v = self.value(st.node, at);
            self.store(*st, v, at);
        }
        if reverse {
            self.b.def_var(t, pos);
        } else {
            let next = self.b.ins().iadd_imm(pos, 1);
            self.b.def_var(t, next);
        }
        self.close_loop(header, exit);
        self.memo[2].clear();
        self.phys = 1;
        for (r, acc, any) in accs {
            let a = self.b.use_var(acc);
            // A sum of nothing is its identity, zero; a minimum or maximum of nothing is zero
            // too, not ±inf.
            let v = if matches!(self.k.node(r).op, Op::Reduce { op: Red::Sum, .. }) {
                a
            } else {
                let an = self.b.use_var(any);
                let zero = self.b.ins().f32const(0.0);
                self.b.ins().select(an, a, zero)
            };
            self.memo[1].insert(r, v);
        }
    }

    /// Opens `while cond(var) { … }`: a header testing `cond` on the variable, the builder
    /// left in the body. Returns the header and the exit block, for [`PassGen::close_loop`].
    fn open_loop(
        &mut self,
        var: Variable,
        cond: impl FnOnce(&mut FunctionBuilder<'b>, Value) -> Value,
    ) -> (Block, Block) {
        let (header, body, exit) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let v = self.b.use_var(var);
        let more = cond(&mut self.b, v);
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        (header, exit)
    }

    /// Ends the body of a loop opened by [`PassGen::open_loop`]; the builder continues after it.
    fn close_loop(&mut self, header: Block, exit: Block) {
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(exit);
    }

    /// Nodes of exactly `level` that `n` depends on without passing a node computed in a loop
    /// or read from memory.
    fn needed_at_level(&self, n: NodeId, level: usize) -> Vec<NodeId> {
        rlc_kernel::schedule::needed_at_level(self.k, self.s, n, level)
    }

    /// The address of element (row, pos) of a buffer of `level`.
    fn addr(&mut self, buffer: usize, level: usize, elem: Elem, at: At) -> Value {
        match level {
            0 => self.ptrs[buffer],
            1 => self.row_base[&buffer],
            _ => {
                let pos = at.pos.expect("position");
                let off = self.scaled(pos, elem.bytes());
                self.b.ins().iadd(self.row_base[&buffer], off)
            }
        }
    }

    /// `x · bytes` as an address offset (a shift, which x86 folds into the address).
    pub(super) fn scaled(&mut self, x: Value, bytes: usize) -> Value {
        match bytes {
            1 => x,
            b if b.is_power_of_two() => self.b.ins().ishl_imm(x, b.trailing_zeros() as i64),
            b => self.b.ins().imul_imm(x, b as i64),
        }
    }

    fn store(&mut self, st: Store, v: Value, at: At) {
        let buf = &self.s.buffers[st.buffer];
        let (level, elem) = (buf.level, buf.elem);
        let v = self.convert(v, self.k.node(st.node).elem, elem);
        let addr = self.addr(st.buffer, level, elem, at);
        self.b.ins().store(flags(), v, addr, 0);
    }

    fn load(&mut self, buffer: usize, at: At) -> Value {
        let buf = &self.s.buffers[buffer];
        let (level, elem) = (buf.level, buf.elem);
        let addr = self.addr(buffer, level, elem, at);
        self.b.ins().load(ty(elem), readonly(), addr, 0)
    }

    /// The value of an outer node at `at` (its level must not exceed what `at` fixes).
    fn value(&mut self, n: NodeId, at: At) -> Value {
        let k = self.k;
        let node = k.node(n);
        for l in 0..=self.phys {
            if let Some(&v) = self.memo[l].get(&n) {
                return v;
            }
        }
        let v = if let Some(&buffer) = self.s.loaded.get(&n) {
            let lv = self.s.buffers[buffer].level;
            let at = At {
                row: if lv >= 1 { at.row } else { None },
                pos: if lv >= 2 { at.pos } else { None },
            };
            self.load(buffer, at)
        } else {
            match &node.op {
                Op::Input(i) => {
                    let lv = self.k.inputs[*i].level;
                    let at = At {
                        row: if lv >= 1 { at.row } else { None },
                        pos: if lv >= 2 { at.pos } else { None },
                    };
                    self.load(*i, at)
                }
                Op::AxisSize(a) => {
                    let s = self
                        .b
                        .ins()
                        .load(types::I64, flags(), self.sizes, (*a * 8) as i32);
                    self.b.ins().fcvt_from_sint(types::F32, s)
                }
                Op::Scan(_) => {
                    // Computed by an earlier loop of this row: its scratch row.
                    let addr = self.scratch_addr(n, at.pos.expect("scan read at a position"));
                    let v = self.b.ins().load(types::F32, flags(), addr, 0);
                    self.convert(v, Elem::F32, node.elem)
                }
                Op::Reduce { .. } => {
                    // Row-local reductions are memoised by their loop.
                    unreachable!("row reduction {n} read before its loop")
                }
                &Op::Unary(Un::Exp, a) if exp_in_range(k, a) => {
                    let x = self.value(a, at);
                    math::exp_in_range(&mut self.b, x, 1)
                }
                op => {
                    let ops = rlc_kernel::ir::operands(op);
                    let mut vals = HashMap::new();
                    for o in ops {
                        let v = self.value(o, at);
                        vals.insert(o, v);
                    }
                    self.compute(op, node.elem, &|id| vals[&id], &|id| k.node(id).elem)
                }
            }
        };
        self.memo[self.phys].insert(n, v);
        v
    }

    fn convert(&mut self, v: Value, from: Elem, to: Elem) -> Value {
        if from == to {
            return v;
        }
        match (from, to) {
            (Elem::F32, Elem::I32) => self.b.ins().fcvt_to_sint_sat(types::I32, v),
            (Elem::F32, Elem::Bool) => {
                let z = self.b.ins().f32const(0.0);
                self.b.ins().fcmp(FloatCC::NotEqual, v, z)
            }
            (Elem::I32, Elem::F32) => self.b.ins().fcvt_from_sint(types::F32, v),
            (Elem::I32, Elem::Bool) => self.b.ins().icmp_imm(IntCC::NotEqual, v, 0),
            (Elem::Bool, Elem::F32) => {
                let w = self.b.ins().uextend(types::I32, v);
                self.b.ins().fcvt_from_uint(types::F32, w)
            }
            (Elem::Bool, Elem::I32) => self.b.ins().uextend(types::I32, v),
            _ => v,
        }
    }

    /// An element-wise operation on computed operands.
    fn compute(
        &mut self,
        op: &Op,
        elem: Elem,
        get: &dyn Fn(NodeId) -> Value,
        elem_of: &dyn Fn(NodeId) -> Elem,
    ) -> Value {
        match op {
            Op::Const(x) => match elem {
                Elem::F32 => self.b.ins().f32const(*x as f32),
                Elem::I32 => self.b.ins().iconst(types::I32, *x as i64),
                Elem::Bool => self.b.ins().iconst(types::I8, i64::from(*x != 0.0)),
            },
            Op::Unary(u, a) => {
                let (x, from) = (get(*a), elem_of(*a));
                match u {
                    Un::Cast => self.convert(x, from, elem),
                    Un::StopGrad => x,
                    Un::Neg if elem == Elem::F32 => self.b.ins().fneg(x),
                    Un::Neg => self.b.ins().ineg(x),
                    Un::Not => self.b.ins().bxor_imm(x, 1),
                    Un::Abs if elem == Elem::F32 => self.b.ins().fabs(x),
                    Un::Abs => self.b.ins().iabs(x),
                    Un::Exp => math::exp(&mut self.b, x, 1),
                    Un::Log => {
                        let call = self.b.ins().call(self.calls.logf, &[x]);
                        self.b.inst_results(call)[0]
                    }
                    Un::Tanh => {
                        let call = self.b.ins().call(self.calls.tanhf, &[x]);
                        self.b.inst_results(call)[0]
                    }
                    Un::Sqrt => self.b.ins().sqrt(x),
                    Un::Rsqrt => {
                        let s = self.b.ins().sqrt(x);
                        let one = self.b.ins().f32const(1.0);
                        self.b.ins().fdiv(one, s)
                    }
                    Un::Sigmoid => {
                        let n = self.b.ins().fneg(x);
                        let e = math::exp(&mut self.b, n, 1);
                        let one = self.b.ins().f32const(1.0);
                        let d = self.b.ins().fadd(one, e);
                        self.b.ins().fdiv(one, d)
                    }
                }
            }
            Op::Binary(bin, a, b) => {
                let (x, y, operand) = (get(*a), get(*b), elem_of(*a));
                self.binary(*bin, x, y, operand)
            }
            Op::Select(c, a, b) => {
                let (c, x, y) = (get(*c), get(*a), get(*b));
                self.b.ins().select(c, x, y)
            }
            other => unreachable!("not element-wise: {other:?}"),
        }
    }

    fn binary(&mut self, bin: Bin, x: Value, y: Value, operand: Elem) -> Value {
        let i = &mut self.b;
        match operand {
            Elem::F32 => match bin {
                Bin::Add => i.ins().fadd(x, y),
                Bin::Sub => i.ins().fsub(x, y),
                Bin::Mul => i.ins().fmul(x, y),
                Bin::Div => i.ins().fdiv(x, y),
                Bin::Rem => {
                    // The sign of the divisor: x − y·⌊x/y⌋.
                    let q = i.ins().fdiv(x, y);
                    let f = i.ins().floor(q);
                    let p = i.ins().fmul(y, f);
                    i.ins().fsub(x, p)
                }
                Bin::Pow => {
                    let call = i.ins().call(self.calls.powf, &[x, y]);
                    i.inst_results(call)[0]
                }
                Bin::Min => i.ins().fmin(x, y),
                Bin::Max => i.ins().fmax(x, y),
                Bin::Eq => i.ins().fcmp(FloatCC::Equal, x, y),
                Bin::Ne => i.ins().fcmp(FloatCC::NotEqual, x, y),
                Bin::Lt => i.ins().fcmp(FloatCC::LessThan, x, y),
                Bin::Le => i.ins().fcmp(FloatCC::LessThanOrEqual, x, y),
                Bin::Gt => i.ins().fcmp(FloatCC::GreaterThan, x, y),
                Bin::Ge => i.ins().fcmp(FloatCC::GreaterThanOrEqual, x, y),
                Bin::And => i.ins().band(x, y),
                Bin::Or => i.ins().bor(x, y),
            },
            Elem::I32 => match bin {
                Bin::Add => i.ins().iadd(x, y),
                Bin::Sub => i.ins().isub(x, y),
                Bin::Mul => i.ins().imul(x, y),
                Bin::Rem => {
                    // No trap on a zero divisor (gives 0); the sign of the divisor.
                    let zero = i.ins().icmp_imm(IntCC::Equal, y, 0);
                    let one = i.ins().iconst(types::I32, 1);
                    let d = i.ins().select(zero, one, y);
                    let r = i.ins().srem(x, d);
                    let sign = i.ins().bxor(r, d);
                    let neg = i.ins().icmp_imm(IntCC::SignedLessThan, sign, 0);
                    let nz = i.ins().icmp_imm(IntCC::NotEqual, r, 0);
                    let fix = i.ins().band(neg, nz);
                    let adj = i.ins().iadd(r, d);
                    let r = i.ins().select(fix, adj, r);
                    let z = i.ins().iconst(types::I32, 0);
                    i.ins().select(zero, z, r)
                }
                Bin::Min => i.ins().smin(x, y),
                Bin::Max => i.ins().smax(x, y),
                Bin::Eq => i.ins().icmp(IntCC::Equal, x, y),
                Bin::Ne => i.ins().icmp(IntCC::NotEqual, x, y),
                Bin::Lt => i.ins().icmp(IntCC::SignedLessThan, x, y),
                Bin::Le => i.ins().icmp(IntCC::SignedLessThanOrEqual, x, y),
                Bin::Gt => i.ins().icmp(IntCC::SignedGreaterThan, x, y),
                Bin::Ge => i.ins().icmp(IntCC::SignedGreaterThanOrEqual, x, y),
                // Lowering turns integer division and powers into floats.
                Bin::Div | Bin::Pow | Bin::And | Bin::Or => i.ins().iconst(types::I32, 0),
            },
            Elem::Bool => match bin {
                Bin::And => i.ins().band(x, y),
                Bin::Or => i.ins().bor(x, y),
                Bin::Eq => i.ins().icmp(IntCC::Equal, x, y),
                Bin::Ne => i.ins().icmp(IntCC::NotEqual, x, y),
                _ => i.ins().iconst(types::I8, 0),
            },
        }
    }
}

/// Whether `x`'s values (but NaN) are known to lie where `exp` needs no clamp.
fn exp_in_range(k: &Kernel, x: NodeId) -> bool {
    let (lo, hi) = rlc_kernel::ir::value_range(k, x, 4);
    lo >= math::EXP_RANGE.0 && hi <= math::EXP_RANGE.1
}

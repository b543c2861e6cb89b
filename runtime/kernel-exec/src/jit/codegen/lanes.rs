//! Four rows at a time in the lanes. A scan is a chain along its row (each position needs the
//! one before), so one row's scan cannot spread positions over lanes, and run alone it waits on
//! the chain's latency at every position. Four rows' scans are independent: when a pass's first
//! loop is a scan whose operations all have four-lane forms, the rows go in blocks of four,
//! each block's scan running once with row `i + j` in lane `j` (its loads gather one element
//! of each row, its stores scatter them back). Each row's later loops and stores then run as
//! usual; a scan they read comes from its stored buffer or from the lane's scratch row.

use super::vector::lane_op_ok;
use super::{At, PassGen, little, readonly, unaligned};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    ConstantData, InstBuilder, MemFlags, StackSlotData, StackSlotKind, Value, types,
};
use cranelift_frontend::Variable;
use rlc_kernel::ir::{Elem, NodeId, Op, Red, Scan};
use rlc_kernel::schedule::{Loop, LoopKind, Pass};
use std::collections::{HashMap, HashSet};

/// Rows per block of a scan with the rows in lanes (the lanes of an `f32x4`).
pub const ROW_LANES: i64 = 4;

/// The byte offsets of a block's rows from its first: `[0, 1, 2, 3] · cols · bytes`, for
/// elements of four bytes and of one, and for padded `f32` buffers (`Buffer::padded`).
#[derive(Clone, Copy)]
pub(super) struct Gather {
    wide: [Value; 4],
    bytes: [Value; 4],
    padded: [Value; 4],
}

impl Gather {
    /// The offsets of the rows of an `f32` buffer.
    fn rows_of(&self, buffer: &rlc_kernel::schedule::Buffer) -> [Value; 4] {
        if buffer.padded() {
            self.padded
        } else {
            self.wide
        }
    }
}

/// A scan with the rows in lanes, as its steps need it.
struct Step<'a> {
    node: NodeId,
    scan: &'a Scan,
    carries: &'a [Variable],
    /// The loop's row reductions: (node, accumulator, lanes that selected something).
    accs: &'a [(NodeId, Variable, Variable)],
    /// Body values computed before the loop (see `scan_rows_in_lanes`).
    fixed: &'a [Option<Value>],
    /// The lanes of what does not move along the rows.
    invariant: &'a HashMap<NodeId, Value>,
}

impl PassGen<'_, '_> {
    /// The pass's first loop, when it is a scan that can run with rows in lanes: `f32`
    /// carries, value, stores and reduced values, and four-lane forms for every operation it,
    /// its stores and its reductions perform.
    pub(super) fn lane_scan<'p>(&self, pass: &'p Pass) -> Option<&'p Loop> {
        let k = self.k;
        let l = pass.loops.first()?;
        let LoopKind::Scan(n) = l.kind else {
            return None;
        };
        let Op::Scan(s) = &k.node(n).op else {
            return None;
        };
        let f32_stores = l
            .stores
            .iter()
            .all(|st| self.s.buffers[st.buffer].elem == Elem::F32);
        let carries = s.inits.iter().enumerate().all(|(c, &init)| {
            k.node(init).elem == Elem::F32
                && s.body
                    .iter()
                    .all(|bn| !matches!(bn.op, Op::Carry(i) if i == c) || bn.elem == Elem::F32)
        });
        let body = s.body.iter().all(|bn| match bn.op {
            Op::Carry(_) => bn.elem == Elem::F32,
            Op::Column(o) => bn.elem != Elem::I32 && self.lanes_ok(vec![o], Some(n)),
            Op::Outer(o) => k.node(o).elem != Elem::I32,
            ref op => lane_op_ok(op, bn.elem, &|id| s.body[id].elem),
        });
        let stores = self.lanes_ok(l.stores.iter().map(|st| st.node).collect(), Some(n));
        let reductions = l.reductions.iter().all(|&r| match k.node(r).op {
            Op::Reduce { x, .. } => {
                k.node(x).elem == Elem::F32
                    && self.lanes_ok(rlc_kernel::ir::operands(&k.node(r).op), Some(n))
            }
            _ => false,
        });
        let ok = reductions
            && k.node(n).elem == Elem::F32
            && s.body[s.emit].elem == Elem::F32
            && f32_stores
            && carries
            && body
            && stores;
        ok.then_some(l)
    }

    /// The scan loop `l` for rows `row0 .. row0 + 4`, row `row0 + j` in lane `j`.
    pub(super) fn scan_rows_in_lanes(&mut self, l: &Loop, row0: Value) {
        let k = self.k;
        let LoopKind::Scan(n) = l.kind else {
            unreachable!("a map loop in lanes of rows")
        };
        let Op::Scan(s) = &k.node(n).op else {
            unreachable!("a scan loop of a node that is not a scan")
        };
        // What the loop reads that does not move along the row: each row's value in its lane.
        let mut roots = self.loop_roots(l);
        for bn in &s.body {
            if let Op::Column(o) | Op::Outer(o) = bn.op {
                roots.push(o);
            }
        }
        roots.extend(&s.inits);
        let invariant = self.invariant_of(roots);
        let mut per_row: Vec<Vec<Value>> = vec![Vec::new(); invariant.len()];
        for j in 0..ROW_LANES {
            let row = self.b.ins().iadd_imm(row0, j);
            self.memo[1].clear();
            self.set_row(row);
            let at = At {
                row: Some(row),
                pos: None,
            };
            for (lanes, &m) in per_row.iter_mut().zip(&invariant) {
                lanes.push(self.value(m, at));
            }
        }
        self.memo[1].clear();
        self.set_row(row0);
        let mut vmemo: HashMap<NodeId, Value> = HashMap::new();
        for (values, &m) in per_row.iter().zip(&invariant) {
            let v = self.lanes_of(values, k.node(m).elem);
            vmemo.insert(m, v);
        }
        let zero = self.b.ins().f32const(0.0);
        self.vzero = Some(self.b.ins().splat(types::F32X4, zero));
        self.gather = Some(self.row_offsets());
        let carries: Vec<_> = s
            .inits
            .iter()
            .map(|init| {
                let var = self.b.declare_var(types::F32X4);
                self.b.def_var(var, vmemo[init]);
                var
            })
            .collect();
        // Body values that read neither a carry nor a column (γ·λ in GAE): before the loop.
        let mut fixed: Vec<Option<Value>> = Vec::with_capacity(s.body.len());
        for bn in &s.body {
            let v = match &bn.op {
                Op::Carry(_) | Op::Column(_) => None,
                Op::Outer(o) => Some(vmemo[o]),
                op if rlc_kernel::ir::operands(op)
                    .iter()
                    .all(|&o| fixed[o].is_some()) =>
                {
                    Some(
                        self.vcompute(op, bn.elem, &|id| fixed[id].expect("fixed"), &|id| {
                            s.body[id].elem
                        }),
                    )
                }
                _ => None,
            };
            fixed.push(v);
        }
        // The loop's row reductions: a row per lane.
        let accs: Vec<(NodeId, Variable, Variable)> = l
            .reductions
            .iter()
            .map(|&r| {
                let Op::Reduce { op, .. } = k.node(r).op else {
                    unreachable!("a loop's reduction is a Reduce")
                };
                let (acc, any) = self.vaccumulator(op);
                (r, acc, any)
            })
            .collect();
        let scan = Step {
            node: n,
            scan: s,
            carries: &carries,
            accs: &accs,
            fixed: &fixed,
            invariant: &vmemo,
        };
        // Positions four at a time where four fit (from the end for a reverse scan: its
        // single positions come first), one at a time for the rest.
        let t = self.b.declare_var(types::I64);
        let cols = self.cols;
        if s.reverse {
            self.b.def_var(t, cols);
            let (header, exit) = self.open_loop(t, |b, tv| {
                let odd = b.ins().band_imm(tv, ROW_LANES - 1);
                b.ins().icmp_imm(IntCC::NotEqual, odd, 0)
            });
            let tv = self.b.use_var(t);
            let pos = self.b.ins().iadd_imm(tv, -1);
            self.lane_position(l, &scan, row0, pos);
            self.b.def_var(t, pos);
            self.close_loop(header, exit);
            let (header, exit) =
                self.open_loop(t, |b, tv| b.ins().icmp_imm(IntCC::SignedGreaterThan, tv, 0));
            let tv = self.b.use_var(t);
            let first = self.b.ins().iadd_imm(tv, -ROW_LANES);
            self.lane_block(l, &scan, row0, first);
            self.b.def_var(t, first);
            self.close_loop(header, exit);
        } else {
            let zero = self.b.ins().iconst(types::I64, 0);
            self.b.def_var(t, zero);
            let (header, exit) = self.open_loop(t, |b, tv| {
                let end = b.ins().iadd_imm(tv, ROW_LANES);
                b.ins().icmp(IntCC::SignedLessThanOrEqual, end, cols)
            });
            let tv = self.b.use_var(t);
            self.lane_block(l, &scan, row0, tv);
            let next = self.b.ins().iadd_imm(tv, ROW_LANES);
            self.b.def_var(t, next);
            self.close_loop(header, exit);
            let (header, exit) =
                self.open_loop(t, |b, tv| b.ins().icmp(IntCC::SignedLessThan, tv, cols));
            let tv = self.b.use_var(t);
            self.lane_position(l, &scan, row0, tv);
            let next = self.b.ins().iadd_imm(tv, 1);
            self.b.def_var(t, next);
            self.close_loop(header, exit);
        }
        self.memo[2].clear();
        self.phys = 1;
        // Each row's reductions, for its later loops and stores (`row_body` loads lane j).
        self.lane_results.clear();
        for (r, acc, any) in accs {
            let mut v = self.b.use_var(acc);
            if !matches!(k.node(r).op, Op::Reduce { op: Red::Sum, .. }) {
                // A minimum or maximum of nothing is zero, not ±inf.
                let some = self.b.use_var(any);
                let some = self.as_float_mask(some);
                let zero = self.vzero.expect("zeros made before the loop");
                v = self.b.ins().bitselect(some, v, zero);
            }
            let slot = self.b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                16,
                4,
            ));
            self.b.ins().stack_store(v, slot, 0);
            self.lane_results.push((r, slot));
        }
        self.gather = None;
        self.vzero = None;
    }

    /// One step of the scan at `at` with the rows in lanes: its carries moved on, its value
    /// (also put in `lanes`) returned, and the loop's reductions accumulated.
    fn lane_step(&mut self, scan: &Step, at: At, lanes: &mut HashMap<NodeId, Value>) -> Value {
        let s = scan.scan;
        let mut body: Vec<Value> = Vec::with_capacity(s.body.len());
        for (bn, fixed) in s.body.iter().zip(scan.fixed) {
            let v = match (&bn.op, fixed) {
                (_, Some(v)) => *v,
                (Op::Carry(c), None) => self.b.use_var(scan.carries[*c]),
                (Op::Column(o), None) => self.vvalue(*o, at, lanes),
                (op, None) => self.vcompute(op, bn.elem, &|id| body[id], &|id| s.body[id].elem),
            };
            body.push(v);
        }
        for (c, &next) in s.next.iter().enumerate() {
            self.b.def_var(scan.carries[c], body[next]);
        }
        let emitted = body[s.emit];
        lanes.insert(scan.node, emitted);
        for &(r, acc, any) in scan.accs {
            self.vaccumulate(r, acc, any, at, lanes);
        }
        emitted
    }

    /// The address of `pos` in the scratch row of the block's row `j`.
    fn lane_scratch_addr(&mut self, scan: NodeId, j: usize, pos: Value) -> Value {
        let jv = self.b.ins().iconst(types::I64, j as i64);
        self.lane = Some(jv);
        let addr = self.scratch_addr(scan, pos);
        self.lane = None;
        addr
    }

    /// The scan at one position of the four rows: loads gathered, stores scattered a lane at
    /// a time.
    fn lane_position(&mut self, l: &Loop, scan: &Step, row0: Value, pos: Value) {
        let at = At {
            row: Some(row0),
            pos: Some(pos),
        };
        self.memo[2].clear();
        self.phys = 2;
        let mut lanes = scan.invariant.clone();
        let emitted = self.lane_step(scan, at, &mut lanes);
        if self.scratch_scans.contains(&scan.node) {
            // Each row's later loops read its scan from its lane's scratch row.
            for j in 0..ROW_LANES as usize {
                let addr = self.lane_scratch_addr(scan.node, j, pos);
                let x = self.b.ins().extractlane(emitted, j as u8);
                self.b.ins().store(MemFlags::trusted(), x, addr, 0);
            }
        }
        for st in &l.stores {
            let v = self.vvalue(st.node, at, &mut lanes);
            let off = self.scaled(pos, 4);
            let first = self.b.ins().iadd(self.row_base[&st.buffer], off);
            let rows = self
                .gather
                .expect("row offsets")
                .rows_of(&self.s.buffers[st.buffer]);
            for (j, row) in rows.into_iter().enumerate() {
                let addr = self.b.ins().iadd(first, row);
                let x = self.b.ins().extractlane(v, j as u8);
                self.b.ins().store(MemFlags::trusted(), x, addr, 0);
            }
        }
        self.memo[2].clear();
        self.phys = 1;
    }

    /// The scan at positions `first .. first + 4` of the four rows: each input read as four
    /// vectors (a row's four positions each) and transposed into four steps' lanes; the
    /// steps' values transposed back into rows and stored four positions at a time.
    fn lane_block(&mut self, l: &Loop, scan: &Step, row0: Value, first: Value) {
        self.memo[2].clear();
        self.phys = 2;
        let mut roots = self.loop_roots(l);
        for bn in &scan.scan.body {
            if let Op::Column(o) = bn.op {
                roots.push(o);
            }
        }
        let mut steps: Vec<HashMap<NodeId, Value>> = vec![scan.invariant.clone(); 4];
        for leaf in self.lane_leaves(roots, scan.node) {
            let columns = self.load_block(leaf, first);
            for (step, c) in steps.iter_mut().zip(columns) {
                step.insert(leaf, c);
            }
        }
        let order: [usize; 4] = if scan.scan.reverse {
            [3, 2, 1, 0]
        } else {
            [0, 1, 2, 3]
        };
        let mut emitted = [Value::from_u32(0); 4];
        let mut stored = vec![[Value::from_u32(0); 4]; l.stores.len()];
        for k in order {
            let pos = self.b.ins().iadd_imm(first, k as i64);
            let at = At {
                row: Some(row0),
                pos: Some(pos),
            };
            let lanes = &mut steps[k];
            emitted[k] = self.lane_step(scan, at, lanes);
            for (st, out) in l.stores.iter().zip(&mut stored) {
                out[k] = self.vvalue(st.node, at, lanes);
            }
        }
        if self.scratch_scans.contains(&scan.node) {
            let rows = self.transpose(emitted);
            for (j, row) in rows.into_iter().enumerate() {
                let addr = self.lane_scratch_addr(scan.node, j, first);
                self.b.ins().store(unaligned(), row, addr, 0);
            }
        }
        for (st, values) in l.stores.iter().zip(stored) {
            let rows = self.transpose(values);
            let off = self.scaled(first, 4);
            let base = self.b.ins().iadd(self.row_base[&st.buffer], off);
            let offsets = self
                .gather
                .expect("row offsets")
                .rows_of(&self.s.buffers[st.buffer]);
            for (row, offset) in rows.into_iter().zip(offsets) {
                let addr = self.b.ins().iadd(base, offset);
                self.b.ins().store(unaligned(), row, addr, 0);
            }
        }
        self.memo[2].clear();
        self.phys = 1;
    }

    /// The inputs and stored values of level 2 that `roots` read at a position (where
    /// [`PassGen::vvalue`] stops descending), but the loop's own scan (stored or not, its
    /// value comes from the step).
    fn lane_leaves(&self, mut roots: Vec<NodeId>, scan: NodeId) -> Vec<NodeId> {
        let k = self.k;
        let mut seen = HashSet::new();
        let mut leaves = Vec::new();
        while let Some(n) = roots.pop() {
            if n == scan || !seen.insert(n) || k.node(n).level < 2 {
                continue;
            }
            if self.s.loaded.contains_key(&n) || matches!(k.node(n).op, Op::Input(_)) {
                leaves.push(n);
                continue;
            }
            if !matches!(k.node(n).op, Op::Scan(_)) {
                roots.extend(rlc_kernel::ir::operands(&k.node(n).op));
            }
        }
        leaves.sort_unstable();
        leaves
    }

    /// A leaf's lanes at the four positions from `first`: `[step][row]`.
    fn load_block(&mut self, leaf: NodeId, first: Value) -> [Value; 4] {
        let buffer = match (self.s.loaded.get(&leaf), &self.k.node(leaf).op) {
            (Some(&b), _) => b,
            (None, Op::Input(i)) => *i,
            (None, op) => unreachable!("not a leaf: {op:?}"),
        };
        let offsets = self.gather.expect("row offsets");
        if self.s.buffers[buffer].elem == Elem::F32 {
            let off = self.scaled(first, 4);
            let base = self.b.ins().iadd(self.row_base[&buffer], off);
            let rows = offsets.rows_of(&self.s.buffers[buffer]).map(|o| {
                let addr = self.b.ins().iadd(base, o);
                self.b
                    .ins()
                    .load(types::F32X4, unaligned().with_readonly(), addr, 0)
            });
            return self.transpose(rows);
        }
        // Mask bytes: each row's four in a 32-bit lane; step k's lanes repeat byte k of each
        // row over all four of its bytes (nonzero exactly where the byte is), compared as
        // floats so that selects blend.
        let base = self.b.ins().iadd(self.row_base[&buffer], first);
        let words = offsets.bytes.map(|o| {
            let addr = self.b.ins().iadd(base, o);
            self.b
                .ins()
                .load(types::I32, unaligned().with_readonly(), addr, 0)
        });
        let words = self.vector_of(&words);
        let bytes = self.b.ins().bitcast(types::I8X16, little(), words);
        // Step k's lane j is byte k of row j's four.
        [0u8, 1, 2, 3].map(|k| self.mask_of_bytes(bytes, [k, 4 + k, 8 + k, 12 + k]))
    }

    /// `shuffle` of two vectors' bytes (`idx` < 16 from `a`, the rest from `b`).
    pub(super) fn shuffle(&mut self, a: Value, b: Value, idx: [u8; 16]) -> Value {
        let imm = self
            .b
            .func
            .dfg
            .immediates
            .push(ConstantData::from(&idx[..]));
        self.b.ins().shuffle(a, b, imm)
    }

    /// A 4×4 transpose of `f32` lanes: `out[i]` lane `j` is `v[j]` lane `i` (x86's
    /// `punpck{l,h}dq` and `punpck{l,h}qdq`).
    fn transpose(&mut self, v: [Value; 4]) -> [Value; 4] {
        const LO32: [u8; 16] = [0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23];
        const HI32: [u8; 16] = [8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31];
        const LO64: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23];
        const HI64: [u8; 16] = [8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31];
        let [a, b, c, d] = v.map(|x| self.b.ins().bitcast(types::I8X16, little(), x));
        let ab_lo = self.shuffle(a, b, LO32);
        let ab_hi = self.shuffle(a, b, HI32);
        let cd_lo = self.shuffle(c, d, LO32);
        let cd_hi = self.shuffle(c, d, HI32);
        [
            (ab_lo, cd_lo, LO64),
            (ab_lo, cd_lo, HI64),
            (ab_hi, cd_hi, LO64),
            (ab_hi, cd_hi, HI64),
        ]
        .map(|(x, y, idx)| {
            let r = self.shuffle(x, y, idx);
            self.b.ins().bitcast(types::F32X4, little(), r)
        })
    }

    /// `[0, 1, 2, 3] · stride · bytes` for four-byte and one-byte elements, and for padded rows.
    fn row_offsets(&mut self) -> Gather {
        let (cols, padded) = (self.cols, self.padded_cols);
        let mut offsets = |stride: Value, bytes: usize| {
            let row = self.scaled(stride, bytes);
            let zero = self.b.ins().iconst(types::I64, 0);
            let two = self.b.ins().ishl_imm(row, 1);
            let three = self.b.ins().imul_imm(row, 3);
            [zero, row, two, three]
        };
        Gather {
            wide: offsets(cols, 4),
            bytes: offsets(cols, 1),
            padded: offsets(padded, 4),
        }
    }

    /// Four values, one per row, as lanes (`bool`s as masks of all ones or zeros).
    fn lanes_of(&mut self, values: &[Value], elem: Elem) -> Value {
        let values: Vec<Value> = values
            .iter()
            .map(|&x| {
                if elem == Elem::F32 {
                    x
                } else {
                    let ones = self.b.ins().iconst(types::I32, -1);
                    let zero = self.b.ins().iconst(types::I32, 0);
                    self.b.ins().select(x, ones, zero)
                }
            })
            .collect();
        self.vector_of(&values)
    }

    /// A vector of four `f32`s or `i32`s. The first `f32` is broadcast (from memory, one
    /// instruction, where moving a scalar into a vector first clears it); the first `i32` is
    /// moved in from its register.
    fn vector_of(&mut self, values: &[Value]) -> Value {
        let mut v = None;
        for (j, &x) in values.iter().enumerate() {
            v = Some(match v {
                None if self.b.func.dfg.value_type(x) == types::F32 => {
                    self.b.ins().splat(types::F32X4, x)
                }
                None => self.b.ins().scalar_to_vector(types::I32X4, x),
                Some(v) => self.b.ins().insertlane(v, x, j as u8),
            });
        }
        v.expect("four rows")
    }

    /// The `f32` at `pos` of each of the block's rows of `buffer`, as lanes.
    pub(super) fn gather_f32(&mut self, buffer: usize, pos: Value) -> Value {
        let off = self.scaled(pos, 4);
        let first = self.b.ins().iadd(self.row_base[&buffer], off);
        let rows = self
            .gather
            .expect("row offsets")
            .rows_of(&self.s.buffers[buffer]);
        let values = rows.map(|row| {
            let addr = self.b.ins().iadd(first, row);
            self.b.ins().load(types::F32, readonly(), addr, 0)
        });
        self.vector_of(&values)
    }

    /// The mask bytes at `pos` of each of the block's rows of `buffer`, as lanes of all ones
    /// or zeros.
    pub(super) fn gather_mask(&mut self, buffer: usize, pos: Value) -> Value {
        let first = self.b.ins().iadd(self.row_base[&buffer], pos);
        let rows = self.gather.expect("row offsets").bytes;
        let values = rows.map(|row| {
            let addr = self.b.ins().iadd(first, row);
            self.b.ins().uload8(types::I32, readonly(), addr, 0)
        });
        let words = self.vector_of(&values);
        self.mask_of_words(words)
    }
}

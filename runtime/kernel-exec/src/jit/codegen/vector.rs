//! Four lanes at a time: a Map loop whose operations all have `f32x4` forms runs vector
//! loops over the row (sixteen positions an iteration, then four) before the scalar loop
//! finishes the remainder. Values that do not change along the row are splatted before the
//! loops. Masks are `i32x4` lanes of all ones or zeros; bytes of `bool` inputs become them
//! through a float comparison (which a select turns into a blend). Reductions keep four
//! partial accumulators, folded into the scalar ones after the loops.

use super::{At, PassGen, little, unaligned};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    InstBuilder, InstructionData, MemFlags, Opcode, Value, ValueDef, types,
};
use cranelift_frontend::Variable;
use rlc_kernel::ir::{Bin, Elem, NodeId, Op, Red, Un};
use rlc_kernel::schedule::{Loop, Store};
use std::collections::{HashMap, HashSet};

impl PassGen<'_, '_> {
    /// What the loop computes at each position: its stores' values and its reductions'
    /// operands and masks.
    pub(super) fn loop_roots(&self, l: &Loop) -> Vec<NodeId> {
        let mut roots: Vec<NodeId> = l.stores.iter().map(|st| st.node).collect();
        for &r in &l.reductions {
            roots.extend(rlc_kernel::ir::operands(&self.k.node(r).op));
        }
        roots
    }

    /// Whether every level-2 operation of the loop has a four-lane form.
    pub(super) fn vectorizable(&self, l: &Loop) -> bool {
        l.stores
            .iter()
            .all(|st| self.s.buffers[st.buffer].elem == Elem::F32)
            && self.lanes_ok(self.loop_roots(l), None)
    }

    /// Whether the values of `roots` and everything they read at a position have four-lane
    /// forms. `scan`: the scan whose loop has the rows in lanes (its value is the loop's
    /// own; no other unstored scan can be read there).
    pub(super) fn lanes_ok(&self, mut roots: Vec<NodeId>, scan: Option<NodeId>) -> bool {
        let k = self.k;
        let mut seen = HashSet::new();
        while let Some(n) = roots.pop() {
            if !seen.insert(n) {
                continue;
            }
            let node = k.node(n);
            if node.level < 2 {
                // Splat: integers have no lane form here.
                if node.elem == Elem::I32 {
                    return false;
                }
                continue;
            }
            if self.s.loaded.contains_key(&n) {
                if node.elem != Elem::F32 {
                    return false;
                }
                continue;
            }
            let ok = match &node.op {
                Op::Input(_) => node.elem != Elem::I32,
                Op::Scan(_) => node.elem == Elem::F32 && scan.is_none_or(|s| s == n),
                op => lane_op_ok(op, node.elem, &|id| k.node(id).elem),
            };
            if !ok {
                return false;
            }
            if !matches!(node.op, Op::Scan(_)) {
                roots.extend(rlc_kernel::ir::operands(&node.op));
            }
        }
        true
    }

    /// The vector loops: positions `t, t+4, …` sixteen at a time while sixteen remain, then
    /// four at a time; leaves `t` at the first position the scalar loop still has to do.
    pub(super) fn vector_loop(
        &mut self,
        l: &Loop,
        row: Value,
        t: Variable,
        accs: &[(NodeId, Variable, Variable)],
    ) {
        let mut vaccs = Vec::new();
        for &(r, _, _) in accs {
            let Op::Reduce { op, .. } = self.k.node(r).op else {
                continue;
            };
            // One accumulator per group of the sixteen-wide loop: four chains of additions
            // that do not wait for each other.
            let (accs, anys) = (0..4).map(|_| self.vaccumulator(op)).unzip();
            vaccs.push((r, accs, anys));
        }
        // Lanes of values that do not change along the row (level 0 or 1, constants), and the
        // zero the mask bytes are compared with: splatted once, before the loop.
        let before = At {
            row: Some(row),
            pos: Some(self.b.ins().iconst(types::I64, 0)),
        };
        let mut vmemo: HashMap<NodeId, Value> = HashMap::new();
        // Equal constants share one register: lowering and differentiation make a node per
        // literal (a loss's gradient has a dozen zeros), and each splat would otherwise be
        // live through the loop, spilled and reloaded.
        let mut constants: HashMap<(u64, Elem), Value> = HashMap::new();
        for n in self.row_invariant(l) {
            let node = self.k.node(n);
            match node.op {
                Op::Const(x) => {
                    let key = (x.to_bits(), node.elem);
                    let v = match constants.get(&key) {
                        Some(&v) => v,
                        None => self.vvalue(n, before, &mut vmemo),
                    };
                    constants.insert(key, v);
                    vmemo.insert(n, v);
                }
                _ => {
                    self.vvalue(n, before, &mut vmemo);
                }
            }
        }
        let zero = self.b.ins().f32const(0.0);
        self.vzero = Some(self.b.ins().splat(types::F32X4, zero));
        // Sixteen positions an iteration (four groups of four lanes: the loop's own work is
        // shared), then groups of four while they fit.
        let cols = self.cols;
        for (width, groups) in [(16i64, 4i64), (4, 1)] {
            let (header, exit) = self.open_loop(t, |b, tv| {
                let end = b.ins().iadd_imm(tv, width);
                b.ins().icmp(IntCC::SignedLessThanOrEqual, end, cols)
            });
            let pos = self.b.use_var(t);
            self.phys = 2;
            self.memo[2].clear();
            self.wide_masks.clear();
            for g in 0..groups {
                let p = if g == 0 {
                    pos
                } else {
                    self.b.ins().iadd_imm(pos, 4 * g)
                };
                let at = At {
                    row: Some(row),
                    pos: Some(p),
                };
                if groups > 1 {
                    self.wide = Some((pos, g as u8));
                }
                let mut lanes = vmemo.clone();
                self.vector_step(l, at, &vaccs, g as usize, &mut lanes);
            }
            self.wide = None;
            let next = self.b.ins().iadd_imm(pos, width);
            self.b.def_var(t, next);
            self.close_loop(header, exit);
            self.memo[2].clear();
            self.phys = 1;
        }
        self.vzero = None;
        // Fold the groups, then the lanes, into the scalar accumulators the remainder loop
        // continues.
        for (&(r, acc_s, any_s), (_, acc_v, any_v)) in accs.iter().zip(&vaccs) {
            let Op::Reduce { op, .. } = self.k.node(r).op else {
                continue;
            };
            let mut v = self.b.use_var(acc_v[0]);
            let mut av = self.b.use_var(any_v[0]);
            for g in 1..4 {
                let x = self.b.use_var(acc_v[g]);
                v = match op {
                    Red::Sum => self.b.ins().fadd(v, x),
                    Red::Max | Red::Min => self.vextremum(op, x, v),
                };
                let a = self.b.use_var(any_v[g]);
                av = self.b.ins().bor(av, a);
            }
            let mut s = self.b.use_var(acc_s);
            for lane in 0..4 {
                let x = self.b.ins().extractlane(v, lane);
                s = match op {
                    Red::Sum => self.b.ins().fadd(s, x),
                    Red::Max => self.b.ins().fmax(s, x),
                    Red::Min => self.b.ins().fmin(s, x),
                };
            }
            self.b.def_var(acc_s, s);
            if op != Red::Sum {
                let some = self.b.ins().vany_true(av);
                let an = self.b.use_var(any_s);
                let an = self.b.ins().bor(an, some);
                self.b.def_var(any_s, an);
            }
        }
    }

    /// One group of four positions: the reductions' and the stores' lanes at `at`, into the
    /// accumulators of `group`.
    fn vector_step(
        &mut self,
        l: &Loop,
        at: At,
        vaccs: &[(NodeId, Vec<Variable>, Vec<Variable>)],
        group: usize,
        vmemo: &mut HashMap<NodeId, Value>,
    ) {
        for (r, accs, anys) in vaccs {
            self.vaccumulate(*r, accs[group], anys[group], at, vmemo);
        }
        for st in &l.stores {
            self.vstore(*st, at, vmemo);
        }
    }

    /// A reduction's four-lane accumulator (at the identity of `op`) and its lanes that
    /// selected something (none yet).
    pub(super) fn vaccumulator(&mut self, op: Red) -> (Variable, Variable) {
        let acc = self.b.declare_var(types::F32X4);
        let init = self.b.ins().f32const(rlc_kernel::schedule::identity(op));
        let init = self.b.ins().splat(types::F32X4, init);
        self.b.def_var(acc, init);
        let any = self.b.declare_var(types::I32X4);
        let zero = self.b.ins().iconst(types::I32, 0);
        let zero = self.b.ins().splat(types::I32X4, zero);
        self.b.def_var(any, zero);
        (acc, any)
    }

    /// Reduction `r`'s four lanes at `at` into `acc`, and into `any` which lanes selected
    /// something (minimum and maximum only: a sum's identity is its empty value).
    pub(super) fn vaccumulate(
        &mut self,
        r: NodeId,
        acc: Variable,
        any: Variable,
        at: At,
        vmemo: &mut HashMap<NodeId, Value>,
    ) {
        let Op::Reduce { op, x, mask } = self.k.node(r).op else {
            return;
        };
        let xv = self.vvalue(x, at, vmemo);
        let a = self.b.use_var(acc);
        let mv = mask.map(|m| self.vvalue(m, at, vmemo));
        let new = match (op, mv) {
            // A masked sum adds zero where the mask is off: the chain from one position
            // to the next is the addition alone.
            (Red::Sum, Some(m)) => {
                let mf = self.as_float_mask(m);
                let term = self.b.ins().band(mf, xv);
                self.b.ins().fadd(a, term)
            }
            (Red::Sum, None) => self.b.ins().fadd(a, xv),
            (_, Some(m)) => {
                let combined = self.vextremum(op, xv, a);
                let mf = self.as_float_mask(m);
                self.b.ins().bitselect(mf, combined, a)
            }
            (_, None) => self.vextremum(op, xv, a),
        };
        self.b.def_var(acc, new);
        // Whether anything was selected matters only where the identity is not zero.
        if op != Red::Sum {
            let sel = match mv {
                Some(m) => m,
                None => {
                    let ones = self.b.ins().iconst(types::I32, -1);
                    self.b.ins().splat(types::I32X4, ones)
                }
            };
            let an = self.b.use_var(any);
            let an = self.b.ins().bor(an, sel);
            self.b.def_var(any, an);
        }
    }

    /// The nodes below level 2 that the loop's level-2 operations read (their lanes are the
    /// same at every position).
    fn row_invariant(&self, l: &Loop) -> Vec<NodeId> {
        self.invariant_of(self.loop_roots(l))
    }

    /// The nodes below level 2 that `roots` read through element-wise operations at a
    /// position (as [`PassGen::vvalue`] descends).
    pub(super) fn invariant_of(&self, mut roots: Vec<NodeId>) -> Vec<NodeId> {
        let k = self.k;
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        while let Some(n) = roots.pop() {
            if !seen.insert(n) {
                continue;
            }
            if k.node(n).level < 2 {
                out.push(n);
                continue;
            }
            if self.s.loaded.contains_key(&n) {
                continue;
            }
            // As `vvalue` descends: through element-wise operations only.
            match k.node(n).op {
                Op::Unary(_, a) => roots.push(a),
                Op::Binary(_, a, b) => roots.extend([a, b]),
                Op::Select(c, a, b) => roots.extend([c, a, b]),
                _ => {}
            }
        }
        out.sort_unstable();
        out
    }

    fn vstore(&mut self, st: Store, at: At, vmemo: &mut HashMap<NodeId, Value>) {
        let v = self.vvalue(st.node, at, vmemo);
        let pos = at.pos.expect("position");
        let off = self.scaled(pos, 4);
        let addr = self.b.ins().iadd(self.row_base[&st.buffer], off);
        self.b.ins().store(unaligned(), v, addr, 0);
    }

    /// The lanes' minimum or maximum of `x` and `y`, NaN when either is NaN: x86's
    /// `minps`/`maxps` (which give `y` when either is NaN) and a blend that puts back a NaN
    /// of `x`: three instructions where `fmin`/`fmax` with IEEE semantics take eight.
    fn vextremum(&mut self, op: Red, x: Value, y: Value) -> Value {
        // The operand order Cranelift matches to `minps x, y` / `maxps x, y`.
        let pick_x = match op {
            Red::Max => self.b.ins().fcmp(FloatCC::LessThan, y, x),
            _ => self.b.ins().fcmp(FloatCC::LessThan, x, y),
        };
        let pick_x = self.as_float_mask(pick_x);
        let r = self.b.ins().bitselect(pick_x, x, y);
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let nan = self.as_float_mask(nan);
        self.b.ins().bitselect(nan, x, r)
    }

    /// `select` of float lanes by the lanes of a comparison `m`: a blend, or where one side is
    /// +0.0 an `and` (`andn`) with the mask, which every x86 runs on more ports. Not where the
    /// comparison is of the two sides (`x < y ? x : y`): Cranelift makes those one `minps`
    /// or `maxps`.
    fn vselect(&mut self, m: Value, yes: Value, no: Value) -> Value {
        let mf = self.as_float_mask(m);
        let compares_sides = match self.b.func.dfg.value_def(m) {
            ValueDef::Result(inst, _) => match self.b.func.dfg.insts[inst] {
                InstructionData::FloatCompare { args, .. } => {
                    args == [yes, no] || args == [no, yes]
                }
                _ => false,
            },
            _ => false,
        };
        if !compares_sides && self.is_positive_zero(no) {
            return self.b.ins().band(mf, yes);
        }
        if !compares_sides && self.is_positive_zero(yes) {
            let off = self.b.ins().bnot(mf);
            return self.b.ins().band(no, off);
        }
        self.b.ins().bitselect(mf, yes, no)
    }

    /// Whether `v` is four lanes of +0.0 (a splat of the constant).
    fn is_positive_zero(&self, v: Value) -> bool {
        let dfg = &self.b.func.dfg;
        let ValueDef::Result(inst, _) = dfg.value_def(v) else {
            return false;
        };
        let InstructionData::Unary {
            opcode: Opcode::Splat,
            arg,
        } = dfg.insts[inst]
        else {
            return false;
        };
        let ValueDef::Result(def, _) = dfg.value_def(arg) else {
            return false;
        };
        matches!(
            dfg.insts[def],
            InstructionData::UnaryIeee32 { opcode: Opcode::F32const, imm } if imm.bits() == 0
        )
    }

    /// In the sixteen-wide loop: the lanes of mask input `i` for the current group, from its
    /// sixteen bytes loaded once an iteration (group g's lane j is byte 4g + j): two
    /// instructions a group where widening four bytes takes six.
    fn mask_of_wide(&mut self, i: usize) -> Value {
        let (first, group) = self.wide.expect("in the sixteen-wide loop");
        let bytes = match self.wide_masks.get(&i) {
            Some(&v) => v,
            None => {
                let addr = self.b.ins().iadd(self.row_base[&i], first);
                let v = self
                    .b
                    .ins()
                    .load(types::I8X16, unaligned().with_readonly(), addr, 0);
                self.wide_masks.insert(i, v);
                v
            }
        };
        self.mask_of_bytes(bytes, [0, 1, 2, 3].map(|j| 4 * group + j))
    }

    /// Lanes of all ones where 32-bit lane `j` of `words` (a mask byte, widened) is nonzero:
    /// shifted to b · 2^23 a nonzero byte is a nonzero normal float (or inf), and a float
    /// comparison is a mask x86 blends with where a select uses it.
    pub(super) fn mask_of_words(&mut self, words: Value) -> Value {
        let shifted = self.b.ins().ishl_imm(words, 23);
        let floats = self.b.ins().bitcast(types::F32X4, MemFlags::new(), shifted);
        self.nonzero_lanes(floats)
    }

    /// Lanes of all ones where byte `which[j]` of the sixteen `bytes` is nonzero: one `pshufb`
    /// repeats it over lane j's four bytes, nonzero exactly where the byte is (as a float:
    /// normal, inf or NaN), and a float comparison makes the mask.
    pub(super) fn mask_of_bytes(&mut self, bytes: Value, which: [u8; 4]) -> Value {
        let mut idx = [0u8; 16];
        for (k, b) in idx.iter_mut().enumerate() {
            *b = which[k / 4];
        }
        let spread = self.shuffle(bytes, bytes, idx);
        let floats = self.b.ins().bitcast(types::F32X4, little(), spread);
        self.nonzero_lanes(floats)
    }

    fn nonzero_lanes(&mut self, floats: Value) -> Value {
        let zero = match self.vzero {
            Some(z) => z,
            None => self.splat_f32(0.0),
        };
        self.b.ins().fcmp(FloatCC::NotEqual, floats, zero)
    }

    fn splat_f32(&mut self, x: f32) -> Value {
        let s = self.b.ins().f32const(x);
        self.b.ins().splat(types::F32X4, s)
    }

    pub(super) fn as_float_mask(&mut self, m: Value) -> Value {
        self.b.ins().bitcast(types::F32X4, MemFlags::new(), m)
    }

    /// The four lanes of node `n` at positions `pos..pos+4` of the row.
    pub(super) fn vvalue(
        &mut self,
        n: NodeId,
        at: At,
        vmemo: &mut HashMap<NodeId, Value>,
    ) -> Value {
        if let Some(&v) = vmemo.get(&n) {
            return v;
        }
        let k = self.k;
        let node = k.node(n);
        let pos = at.pos.expect("position");
        let v = if node.level < 2 {
            assert!(
                self.gather.is_none(),
                "rows in lanes: {n} is not among the loop's invariant lanes"
            );
            let row_at = At {
                row: at.row,
                pos: None,
            };
            let s = self.value(n, row_at);
            match node.elem {
                Elem::F32 => self.b.ins().splat(types::F32X4, s),
                _ => {
                    let ones = self.b.ins().iconst(types::I32, -1);
                    let zero = self.b.ins().iconst(types::I32, 0);
                    let m = self.b.ins().select(s, ones, zero);
                    self.b.ins().splat(types::I32X4, m)
                }
            }
        } else if let Some(&buffer) = self.s.loaded.get(&n)
            && self.gather.is_some()
        {
            self.gather_f32(buffer, pos)
        } else if let Some(&buffer) = self.s.loaded.get(&n) {
            let off = self.scaled(pos, 4);
            let addr = self.b.ins().iadd(self.row_base[&buffer], off);
            self.b
                .ins()
                .load(types::F32X4, unaligned().with_readonly(), addr, 0)
        } else {
            match &node.op {
                Op::Input(i) if self.gather.is_some() => match node.elem {
                    Elem::F32 => self.gather_f32(*i, pos),
                    _ => self.gather_mask(*i, pos),
                },
                Op::Input(i) if node.elem == Elem::F32 => {
                    let off = self.scaled(pos, 4);
                    let addr = self.b.ins().iadd(self.row_base[i], off);
                    self.b
                        .ins()
                        .load(types::F32X4, unaligned().with_readonly(), addr, 0)
                }
                Op::Input(i) if self.wide.is_some() => self.mask_of_wide(*i),
                Op::Input(i) => {
                    // Four mask bytes → four lanes of all ones or zeros.
                    let addr = self.b.ins().iadd(self.row_base[i], pos);
                    let word = self
                        .b
                        .ins()
                        .load(types::I32, unaligned().with_readonly(), addr, 0);
                    let v = self.b.ins().scalar_to_vector(types::I32X4, word);
                    let bytes = self.b.ins().bitcast(types::I8X16, little(), v);
                    let halves = self.b.ins().uwiden_low(bytes);
                    let words = self.b.ins().uwiden_low(halves);
                    self.mask_of_words(words)
                }
                Op::Scan(_) => {
                    let addr = self.scratch_addr(n, pos);
                    self.b.ins().load(types::F32X4, unaligned(), addr, 0)
                }
                &Op::Unary(Un::Exp, a) if super::exp_in_range(k, a) => {
                    let x = self.vvalue(a, at, vmemo);
                    super::math::exp_in_range(&mut self.b, x, 4)
                }
                op => {
                    let mut vals = HashMap::new();
                    for o in rlc_kernel::ir::operands(op) {
                        let v = self.vvalue(o, at, vmemo);
                        vals.insert(o, v);
                    }
                    self.vcompute(op, node.elem, &|id| vals[&id], &|id| k.node(id).elem)
                }
            }
        };
        vmemo.insert(n, v);
        v
    }

    /// An element-wise operation on four lanes of computed operands (masks are `i32x4`
    /// lanes of all ones or zeros).
    pub(super) fn vcompute(
        &mut self,
        op: &Op,
        elem: Elem,
        get: &dyn Fn(NodeId) -> Value,
        elem_of: &dyn Fn(NodeId) -> Elem,
    ) -> Value {
        match op {
            Op::Const(x) if elem == Elem::F32 => self.splat_f32(*x as f32),
            Op::Const(x) => {
                let m = self
                    .b
                    .ins()
                    .iconst(types::I32, if *x != 0.0 { -1 } else { 0 });
                self.b.ins().splat(types::I32X4, m)
            }
            Op::Unary(u, a) => {
                let (x, from) = (get(*a), elem_of(*a));
                match u {
                    Un::Neg => self.b.ins().fneg(x),
                    Un::Not => self.b.ins().bnot(x),
                    Un::Abs => self.b.ins().fabs(x),
                    Un::Sqrt => self.b.ins().sqrt(x),
                    Un::Rsqrt => {
                        let s = self.b.ins().sqrt(x);
                        let one = self.splat_f32(1.0);
                        self.b.ins().fdiv(one, s)
                    }
                    Un::Exp => super::math::exp(&mut self.b, x, 4),
                    Un::Sigmoid => {
                        let nx = self.b.ins().fneg(x);
                        let e = super::math::exp(&mut self.b, nx, 4);
                        let one = self.splat_f32(1.0);
                        let d = self.b.ins().fadd(one, e);
                        self.b.ins().fdiv(one, d)
                    }
                    Un::StopGrad => x,
                    Un::Cast if from == Elem::Bool => {
                        let m = self.as_float_mask(x);
                        let (one, zero) = (self.splat_f32(1.0), self.splat_f32(0.0));
                        self.b.ins().bitselect(m, one, zero)
                    }
                    Un::Cast => {
                        let zero = self.splat_f32(0.0);
                        self.b.ins().fcmp(FloatCC::NotEqual, x, zero)
                    }
                    Un::Log | Un::Tanh => unreachable!("not vectorised"),
                }
            }
            Op::Binary(b, a, c) => {
                let (x, y, operand) = (get(*a), get(*c), elem_of(*a));
                let i = &mut self.b;
                match (operand, b) {
                    (Elem::F32, Bin::Min) => self.vextremum(Red::Min, x, y),
                    (Elem::F32, Bin::Max) => self.vextremum(Red::Max, x, y),
                    (Elem::F32, Bin::Add) => i.ins().fadd(x, y),
                    (Elem::F32, Bin::Sub) => i.ins().fsub(x, y),
                    (Elem::F32, Bin::Mul) => i.ins().fmul(x, y),
                    (Elem::F32, Bin::Div) => i.ins().fdiv(x, y),
                    (Elem::F32, Bin::Eq) => i.ins().fcmp(FloatCC::Equal, x, y),
                    (Elem::F32, Bin::Ne) => i.ins().fcmp(FloatCC::NotEqual, x, y),
                    (Elem::F32, Bin::Lt) => i.ins().fcmp(FloatCC::LessThan, x, y),
                    (Elem::F32, Bin::Le) => i.ins().fcmp(FloatCC::LessThanOrEqual, x, y),
                    // `x > y` as `y < x`: a select on it is then the form Cranelift matches
                    // to `minps`/`maxps` (a clamp's upper bound).
                    (Elem::F32, Bin::Gt) => i.ins().fcmp(FloatCC::LessThan, y, x),
                    (Elem::F32, Bin::Ge) => i.ins().fcmp(FloatCC::LessThanOrEqual, y, x),
                    (_, Bin::And) => i.ins().band(x, y),
                    (_, Bin::Or) => i.ins().bor(x, y),
                    (_, Bin::Eq) => i.ins().icmp(IntCC::Equal, x, y),
                    (_, Bin::Ne) => i.ins().icmp(IntCC::NotEqual, x, y),
                    _ => unreachable!("not vectorised"),
                }
            }
            Op::Select(c, a, b) => {
                let (cv, x, y) = (get(*c), get(*a), get(*b));
                if elem == Elem::F32 {
                    self.vselect(cv, x, y)
                } else {
                    self.b.ins().bitselect(cv, x, y)
                }
            }
            other => unreachable!("not vectorised: {other:?}"),
        }
    }
}

/// Whether an element-wise operation has a four-lane form ([`PassGen::vcompute`]).
pub(super) fn lane_op_ok(op: &Op, elem: Elem, elem_of: &dyn Fn(NodeId) -> Elem) -> bool {
    match op {
        Op::Const(_) => elem != Elem::I32,
        Op::Unary(u, a) => {
            let from = elem_of(*a);
            match u {
                Un::Cast => matches!(
                    (from, elem),
                    (Elem::Bool, Elem::F32) | (Elem::F32, Elem::Bool)
                ),
                Un::Log | Un::Tanh => false,
                Un::Not => true,
                _ => elem == Elem::F32,
            }
        }
        Op::Binary(b, a, _) => match elem_of(*a) {
            Elem::F32 => !matches!(b, Bin::Rem | Bin::Pow | Bin::And | Bin::Or),
            Elem::Bool => matches!(b, Bin::And | Bin::Or | Bin::Eq | Bin::Ne),
            Elem::I32 => false,
        },
        Op::Select(..) => elem != Elem::I32,
        _ => false,
    }
}

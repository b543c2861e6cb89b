//! Four lanes at a time: a Map loop whose operations all have `f32x4` forms runs vector
//! loops over the row (sixteen positions an iteration, then four) before the scalar loop
//! finishes the remainder. Values that do not change along the row are splatted before the
//! loops. Masks are `i32x4` lanes of all ones or zeros; bytes of `bool` inputs become them
//! through a float comparison (which a select turns into a blend). Reductions keep four
//! partial accumulators, folded into the scalar ones after the loops.

use super::{At, PassGen};
use crate::ir::{Bin, Elem, NodeId, Op, Red, Un};
use crate::schedule::{Loop, Store};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{Endianness, InstBuilder, MemFlags, Value, types};
use cranelift_frontend::Variable;
use std::collections::{HashMap, HashSet};

/// Loads of four elements need not be aligned.
fn unaligned() -> MemFlags {
    MemFlags::new().with_notrap()
}

impl PassGen<'_, '_> {
    /// What the loop computes at each position: its stores' values and its reductions'
    /// operands and masks.
    fn loop_roots(&self, l: &Loop) -> Vec<NodeId> {
        let mut roots: Vec<NodeId> = l.stores.iter().map(|st| st.node).collect();
        for &r in &l.reductions {
            if let Op::Reduce { x, mask, .. } = self.k.node(r).op {
                roots.push(x);
                roots.extend(mask);
            }
        }
        roots
    }

    /// Whether every level-2 operation of the loop has a four-lane form.
    pub(super) fn vectorizable(&self, l: &Loop) -> bool {
        let k = self.k;
        if l.stores
            .iter()
            .any(|st| self.s.buffers[st.buffer].elem != Elem::F32)
        {
            return false;
        }
        let mut roots = self.loop_roots(l);
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
                Op::Scan(_) => node.elem == Elem::F32,
                Op::Const(_) => node.elem != Elem::I32,
                Op::Unary(u, a) => {
                    let from = k.node(*a).elem;
                    match u {
                        Un::Cast => matches!(
                            (from, node.elem),
                            (Elem::Bool, Elem::F32) | (Elem::F32, Elem::Bool)
                        ),
                        Un::Log | Un::Tanh => false,
                        Un::Not => true,
                        _ => node.elem == Elem::F32,
                    }
                }
                Op::Binary(b, a, _) => match k.node(*a).elem {
                    Elem::F32 => !matches!(b, Bin::Rem | Bin::Pow | Bin::And | Bin::Or),
                    Elem::Bool => matches!(b, Bin::And | Bin::Or | Bin::Eq | Bin::Ne),
                    Elem::I32 => false,
                },
                Op::Select(..) => node.elem != Elem::I32,
                _ => false,
            };
            if !ok {
                return false;
            }
            roots.extend(crate::ir::operands(&node.op));
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
            let acc = self.b.declare_var(types::F32X4);
            let init = self.b.ins().f32const(crate::schedule::identity(op));
            let init = self.b.ins().splat(types::F32X4, init);
            self.b.def_var(acc, init);
            let any = self.b.declare_var(types::I32X4);
            let zero = self.b.ins().iconst(types::I32, 0);
            let zero = self.b.ins().splat(types::I32X4, zero);
            self.b.def_var(any, zero);
            vaccs.push((r, acc, any));
        }
        // Lanes of values that do not change along the row (level 0 or 1, constants), and the
        // zero the mask bytes are compared with: splatted once, before the loop.
        let before = At {
            row: Some(row),
            pos: Some(self.b.ins().iconst(types::I64, 0)),
        };
        let mut vmemo: HashMap<NodeId, Value> = HashMap::new();
        for n in self.row_invariant(l) {
            self.vvalue(n, before, &mut vmemo);
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
                let mut lanes = vmemo.clone();
                self.vector_step(l, at, &vaccs, &mut lanes);
            }
            let next = self.b.ins().iadd_imm(pos, width);
            self.b.def_var(t, next);
            self.close_loop(header, exit);
            self.memo[2].clear();
            self.phys = 1;
        }
        self.vzero = None;
        // Fold the lanes into the scalar accumulators the remainder loop continues.
        for (&(r, acc_s, any_s), &(_, acc_v, any_v)) in accs.iter().zip(&vaccs) {
            let Op::Reduce { op, .. } = self.k.node(r).op else {
                continue;
            };
            let v = self.b.use_var(acc_v);
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
            let av = self.b.use_var(any_v);
            let some = self.b.ins().vany_true(av);
            let an = self.b.use_var(any_s);
            let an = self.b.ins().bor(an, some);
            self.b.def_var(any_s, an);
        }
    }

    /// One group of four positions: the reductions' and the stores' lanes at `at`.
    fn vector_step(
        &mut self,
        l: &Loop,
        at: At,
        vaccs: &[(NodeId, Variable, Variable)],
        vmemo: &mut HashMap<NodeId, Value>,
    ) {
        for &(r, acc, any) in vaccs {
            let Op::Reduce { op, x, mask } = self.k.node(r).op else {
                continue;
            };
            let xv = self.vvalue(x, at, vmemo);
            let a = self.b.use_var(acc);
            let combined = match op {
                Red::Sum => self.b.ins().fadd(a, xv),
                Red::Max => self.b.ins().fmax(a, xv),
                Red::Min => self.b.ins().fmin(a, xv),
            };
            let (new, sel) = match mask {
                Some(m) => {
                    let mv = self.vvalue(m, at, vmemo);
                    let mf = self.b.ins().bitcast(types::F32X4, MemFlags::new(), mv);
                    (self.b.ins().bitselect(mf, combined, a), mv)
                }
                None => {
                    let ones = self.b.ins().iconst(types::I32, -1);
                    (combined, self.b.ins().splat(types::I32X4, ones))
                }
            };
            self.b.def_var(acc, new);
            let an = self.b.use_var(any);
            let an = self.b.ins().bor(an, sel);
            self.b.def_var(any, an);
        }
        for st in &l.stores {
            self.vstore(*st, at, vmemo);
        }
    }

    /// The nodes below level 2 that the loop's level-2 operations read (their lanes are the
    /// same at every position).
    fn row_invariant(&self, l: &Loop) -> Vec<NodeId> {
        let k = self.k;
        let mut roots = self.loop_roots(l);
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

    fn splat_f32(&mut self, x: f32) -> Value {
        let s = self.b.ins().f32const(x);
        self.b.ins().splat(types::F32X4, s)
    }

    fn as_float_mask(&mut self, m: Value) -> Value {
        self.b.ins().bitcast(types::F32X4, MemFlags::new(), m)
    }

    /// The four lanes of node `n` at positions `pos..pos+4` of the row.
    fn vvalue(&mut self, n: NodeId, at: At, vmemo: &mut HashMap<NodeId, Value>) -> Value {
        if let Some(&v) = vmemo.get(&n) {
            return v;
        }
        let k = self.k;
        let node = k.node(n);
        let pos = at.pos.expect("position");
        let v = if node.level < 2 {
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
        } else if let Some(&buffer) = self.s.loaded.get(&n) {
            let off = self.scaled(pos, 4);
            let addr = self.b.ins().iadd(self.row_base[&buffer], off);
            self.b
                .ins()
                .load(types::F32X4, unaligned().with_readonly(), addr, 0)
        } else {
            match &node.op {
                Op::Input(i) if node.elem == Elem::F32 => {
                    let off = self.scaled(pos, 4);
                    let addr = self.b.ins().iadd(self.row_base[i], off);
                    self.b
                        .ins()
                        .load(types::F32X4, unaligned().with_readonly(), addr, 0)
                }
                Op::Input(i) => {
                    // Four mask bytes → four lanes of all ones or zeros.
                    let addr = self.b.ins().iadd(self.row_base[i], pos);
                    let word = self
                        .b
                        .ins()
                        .load(types::I32, unaligned().with_readonly(), addr, 0);
                    let v = self.b.ins().scalar_to_vector(types::I32X4, word);
                    let little = MemFlags::new().with_endianness(Endianness::Little);
                    let bytes = self.b.ins().bitcast(types::I8X16, little, v);
                    let halves = self.b.ins().uwiden_low(bytes);
                    let words = self.b.ins().uwiden_low(halves);
                    // A byte b ≠ 0 shifted to b · 2^23 is a nonzero normal float (or inf):
                    // a float comparison, which x86 turns into a blend where a select uses it.
                    let shifted = self.b.ins().ishl_imm(words, 23);
                    let floats = self.b.ins().bitcast(types::F32X4, MemFlags::new(), shifted);
                    let zero = match self.vzero {
                        Some(z) => z,
                        None => self.splat_f32(0.0),
                    };
                    self.b.ins().fcmp(FloatCC::NotEqual, floats, zero)
                }
                Op::Scan(_) => {
                    let slot = self.s.scans.iter().position(|&x| x == n).unwrap_or(0);
                    let base = self.b.ins().imul_imm(self.cols, slot as i64);
                    let idx = self.b.ins().iadd(base, pos);
                    let off = self.scaled(idx, 4);
                    let addr = self.b.ins().iadd(self.scratch, off);
                    self.b.ins().load(types::F32X4, unaligned(), addr, 0)
                }
                Op::Const(x) if node.elem == Elem::F32 => self.splat_f32(*x as f32),
                Op::Const(x) => {
                    let m = self
                        .b
                        .ins()
                        .iconst(types::I32, if *x != 0.0 { -1 } else { 0 });
                    self.b.ins().splat(types::I32X4, m)
                }
                Op::Unary(u, a) => {
                    let from = k.node(*a).elem;
                    let x = self.vvalue(*a, at, vmemo);
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
                    let operand = k.node(*a).elem;
                    let x = self.vvalue(*a, at, vmemo);
                    let y = self.vvalue(*c, at, vmemo);
                    let i = &mut self.b;
                    match (operand, b) {
                        (Elem::F32, Bin::Add) => i.ins().fadd(x, y),
                        (Elem::F32, Bin::Sub) => i.ins().fsub(x, y),
                        (Elem::F32, Bin::Mul) => i.ins().fmul(x, y),
                        (Elem::F32, Bin::Div) => i.ins().fdiv(x, y),
                        (Elem::F32, Bin::Min) => i.ins().fmin(x, y),
                        (Elem::F32, Bin::Max) => i.ins().fmax(x, y),
                        (Elem::F32, Bin::Eq) => i.ins().fcmp(FloatCC::Equal, x, y),
                        (Elem::F32, Bin::Ne) => i.ins().fcmp(FloatCC::NotEqual, x, y),
                        (Elem::F32, Bin::Lt) => i.ins().fcmp(FloatCC::LessThan, x, y),
                        (Elem::F32, Bin::Le) => i.ins().fcmp(FloatCC::LessThanOrEqual, x, y),
                        (Elem::F32, Bin::Gt) => i.ins().fcmp(FloatCC::GreaterThan, x, y),
                        (Elem::F32, Bin::Ge) => i.ins().fcmp(FloatCC::GreaterThanOrEqual, x, y),
                        (_, Bin::And) => i.ins().band(x, y),
                        (_, Bin::Or) => i.ins().bor(x, y),
                        (_, Bin::Eq) => i.ins().icmp(IntCC::Equal, x, y),
                        (_, Bin::Ne) => i.ins().icmp(IntCC::NotEqual, x, y),
                        _ => unreachable!("not vectorised"),
                    }
                }
                Op::Select(c, a, b) => {
                    let cv = self.vvalue(*c, at, vmemo);
                    let x = self.vvalue(*a, at, vmemo);
                    let y = self.vvalue(*b, at, vmemo);
                    if node.elem == Elem::F32 {
                        let m = self.as_float_mask(cv);
                        self.b.ins().bitselect(m, x, y)
                    } else {
                        self.b.ins().bitselect(cv, x, y)
                    }
                }
                other => unreachable!("not vectorised: {other:?}"),
            }
        };
        vmemo.insert(n, v);
        v
    }
}

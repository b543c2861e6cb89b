//! Cutting a kernel into passes over rows.
//!
//! Rows (the first axis) meet only at **barriers**: a reduction to a scalar and a group
//! reduction. A pass runs every row independently (rows are split over threads or GPU
//! blocks); its rows store the level-1 operands of the barriers it feeds, and the host
//! finishes each barrier after the pass (B values, not B·T). Everything between barriers is
//! fused: element-wise math is recomputed where it is used instead of stored, and within a
//! row the work on the last axis is grouped into as few loops as the row-local reductions
//! and scans allow.
//!
//! Choices that keep memory traffic down: a barrier's operands are stored in the **last**
//! pass before its result is needed (so a loss sum rides along with the gradient's pass), and
//! a scan needed by several passes is stored once instead of run again.

use crate::error::{KernelError, Result};
use crate::ir::{Elem, Kernel, NodeId, Op, Red, operands};
use std::collections::{BTreeSet, HashMap};

/// Where a buffer's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The kernel's input of this index.
    Input(usize),
    /// The kernel's output of this index.
    Output(usize),
    /// A node's value stored by a pass: a barrier's operand (level 1) or a scan used by
    /// several passes (level 2).
    Stored(NodeId),
    /// A barrier's result, written by the host (level 0 for a reduction, 1 for a group).
    Barrier(NodeId),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub role: Role,
    pub elem: Elem,
    pub level: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store {
    pub node: NodeId,
    pub buffer: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopKind {
    /// Positions in order, each independent of the others.
    Map,
    /// The scan node's body, position after position in its direction.
    Scan(NodeId),
}

/// One loop over the last axis within a row.
#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    pub kind: LoopKind,
    /// Row-local reductions (level-1 `Reduce` nodes) accumulated by this loop.
    pub reductions: Vec<NodeId>,
    /// Level-2 values written by this loop.
    pub stores: Vec<Store>,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Pass {
    /// Level-0 outputs, stored once before the rows.
    pub scalar_stores: Vec<Store>,
    /// Per row: loops over the last axis, in order.
    pub loops: Vec<Loop>,
    /// Per row, after its loops: level-1 values (barrier operands, outputs).
    pub row_stores: Vec<Store>,
    /// Barriers the host finishes after this pass, in order.
    pub host: Vec<NodeId>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub passes: Vec<Pass>,
    pub buffers: Vec<Buffer>,
    /// The buffer of a node whose value is read from memory (stored scans, barrier results).
    pub loaded: HashMap<NodeId, usize>,
    /// Scans, each with one row of scratch per thread (their values for later loops).
    pub scans: Vec<NodeId>,
}

impl Schedule {
    pub fn buffer_of(&self, role: Role) -> Option<usize> {
        self.buffers.iter().position(|b| b.role == role)
    }
}

/// Elements added to each row of the JIT's own level-2 buffers (scans stored for a later
/// pass): with `T` a multiple of 1024, rows of `f32` start at multiples of 4 KiB and map to
/// one set of the L1 cache, which four rows of two inputs already fill when a scan runs with
/// rows in lanes; a padded row starts one cache line further on.
pub const ROW_PAD: usize = 16;

impl Buffer {
    /// Whether the JIT lays this buffer's rows out `cols + ROW_PAD` elements apart: its own
    /// `f32` rows (a stored scan of another type keeps `cols`).
    pub fn padded(&self) -> bool {
        matches!(self.role, Role::Stored(_)) && self.level == 2 && self.elem == Elem::F32
    }
}

/// A barrier: the only operations that combine rows.
pub fn is_barrier(k: &Kernel, n: NodeId) -> bool {
    let node = k.node(n);
    match node.op {
        Op::Reduce { .. } => node.level == 0,
        Op::Group { .. } => true,
        _ => false,
    }
}

/// The operands of a barrier that a pass stores for the host.
pub fn barrier_operands(k: &Kernel, b: NodeId) -> Vec<NodeId> {
    match &k.node(b).op {
        Op::Reduce { x, mask, .. } => std::iter::once(*x).chain(*mask).collect(),
        Op::Group { x, by, .. } => x.iter().copied().chain(std::iter::once(*by)).collect(),
        _ => Vec::new(),
    }
}

pub fn schedule(k: &Kernel) -> Result<Schedule> {
    for n in &k.nodes {
        if n.level > 2 {
            return Err(KernelError::Unsupported {
                function: k.name.clone(),
                what: "a tensor of more than two dimensions".into(),
            });
        }
    }
    let n = k.nodes.len();
    // The first pass in which each node's value can be read.
    let mut avail = vec![0usize; n];
    for id in 0..n {
        let base = operands(&k.nodes[id].op)
            .iter()
            .map(|&o| avail[o])
            .max()
            .unwrap_or(0);
        avail[id] = base + usize::from(is_barrier(k, id));
    }
    let last_avail = k.outputs.iter().map(|o| avail[o.node]).max().unwrap_or(0);
    let row_output_last = k
        .outputs
        .iter()
        .any(|o| o.level > 0 && avail[o.node] == last_avail);
    // Scalar outputs come after every row pass that can still carry their barriers.
    let has_scalar = k.outputs.iter().any(|o| o.level == 0);
    let epilogue = last_avail + usize::from(row_output_last && has_scalar);
    let mut buffers: Vec<Buffer> = k
        .inputs
        .iter()
        .enumerate()
        .map(|(i, p)| Buffer {
            role: Role::Input(i),
            elem: p.elem,
            level: p.level,
        })
        .collect();
    let mut passes = vec![Pass::default(); epilogue + 1];
    // Roots: (pass, node, buffer, level).
    let mut roots: Vec<(usize, NodeId, usize, usize)> = Vec::new();
    for (i, o) in k.outputs.iter().enumerate() {
        buffers.push(Buffer {
            role: Role::Output(i),
            elem: k.node(o.node).elem,
            level: o.level,
        });
        let pass = if o.level == 0 {
            epilogue
        } else {
            avail[o.node]
        };
        roots.push((pass, o.node, buffers.len() - 1, o.level));
    }
    // Barriers, last first: each stores its operands in the last pass before it is read.
    let barriers: Vec<NodeId> = (0..n).filter(|&b| is_barrier(k, b)).collect();
    let mut placed: HashMap<NodeId, usize> = HashMap::new();
    for &b in barriers.iter().rev() {
        let need = roots
            .iter()
            .filter(|r| barriers_read(k, r.1).contains(&b))
            .map(|r| r.0)
            .min();
        let Some(need) = need else { continue };
        let pass = need - 1;
        placed.insert(b, pass);
        for o in barrier_operands(k, b) {
            let buffer = match buffers.iter().position(|x| x.role == Role::Stored(o)) {
                Some(i) => i,
                None => {
                    buffers.push(Buffer {
                        role: Role::Stored(o),
                        elem: k.node(o).elem,
                        level: 1,
                    });
                    buffers.len() - 1
                }
            };
            if !roots.iter().any(|r| r.0 == pass && r.2 == buffer) {
                roots.push((pass, o, buffer, 1));
            }
        }
    }
    let mut loaded = HashMap::new();
    for &b in &barriers {
        if let Some(&pass) = placed.get(&b) {
            passes[pass].host.push(b);
            buffers.push(Buffer {
                role: Role::Barrier(b),
                elem: Elem::F32,
                level: k.node(b).level,
            });
            loaded.insert(b, buffers.len() - 1);
        }
    }
    // Scans read by several passes are stored by the first.
    let mut scan_passes: HashMap<NodeId, BTreeSet<usize>> = HashMap::new();
    for r in &roots {
        for s in closure(k, r.1, &HashMap::new()) {
            if matches!(k.node(s).op, Op::Scan(_)) {
                scan_passes.entry(s).or_default().insert(r.0);
            }
        }
    }
    let mut stored_scans: HashMap<NodeId, usize> = HashMap::new();
    for (&s, ps) in &scan_passes {
        if ps.len() > 1 {
            let first = *ps.iter().next().unwrap_or(&0);
            buffers.push(Buffer {
                role: Role::Stored(s),
                elem: k.node(s).elem,
                level: 2,
            });
            roots.push((first, s, buffers.len() - 1, 2));
            stored_scans.insert(s, first);
        }
    }
    roots.sort_by_key(|r| (r.0, r.1, r.2));
    for (p, pass) in passes.iter_mut().enumerate() {
        // In passes after the one that stores a scan, the scan is read from memory.
        let mut leaves = loaded.clone();
        for (&s, &first) in &stored_scans {
            if p > first
                && let Some(b) = buffers.iter().position(|x| x.role == Role::Stored(s))
            {
                leaves.insert(s, b);
            }
        }
        let here: Vec<&(usize, NodeId, usize, usize)> = roots.iter().filter(|r| r.0 == p).collect();
        for r in &here {
            if r.3 == 0 {
                pass.scalar_stores.push(Store {
                    node: r.1,
                    buffer: r.2,
                });
            } else if r.3 == 1 {
                pass.row_stores.push(Store {
                    node: r.1,
                    buffer: r.2,
                });
            }
        }
        pass.loops = row_loops(k, &here, &leaves);
    }
    let mut loaded_all = loaded;
    for &s in stored_scans.keys() {
        if let Some(b) = buffers.iter().position(|x| x.role == Role::Stored(s)) {
            loaded_all.insert(s, b);
        }
    }
    let mut scans: Vec<NodeId> = (0..n)
        .filter(|&i| matches!(k.node(i).op, Op::Scan(_)))
        .collect();
    scans.sort_unstable();
    Ok(Schedule {
        passes,
        buffers,
        loaded: loaded_all,
        scans,
    })
}

/// The barriers `root` reads: reached through non-barrier nodes.
fn barriers_read(k: &Kernel, root: NodeId) -> BTreeSet<NodeId> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root];
    let mut seen = BTreeSet::new();
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        if is_barrier(k, n) {
            out.insert(n);
            continue;
        }
        stack.extend(operands(&k.node(n).op));
    }
    out
}

/// The nodes a root needs computed, stopping at barriers and at nodes read from memory.
pub fn closure(k: &Kernel, root: NodeId, leaves: &HashMap<NodeId, usize>) -> BTreeSet<NodeId> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        if is_barrier(k, n) || (leaves.contains_key(&n) && n != root) {
            continue;
        }
        stack.extend(operands(&k.node(n).op));
    }
    seen
}

/// The loops of one row: every row-local reduction and scan gets the earliest loop its
/// operands allow; level-2 stores too.
fn row_loops(
    k: &Kernel,
    roots: &[&(usize, NodeId, usize, usize)],
    leaves: &HashMap<NodeId, usize>,
) -> Vec<Loop> {
    let mut needed = BTreeSet::new();
    for r in roots {
        if r.3 == 0 {
            continue;
        }
        needed.extend(closure(k, r.1, leaves));
    }
    let mut loops: Vec<Loop> = Vec::new();
    // The loop after which a node's value can be read at any position of the row.
    let mut ready: HashMap<NodeId, usize> = HashMap::new();
    // The loop in which a node's value can be read at each position as the loop reaches it:
    // a scan's own loop, where `ready` is the loop after.
    let mut at_position: HashMap<NodeId, usize> = HashMap::new();
    let ready_of = |ready: &HashMap<NodeId, usize>, n: NodeId| ready.get(&n).copied().unwrap_or(0);
    let map_loop = |loops: &mut Vec<Loop>, earliest: usize| -> usize {
        match (earliest..loops.len()).find(|&i| loops[i].kind == LoopKind::Map) {
            Some(i) => i,
            None => {
                loops.push(Loop {
                    kind: LoopKind::Map,
                    reductions: Vec::new(),
                    stores: Vec::new(),
                });
                loops.len() - 1
            }
        }
    };
    for &n in &needed {
        if leaves.contains_key(&n) || is_barrier(k, n) {
            continue;
        }
        let node = k.node(n);
        let earliest = operands(&node.op)
            .iter()
            .map(|&o| ready_of(&ready, o))
            .max()
            .unwrap_or(0);
        let positional = operands(&node.op)
            .iter()
            .map(|&o| at_position.get(&o).copied().unwrap_or(ready_of(&ready, o)))
            .max()
            .unwrap_or(0);
        match &node.op {
            Op::Scan(_) => {
                loops.push(Loop {
                    kind: LoopKind::Scan(n),
                    reductions: Vec::new(),
                    stores: Vec::new(),
                });
                ready.insert(n, loops.len());
                at_position.insert(n, loops.len() - 1);
            }
            Op::Reduce { .. } if node.level == 1 => {
                // Into the scan's loop when it has every operand at each position (one pass
                // over the row instead of two), else the first map loop that can.
                let home = match loops.get(positional) {
                    Some(l) if matches!(l.kind, LoopKind::Scan(_)) => positional,
                    _ => map_loop(&mut loops, earliest),
                };
                loops[home].reductions.push(n);
                ready.insert(n, home + 1);
            }
            _ => {
                ready.insert(n, earliest);
                at_position.insert(n, positional);
            }
        }
    }
    for r in roots.iter().filter(|r| r.3 == 2) {
        let node = r.1;
        let store = Store { node, buffer: r.2 };
        // A scan writes its own stores as it runs.
        if let Some(l) = loops.iter_mut().find(|l| l.kind == LoopKind::Scan(node)) {
            l.stores.push(store);
            continue;
        }
        let (earliest, positional) = if leaves.contains_key(&node) {
            (0, None)
        } else {
            (ready_of(&ready, node), at_position.get(&node).copied())
        };
        // Into a scan's loop when it has the value at each position (`gae(…) + v` as the
        // scan runs, not in a second loop reading the scan back).
        let home = match positional.and_then(|p| loops.get(p).map(|l| (p, l))) {
            Some((p, l)) if matches!(l.kind, LoopKind::Scan(_)) => p,
            _ => map_loop(&mut loops, earliest),
        };
        loops[home].stores.push(store);
    }
    loops
}

/// The scans of `pass` that a later loop of their row reads and that are not stored: the back
/// ends keep their values in scratch rows (a stored scan is read from its buffer).
pub fn scans_read_later(k: &Kernel, s: &Schedule, pass: &Pass) -> BTreeSet<NodeId> {
    let mut read = BTreeSet::new();
    for (i, l) in pass.loops.iter().enumerate() {
        let LoopKind::Scan(n) = l.kind else {
            continue;
        };
        let mut todo: Vec<NodeId> = Vec::new();
        for later in &pass.loops[i + 1..] {
            todo.extend(later.stores.iter().map(|st| st.node));
            for &r in &later.reductions {
                todo.extend(operands(&k.node(r).op));
            }
            if let LoopKind::Scan(m) = later.kind {
                todo.push(m);
            }
        }
        let mut seen = BTreeSet::new();
        while let Some(m) = todo.pop() {
            if !seen.insert(m) || s.loaded.contains_key(&m) || k.node(m).level < 2 {
                continue;
            }
            if m == n {
                read.insert(n);
                break;
            }
            match &k.node(m).op {
                Op::Scan(scan) => todo.extend(scan.body.iter().filter_map(|bn| match bn.op {
                    Op::Column(o) => Some(o),
                    _ => None,
                })),
                op => todo.extend(operands(op)),
            }
        }
    }
    read
}

/// The nodes of exactly `level` that `n` depends on without passing a node computed in a loop
/// (a row-local reduction) or read from memory: what a back end computes before a region.
pub fn needed_at_level(k: &Kernel, s: &Schedule, n: NodeId, level: usize) -> Vec<NodeId> {
    let mut out = Vec::new();
    let mut stack = vec![n];
    let mut seen = BTreeSet::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        let node = k.node(x);
        if node.level == level {
            out.push(x);
        }
        if s.loaded.contains_key(&x) {
            continue;
        }
        match &node.op {
            Op::Reduce { .. } if node.level >= 1 => {}
            Op::Scan(scan) => {
                stack.extend(&scan.inits);
                stack.extend(crate::ir::outer_uses(scan));
            }
            op => stack.extend(operands(op)),
        }
    }
    out
}

/// The level-0 nodes a pass reads, in node order: computed once, before its rows.
pub fn pass_scalars(k: &Kernel, s: &Schedule, pass: &Pass) -> Vec<NodeId> {
    let mut roots: Vec<NodeId> = pass
        .scalar_stores
        .iter()
        .chain(&pass.row_stores)
        .map(|st| st.node)
        .collect();
    for l in &pass.loops {
        roots.extend(l.stores.iter().map(|st| st.node));
        roots.extend(&l.reductions);
        if let LoopKind::Scan(n) = l.kind {
            roots.push(n);
        }
    }
    let mut level0: Vec<NodeId> = roots
        .into_iter()
        .flat_map(|r| needed_at_level(k, s, r, 0))
        .collect();
    level0.sort_unstable();
    level0.dedup();
    level0
}

/// What a pass moves through memory per position of the last axis: the bytes of the level-2
/// buffers it reads (each once, however many of its loops read it) and of those it writes.
/// Level-1 and level-0 values (B and 1 per pass) and the scratch rows (in cache) are left
/// out. The kernel's inputs and outputs count once each in the bandwidth reference; passes
/// that read back a stored value move more.
pub fn pass_traffic(k: &Kernel, s: &Schedule, pass: &Pass) -> (usize, usize) {
    let mut written = BTreeSet::new();
    let mut todo = Vec::new();
    for l in &pass.loops {
        for st in &l.stores {
            written.insert(st.buffer);
            todo.push(st.node);
        }
        for &r in &l.reductions {
            todo.extend(operands(&k.node(r).op));
        }
        if let LoopKind::Scan(n) = l.kind {
            todo.push(n);
        }
    }
    let mut read = BTreeSet::new();
    let mut seen = BTreeSet::new();
    while let Some(n) = todo.pop() {
        if !seen.insert(n) || k.node(n).level < 2 {
            continue;
        }
        // A stored value is read from its buffer, but in the pass that writes it.
        if let Some(&b) = s.loaded.get(&n)
            && !written.contains(&b)
        {
            read.insert(b);
            continue;
        }
        match &k.node(n).op {
            Op::Input(i) => {
                read.insert(*i);
            }
            Op::Scan(scan) => {
                todo.extend(&scan.inits);
                todo.extend(crate::ir::outer_uses(scan));
            }
            op => todo.extend(operands(op)),
        }
    }
    let bytes = |set: &BTreeSet<usize>| set.iter().map(|&b| s.buffers[b].elem.bytes()).sum();
    (bytes(&read), bytes(&written))
}

/// The reduction's identity (an empty selection gives 0 after the loop).
pub fn identity(op: Red) -> f32 {
    match op {
        Red::Sum => 0.0,
        Red::Max => f32::NEG_INFINITY,
        Red::Min => f32::INFINITY,
    }
}

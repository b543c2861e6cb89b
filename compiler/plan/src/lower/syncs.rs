//! After the dataflow: weight syncs from each training instance to its role's other instances,
//! checkpoints ordered after the step's update, the ops renumbered so that dependencies come
//! first, and each op's level. Functions of the dataflow pass's [`Flow`].

use super::*;

/// The graph the dataflow pass built, which these passes complete and the plan carries.
pub(super) struct Flow {
    pub(super) values: Vec<Value>,
    pub(super) ops: Vec<Op>,
    pub(super) edges: Vec<Edge>,
    /// Model index → its `update` op.
    pub(super) updates: BTreeMap<usize, u32>,
}

impl Flow {
    /// A weight sync from each updated role's training instance (`train`: model index →
    /// instance index) to each other instance of the role.
    pub(super) fn weight_syncs(
        &mut self,
        program: &Program,
        instances: &[Instance],
        train: &BTreeMap<usize, usize>,
    ) {
        let updates: Vec<(usize, u32)> = self.updates.iter().map(|(&m, &o)| (m, o)).collect();
        for (model, update) in updates {
            let Some(train) = train.get(&model).copied() else {
                continue;
            };
            let m = &program.models[model];
            if m.frozen || m.optimizer.is_none() {
                continue;
            }
            let targets: Vec<usize> = (0..instances.len())
                .filter(|&i| i != train && instances[i].role == m.name)
                .collect();
            let layers = m.arch.as_ref().map_or(1, |a| a.layers.max(1));
            let bytes = m
                .arch
                .as_ref()
                .map_or(0, |a| memory::role_parameters(m.kind, a))
                * m.precision.bytes();
            for target in targets {
                let moves = crate::reshard::moves(&instances[train], &instances[target], layers);
                let (from, to) = (instances[train].id.clone(), instances[target].id.clone());
                let colocated = instances[train].ranks.intersects(&instances[target].ranks);
                let ranks = instances[train].ranks.union(&instances[target].ranks);
                // How far ahead the destination generates.
                let lag = self
                    .ops
                    .iter()
                    .filter(|o| o.instance.as_ref() == Some(&to))
                    .filter_map(|o| match &o.kind {
                        OpKind::Generate { staleness, .. } => Some(*staleness),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(0);
                let kind = OpKind::WeightSync {
                    role: m.name.clone(),
                    from: from.clone(),
                    to: to.clone(),
                    colocated,
                    bytes,
                    moves,
                    lag,
                };
                let id = self.ops.len() as u32;
                // Runs after the update and after every reader of the destination this step.
                let mut deps: BTreeSet<u32> = BTreeSet::from([update]);
                deps.extend(
                    self.ops
                        .iter()
                        .filter(|o| o.uses.contains(&to))
                        .map(|o| o.id),
                );
                self.ops.push(Op {
                    id,
                    label: format!("weight_sync {from}→{to}"),
                    kind,
                    instance: None,
                    ranks,
                    uses: vec![from, to],
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    deps: deps.into_iter().collect(),
                    level: 0,
                    every: None,
                });
            }
        }
    }

    /// A checkpoint saves the weights the step's update wrote. (Its op was created where the
    /// statement is; when the update comes later in the text the dependency is added here and the
    /// ops are re-ordered so that dependencies come first.)
    pub(super) fn checkpoint_deps(&mut self, program: &Program) -> Result<(), LowerError> {
        let mut changed = false;
        for i in 0..self.ops.len() {
            if let OpKind::Checkpoint { role, .. } = &self.ops[i].kind {
                let Some(model) = program.model_index(role) else {
                    continue;
                };
                if let Some(&u) = self.updates.get(&model)
                    && !self.ops[i].deps.contains(&u)
                {
                    self.ops[i].deps.push(u);
                    self.ops[i].deps.sort();
                    changed |= u as usize > i;
                }
            }
        }
        if changed {
            self.reorder()?;
        }
        Ok(())
    }

    /// Renumbers ops so that every dependency comes first (a stable topological order).
    pub(super) fn reorder(&mut self) -> Result<(), LowerError> {
        let n = self.ops.len();
        let mut order = Vec::with_capacity(n);
        let mut placed = vec![false; n];
        while order.len() < n {
            let before = order.len();
            for i in 0..n {
                if !placed[i] && self.ops[i].deps.iter().all(|&d| placed[d as usize]) {
                    placed[i] = true;
                    order.push(i);
                    break;
                }
            }
            if order.len() == before {
                return Err(lower_err(
                    "the pipeline's operations depend on each other in a cycle",
                ));
            }
        }
        let mut new_id = vec![0u32; n];
        for (new, &old) in order.iter().enumerate() {
            new_id[old] = new as u32;
        }
        let mut ops: Vec<Op> = order.iter().map(|&o| self.ops[o].clone()).collect();
        for op in &mut ops {
            op.id = new_id[op.id as usize];
            for d in &mut op.deps {
                *d = new_id[*d as usize];
            }
            op.deps.sort();
        }
        self.ops = ops;
        for v in &mut self.values {
            v.producer = v.producer.map(|p| new_id[p as usize]);
        }
        for e in &mut self.edges {
            e.from = new_id[e.from as usize];
            e.to = new_id[e.to as usize];
            e.via = e.via.map(|x| new_id[x as usize]);
        }
        for u in self.updates.values_mut() {
            *u = new_id[*u as usize];
        }
        Ok(())
    }

    /// Each op's level: one more than its dependencies' highest (0 without any).
    pub(super) fn levels(&mut self) {
        for i in 0..self.ops.len() {
            let level = self.ops[i]
                .deps
                .iter()
                .map(|&d| self.ops[d as usize].level + 1)
                .max()
                .unwrap_or(0);
            self.ops[i].level = level;
        }
        self.edges
            .sort_by_key(|e| (e.to, e.value, e.field.clone(), e.from));
    }
}

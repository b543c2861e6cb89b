//! The instances pass: the program's hardware and placements → clusters (ranks numbered
//! cluster after cluster), the instances the pipeline's calls run on (each with its layout and
//! its phases' memory), and the driver, where kernels run.

use super::*;

/// What [`place`] gives the passes after it.
pub(super) struct Placed {
    pub(super) clusters: Vec<Cluster>,
    pub(super) instances: Vec<Instance>,
    /// Placement index → instance index.
    pub(super) by_placement: BTreeMap<usize, usize>,
    pub(super) driver: usize,
}

/// The clusters, instances and driver of `program`; errors when a call has no placement or a
/// layout does not use its placement's devices.
pub(super) fn place(program: &Program) -> Result<Placed, Vec<LowerError>> {
    let Some(pipeline) = &program.pipeline else {
        return Err(vec![lower_err(
            "the program has no `pipeline` to run (a generic one, a recipe, runs where a job's pipeline calls it: `pipeline train { recipe(…) }`)",
        )]);
    };
    // Clusters, ranks numbered cluster after cluster.
    let mut clusters = Vec::new();
    let mut cluster_first = Vec::new();
    let mut next = 0u32;
    for c in &program.clusters {
        let n = c.device_count() as u32;
        cluster_first.push(next);
        clusters.push(Cluster {
            name: c.name.clone(),
            ranks: RankSet::range(next, next + n),
            nodes: c.nodes.value,
            devices_per_node: c.devices_per_node.value,
            device: c.device.name.clone(),
            is_cpu: c.is_cpu,
            memory: c.device.memory.max(0.0) as u64,
            intra_bandwidth: c.intra_bandwidth,
            inter_bandwidth: c.inter_bandwidth,
            flops: c.device.flops.max(0.0),
            memory_bandwidth: c.device.bandwidth.max(0.0),
        });
        next += n;
    }

    // Instances: every placement a call runs on.
    let mut errors = Vec::new();
    let mut used: BTreeMap<usize, BTreeSet<Phase>> = BTreeMap::new();
    for call in &pipeline.calls {
        let phase = call.op.phase();
        let model = &program.models[call.model];
        match program.placement_index_for(call.model, phase) {
            Some(index) => {
                used.entry(index).or_default().insert(phase);
            }
            None => errors.push(lower_err(format!(
                "`{}.{}` has no placement",
                model.name,
                phase.as_str()
            ))),
        }
    }
    let mut memory_of: BTreeMap<(usize, Phase), PhaseMemory> = BTreeMap::new();
    for device in memory::estimate(program) {
        for pm in device.phases {
            memory_of
                .entry((pm.placement, pm.phase))
                .or_insert_with(|| phase_memory(&pm.breakdown));
        }
    }
    let mut instances = Vec::new();
    let mut by_placement = BTreeMap::new();
    for (&index, phases) in &used {
        let p = &program.placements[index];
        let model = &program.models[p.model];
        let first = cluster_first.get(p.cluster).copied().unwrap_or(0);
        let ranks = RankSet::range(first + p.devices.start as u32, first + p.devices.end as u32);
        let layout = if p.auto {
            Layout {
                dp: ranks.len().max(1),
                fsdp: 1,
                tp: 1,
                pp: 1,
                sp: 1,
                micro: None,
            }
        } else {
            plan_layout(&p.layout)
        };
        if layout.devices() != ranks.len() {
            errors.push(lower_err(format!(
                "the placement of `{}` has {} devices but its layout uses {}",
                model.name,
                ranks.len(),
                layout.devices()
            )));
        }
        let id = match p.phase {
            Some(ph) => format!("{}.{}", model.name, ph.as_str()),
            None => model.name.clone(),
        };
        let memory = phases
            .iter()
            .filter_map(|ph| {
                memory_of
                    .get(&(index, *ph))
                    .map(|m| (plan_phase(*ph), m.clone()))
            })
            .collect();
        by_placement.insert(index, instances.len());
        instances.push(Instance {
            id,
            role: model.name.clone(),
            cluster: program
                .clusters
                .get(p.cluster)
                .map_or_else(String::new, |c| c.name.clone()),
            phases: phases.iter().map(|ph| plan_phase(*ph)).collect(),
            ranks,
            layout,
            auto: p.auto,
            memory,
        });
    }
    if !errors.is_empty() {
        errors.sort();
        errors.dedup();
        return Err(errors);
    }
    // The driver: where kernels run.
    let driver_call = pipeline
        .calls
        .iter()
        .find(|c| c.op == prog::Op::Update)
        .or(pipeline.calls.first());
    let Some(driver_call) = driver_call else {
        return Err(vec![lower_err(
            "the pipeline calls no role: nothing to place",
        )]);
    };
    let driver_index = program
        .placement_index_for(driver_call.model, driver_call.op.phase())
        .expect("checked above");
    let driver = by_placement[&driver_index];
    Ok(Placed {
        clusters,
        instances,
        by_placement,
        driver,
    })
}

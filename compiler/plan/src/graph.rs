//! Pictures of a plan for people: device pools as clusters (subgraphs), role phases as nodes,
//! data edges labelled with the values and the transfer that moves them, weight syncs dashed, checkpoints dotted.
//! Graphviz `dot` and Mermaid text; both are deterministic.

use crate::model::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The graph both renderers draw.
struct Graph {
    /// Pool label → node ids in it (pools in order of first rank).
    pools: Vec<(String, Vec<usize>)>,
    /// Node labels (lines).
    nodes: Vec<Vec<String>>,
    /// `(from, to, kind)` → labels; kind 0: data, 1: weights, 2: checkpoint (control).
    edges: BTreeMap<(usize, usize, u8), Vec<String>>,
}

fn build(plan: &Plan) -> Graph {
    let mut pool_of_ranks: BTreeMap<(u32, String), usize> = BTreeMap::new();
    let mut pools: Vec<(String, Vec<usize>)> = Vec::new();
    let mut pool_keys: Vec<(u32, String)> = Vec::new();
    let mut nodes: Vec<Vec<String>> = Vec::new();
    let mut node_of_key: BTreeMap<String, usize> = BTreeMap::new();
    let mut node_of_op: Vec<Option<usize>> = vec![None; plan.ops.len()];
    let mut kernel_names: BTreeMap<usize, Vec<String>> = BTreeMap::new();

    let pool_label = |inst: &Instance| -> String {
        let cluster = plan.clusters.iter().find(|c| c.name == inst.cluster);
        let first = cluster.and_then(|c| c.ranks.nth(0)).unwrap_or(0);
        let device = cluster.map_or("device", |c| c.device.as_str());
        let local = RankSet::from_ranges(
            inst.ranks
                .ranges()
                .iter()
                .map(|&(a, b)| (a - first, b - first)),
        );
        format!(
            "{}[{}] · {}× {}",
            inst.cluster,
            local.to_string().replace(',', " "),
            inst.ranks.len(),
            device
        )
    };

    for op in &plan.ops {
        let (key, label): (String, Vec<String>) = match &op.kind {
            OpKind::Transfer { .. } | OpKind::WeightSync { .. } => continue,
            OpKind::Kernel { .. } => {
                let inst = op.instance.clone().unwrap_or_default();
                (format!("kernels@{inst}"), vec!["kernels".into()])
            }
            OpKind::Log { .. } => ("log".into(), vec!["log".into()]),
            OpKind::Checkpoint { role, .. } => (
                format!("checkpoint {role}"),
                vec![format!("checkpoint {role}")],
            ),
            OpKind::Sample {
                dataset,
                count,
                form,
                ..
            } => {
                let (form, what) = match form {
                    Some(SampleForm::Demonstrations) => ("demonstrations", "demonstrations"),
                    Some(SampleForm::Preferences) => ("preferences", "pairs"),
                    None => ("sample", "prompts"),
                };
                (
                    format!("{form} {dataset}"),
                    vec![
                        format!("{form} {dataset}"),
                        count.map_or_else(String::new, |c| format!("{c} {what}")),
                    ],
                )
            }
            kind => {
                let inst = op.instance.clone().unwrap_or_default();
                let mut lines = vec![format!("{} · {}", kind.role().unwrap_or(""), kind.name())];
                if let Some(i) = plan.instance(&inst) {
                    lines.push(layout_text(&i.layout));
                }
                (format!("{inst}:{}", kind.name()), lines)
            }
        };
        let node = match node_of_key.get(&key) {
            Some(&n) => n,
            None => {
                let n = nodes.len();
                nodes.push(label.into_iter().filter(|l| !l.is_empty()).collect());
                node_of_key.insert(key, n);
                let inst = op.instance.as_deref().and_then(|i| plan.instance(i));
                let pkey = inst.map_or((0, String::from("?")), |i| {
                    (i.ranks.nth(0).unwrap_or(0), i.ranks.to_string())
                });
                let pool = match pool_of_ranks.get(&pkey) {
                    Some(&p) => p,
                    None => {
                        let p = pools.len();
                        pools.push((inst.map_or_else(|| "?".into(), pool_label), Vec::new()));
                        pool_keys.push(pkey.clone());
                        pool_of_ranks.insert(pkey, p);
                        p
                    }
                };
                pools[pool].1.push(n);
                n
            }
        };
        if let OpKind::Kernel { function, .. } = &op.kind {
            let names = kernel_names.entry(node).or_default();
            if !names.contains(function) {
                names.push(function.clone());
            }
        }
        node_of_op[op.id as usize] = Some(node);
    }
    for (node, names) in kernel_names {
        let shown: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| !is_operator(n))
            .collect();
        let mut text = shown.iter().take(6).copied().collect::<Vec<_>>().join(", ");
        if shown.len() > 6 {
            let _ = write!(text, ", … (+{})", shown.len() - 6);
        }
        nodes[node] = vec!["kernels".into(), text];
        nodes[node].retain(|l| !l.is_empty());
    }
    // Pools in order of their first rank.
    let mut order: Vec<usize> = (0..pools.len()).collect();
    order.sort_by(|&a, &b| pool_keys[a].cmp(&pool_keys[b]));
    let pools = order.into_iter().map(|i| pools[i].clone()).collect();

    // Per node pair: value → (fields read, whole value read, transfer).
    type Reads = BTreeMap<u32, (Vec<String>, bool, Option<String>)>;
    let mut reads: BTreeMap<(usize, usize), Reads> = BTreeMap::new();
    for e in &plan.edges {
        let (Some(from), Some(to)) = (
            node_of_op.get(e.from as usize).copied().flatten(),
            node_of_op.get(e.to as usize).copied().flatten(),
        ) else {
            continue;
        };
        if from == to {
            continue;
        }
        let entry = reads
            .entry((from, to))
            .or_default()
            .entry(e.value)
            .or_default();
        match &e.field {
            Some(f) if !entry.0.contains(f) => entry.0.push(f.clone()),
            Some(_) => {}
            None => entry.1 = true,
        }
        if let Some(OpKind::Transfer {
            collective, sends, ..
        }) = e
            .via
            .and_then(|t| plan.ops.get(t as usize))
            .map(|o| &o.kind)
        {
            let plural = if sends.len() == 1 { "" } else { "s" };
            entry.2 = Some(format!(
                "{}, {} send{plural}",
                collective_name(*collective),
                sends.len()
            ));
        }
    }
    let mut edges: BTreeMap<(usize, usize, u8), Vec<String>> = BTreeMap::new();
    for ((from, to), values) in reads {
        let labels = edges.entry((from, to, 0)).or_default();
        for (value, (fields, whole, transfer)) in values {
            let name = plan
                .values
                .get(value as usize)
                .map_or("?", |v| v.name.as_str());
            let mut label = if whole || fields.is_empty() {
                name.to_string()
            } else if fields.len() == 1 {
                format!("{name}.{}", fields[0])
            } else {
                format!("{name}.{{{}}}", fields.join(", "))
            };
            if let Some(t) = transfer {
                let _ = write!(label, " ({t})");
            }
            labels.push(label);
        }
    }
    for op in &plan.ops {
        if let OpKind::WeightSync {
            from,
            to,
            moves,
            colocated,
            ..
        } = &op.kind
        {
            let find = |inst: &str, prefer: &str| {
                node_of_key
                    .get(&format!("{inst}:{prefer}"))
                    .copied()
                    .or_else(|| {
                        node_of_key
                            .iter()
                            .find(|(k, _)| k.starts_with(&format!("{inst}:")))
                            .map(|(_, &n)| n)
                    })
            };
            if let (Some(a), Some(b)) = (find(from, "update"), find(to, "generate")) {
                let how = if *colocated { "in place" } else { "p2p" };
                let plural = if moves.len() == 1 { "" } else { "s" };
                edges.entry((a, b, 1)).or_default().push(format!(
                    "weights ({how}, {} shard move{plural})",
                    moves.len()
                ));
            }
        }
    }
    // A checkpoint saves what an update wrote: a dotted edge labelled with its interval.
    for op in &plan.ops {
        if let OpKind::Checkpoint { .. } = &op.kind
            && let Some(to) = node_of_op[op.id as usize]
        {
            for &d in &op.deps {
                if let Some(from) = node_of_op.get(d as usize).copied().flatten() {
                    let label = op
                        .every
                        .map_or_else(|| "each step".to_string(), |n| format!("every {n} steps"));
                    edges.entry((from, to, 2)).or_default().push(label);
                }
            }
        }
    }
    Graph {
        pools,
        nodes,
        edges,
    }
}

fn is_operator(name: &str) -> bool {
    matches!(
        name,
        "add"
            | "sub"
            | "mul"
            | "div"
            | "rem"
            | "eq"
            | "ne"
            | "lt"
            | "le"
            | "gt"
            | "ge"
            | "and"
            | "or"
            | "neg"
            | "not"
            | "index"
    )
}

fn collective_name(c: Collective) -> &'static str {
    match c {
        Collective::Scatter => "scatter",
        Collective::Gather => "gather",
        Collective::AllToAll => "all-to-all",
        Collective::Broadcast => "broadcast",
        Collective::P2p => "p2p",
        Collective::AllReduce => "all-reduce",
        Collective::ReduceScatter => "reduce-scatter",
        Collective::AllGather => "all-gather",
    }
}

/// `fsdp(8) tp(8) micro(1)`, as the program writes a layout.
pub fn layout_text(l: &Layout) -> String {
    let mut parts: Vec<String> = [
        ("dp", l.dp),
        ("fsdp", l.fsdp),
        ("tp", l.tp),
        ("pp", l.pp),
        ("sp", l.sp),
    ]
    .iter()
    .filter(|(_, v)| *v != 1)
    .map(|(n, v)| format!("{n}({v})"))
    .collect();
    if let Some(m) = l.micro {
        parts.push(format!("micro({m})"));
    }
    if parts.is_empty() {
        "dp(1)".into()
    } else {
        parts.join(" ")
    }
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Graphviz `dot` source.
pub fn dot(plan: &Plan) -> String {
    let g = build(plan);
    let mut out = String::new();
    let _ = writeln!(out, "digraph \"{}\" {{", dot_escape(&plan.pipeline));
    out.push_str("  rankdir=LR;\n  compound=true;\n  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\", fontsize=10];\n");
    for (i, (label, nodes)) in g.pools.iter().enumerate() {
        let _ = writeln!(out, "  subgraph cluster_{i} {{");
        let _ = writeln!(
            out,
            "    label=\"{}\";\n    style=rounded;\n    color=gray50;",
            dot_escape(label)
        );
        for &n in nodes {
            let text: Vec<String> = g.nodes[n].iter().map(|l| dot_escape(l)).collect();
            let _ = writeln!(out, "    n{n} [label=\"{}\"];", text.join("\\n"));
        }
        out.push_str("  }\n");
    }
    for ((a, b, kind), labels) in &g.edges {
        let style = match kind {
            1 => ", style=dashed, color=blue",
            2 => ", style=dotted, color=gray40",
            _ => "",
        };
        let _ = writeln!(
            out,
            "  n{a} -> n{b} [label=\"{}\"{style}];",
            dot_escape(&labels.join("\n")).replace('\n', "\\n")
        );
    }
    out.push_str("}\n");
    out
}

fn mermaid_escape(s: &str) -> String {
    s.replace('"', "#quot;")
}

/// Mermaid `flowchart` source.
pub fn mermaid(plan: &Plan) -> String {
    let g = build(plan);
    let mut out = String::from("flowchart LR\n");
    for (i, (label, nodes)) in g.pools.iter().enumerate() {
        let _ = writeln!(out, "  subgraph pool{i}[\"{}\"]", mermaid_escape(label));
        for &n in nodes {
            let text: Vec<String> = g.nodes[n].iter().map(|l| mermaid_escape(l)).collect();
            let _ = writeln!(out, "    n{n}[\"{}\"]", text.join("<br/>"));
        }
        out.push_str("  end\n");
    }
    for ((a, b, kind), labels) in &g.edges {
        let arrow = if *kind == 0 { "-->" } else { "-.->" };
        let _ = writeln!(
            out,
            "  n{a} {arrow}|\"{}\"| n{b}",
            mermaid_escape(&labels.join("<br/>"))
        );
    }
    out
}

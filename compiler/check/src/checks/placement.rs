//! Placement arithmetic: device ranges inside the cluster, layouts that multiply to the device
//! count, and parallel degrees that divide the model's heads, layers and vocabulary.

use crate::program::*;
use rlc_diagnostics::{Code, Diagnostic};

pub fn check(program: &Program, diags: &mut Vec<Diagnostic>) {
    for p in &program.placements {
        let cluster = &program.clusters[p.cluster];
        let model = &program.models[p.model];
        let what = phase_name(model, p.phase);
        let total = cluster.device_count();
        if p.devices.start >= p.devices.end || p.devices.end > total {
            let why = if p.devices.start >= p.devices.end {
                "the range is empty".to_string()
            } else {
                format!("`{}` has devices 0..{total}", cluster.name)
            };
            diags.push(
                Diagnostic::new(
                    Code::DevicesOutOfRange,
                    format!(
                        "{what} is placed on devices {}..{} but {why}",
                        p.devices.start, p.devices.end
                    ),
                    p.devices_origin.file,
                    p.devices_origin.span,
                )
                .primary_label(if p.devices.start >= p.devices.end {
                    "no devices"
                } else {
                    "outside the cluster"
                })
                .label(
                    cluster.nodes.origin.file,
                    cluster.origin.span,
                    format!(
                        "{} node(s) × {} devices",
                        cluster.nodes.value, cluster.devices_per_node.value
                    ),
                )
                .help(format!(
                    "use a non-empty range within 0..{total}, e.g. `{}[0..{total}]`",
                    cluster.name
                )),
            );
            continue;
        }
        if p.auto {
            continue;
        }
        let devices = p.devices.end - p.devices.start;
        let l = &p.layout;
        if l.devices() != devices {
            let factors: Vec<String> = [("dp", l.dp), ("fsdp", l.fsdp), ("tp", l.tp), ("pp", l.pp)]
                .iter()
                .filter_map(|(n, f)| f.map(|f| format!("{n}({})", f.value)))
                .collect();
            let product = if factors.is_empty() {
                "one replica".to_string()
            } else {
                factors.join(" × ")
            };
            // The primary label goes on the layout (`with …`), the devices get their own.
            let layout_span = [l.dp, l.fsdp, l.tp, l.pp, l.sp, l.micro]
                .iter()
                .flatten()
                .map(|f| f.origin.span)
                .reduce(|a, b| a.to(b))
                .unwrap_or(p.origin.span);
            diags.push(
                Diagnostic::new(
                    Code::LayoutProduct,
                    format!("{what} uses {product} = {} devices but is placed on {devices}", l.devices()),
                    p.origin.file,
                    layout_span,
                )
                .primary_label(format!("{} ≠ {devices}", l.devices()))
                .label(p.devices_origin.file, p.devices_origin.span, format!("{devices} devices"))
                .help("make dp·fsdp·tp·pp equal the number of devices (sp and micro do not take devices)"),
            );
        }
        let Some(arch) = &model.arch else { continue };
        let preset = arch
            .preset
            .as_deref()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default();
        let mut divides =
            |factor: Option<Sourced<u64>>, n: u64, what_n: &str, code: Code, name: &str| {
                if let Some(f) = factor
                    && !n.is_multiple_of(f.value)
                {
                    diags.push(
                        Diagnostic::new(
                            code,
                            format!(
                                "{name}({}) does not divide the {n} {what_n} of `{}`{preset}",
                                f.value, model.name
                            ),
                            f.origin.file,
                            f.origin.span,
                        )
                        .primary_label(format!("{name}({})", f.value))
                        .label(
                            model.arch_origin.file,
                            model.arch_origin.span,
                            format!("{n} {what_n}"),
                        )
                        .help(format!(
                            "choose a {name} degree that divides {n}: {}",
                            divisors(n, 16)
                        )),
                    );
                }
            };
        divides(l.tp, arch.heads, "attention heads", Code::HeadsTp, "tp");
        divides(l.pp, arch.layers, "layers", Code::LayersPp, "pp");
        divides(l.tp, arch.vocab, "vocabulary entries", Code::VocabTp, "tp");
        divides(l.sp, arch.heads, "attention heads", Code::HeadsSp, "sp");
        if let Some(tp) = l.tp
            && arch.kv_heads % tp.value != 0
            && tp.value % arch.kv_heads != 0
        {
            diags.push(
                Diagnostic::new(
                    Code::KvHeadsTp,
                    format!("tp({}) and the {} key/value heads of `{}`{preset} fit neither way", tp.value, arch.kv_heads, model.name),
                    tp.origin.file,
                    tp.origin.span,
                )
                .primary_label(format!("tp({})", tp.value))
                .label(model.arch_origin.file, model.arch_origin.span, format!("{} key/value heads", arch.kv_heads))
                .help("tp must divide the key/value heads (each rank holds whole heads) or be a multiple of them (heads are replicated)"),
            );
        }
    }
    phases_placed(program, diags);
}

/// Every operation the pipeline runs has somewhere to run.
fn phases_placed(program: &Program, diags: &mut Vec<Diagnostic>) {
    let Some(pipeline) = &program.pipeline else {
        return;
    };
    if program.auto_place.is_some() {
        return;
    }
    let mut reported = std::collections::BTreeSet::new();
    for call in &pipeline.calls {
        let phase = call.op.phase();
        if program.placement_for(call.model, phase).is_some()
            || !reported.insert((call.model, phase))
        {
            continue;
        }
        let model = &program.models[call.model];
        diags.push(
            Diagnostic::new(
                Code::PhaseNotPlaced,
                format!("`{}.{}` runs in the pipeline but is not placed", model.name, phase.as_str()),
                call.origin.file,
                call.origin.span,
            )
            .primary_label("runs here")
            .help(format!("add `place {}.{} on … with …` (or `place {} on …` for all its phases, or `place auto`)", model.name, phase.as_str(), model.name)),
        );
    }
}

pub fn phase_name(model: &Model, phase: Option<Phase>) -> String {
    match phase {
        Some(p) => format!("`{}.{}`", model.name, p.as_str()),
        None => format!("`{}`", model.name),
    }
}

/// Divisors of `n` up to `max`, for help text.
fn divisors(n: u64, max: u64) -> String {
    let ds: Vec<String> = (1..=max.min(n))
        .filter(|d| n.is_multiple_of(*d))
        .map(|d| d.to_string())
        .collect();
    ds.join(", ")
}

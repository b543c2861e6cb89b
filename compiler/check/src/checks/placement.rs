//! Placement arithmetic: device ranges inside the cluster, layouts that multiply to the device
//! count, and parallel degrees that divide the model's heads, layers and vocabulary.
//!
//! One mistake is one diagnostic: the same layout written on several `place` lines (a role's
//! phases, its frozen copy) that does not fit its devices, or the same degree that does not
//! divide the same count, is reported once, at its first `place`, with the others as labels.

use super::divisors;
use crate::program::*;
use rlc_diagnostics::{Code, Diagnostic, Edit};

/// One mistake and every `place` line that repeats it.
struct Finding {
    /// What makes two places the same mistake (the code, the layout or degree, the counts).
    key: (Code, String, u64, u64),
    /// Indices into `program.placements`, the first one primary.
    places: Vec<usize>,
}

/// Groups the places of `(key, place)` pairs by key, in the order keys first appear.
fn group(found: impl IntoIterator<Item = ((Code, String, u64, u64), usize)>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for (key, place) in found {
        match out.iter_mut().find(|f| f.key == key) {
            Some(f) => f.places.push(place),
            None => out.push(Finding {
                key,
                places: vec![place],
            }),
        }
    }
    out
}

/// `a`, `a and b`, `a, b and c`.
pub(crate) fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

pub fn check(program: &Program, diags: &mut Vec<Diagnostic>) {
    arithmetic(program, diags);
    phases_placed(program, diags);
}

/// Each `place` line on its own: its devices, its layout's product and degrees.
pub fn arithmetic(program: &Program, diags: &mut Vec<Diagnostic>) {
    let mut ranges = Vec::new();
    let mut products = Vec::new();
    let mut degrees = Vec::new();
    for (i, p) in program.placements.iter().enumerate() {
        let cluster = &program.clusters[p.cluster];
        let model = &program.models[p.model];
        let total = cluster.device_count();
        if p.devices.start >= p.devices.end || p.devices.end > total {
            // The cluster's index keeps ranges of different clusters apart.
            ranges.push((
                (
                    Code::DevicesOutOfRange,
                    p.cluster.to_string(),
                    p.devices.start,
                    p.devices.end,
                ),
                i,
            ));
            continue;
        }
        if p.auto {
            continue;
        }
        let devices = p.devices.end - p.devices.start;
        let l = &p.layout;
        if l.devices() != devices {
            products.push(((Code::LayoutProduct, product(l), l.devices(), devices), i));
        }
        let Some(arch) = &model.arch else { continue };
        // A tp degree that does not divide the heads is the one mistake: what else it does not
        // fit (key/value heads, vocabulary) are notes of that error (`tp_also`).
        let tp_heads = l.tp.is_some_and(|tp| !arch.heads.is_multiple_of(tp.value));
        for (code, n) in [
            (Code::HeadsTp, arch.heads),
            (Code::LayersPp, arch.layers),
            (Code::VocabTp, arch.vocab),
            (Code::HeadsSp, arch.heads),
        ] {
            if let Some(f) = degree(l, code)
                && !n.is_multiple_of(f.value)
                && !(code == Code::VocabTp && tp_heads)
            {
                degrees.push(((code, String::new(), f.value, n), i));
            }
        }
        if let Some(tp) = l.tp
            && !tp_heads
            && arch.kv_heads % tp.value != 0
            && tp.value % arch.kv_heads != 0
        {
            degrees.push(((Code::KvHeadsTp, String::new(), tp.value, arch.kv_heads), i));
        }
    }
    for f in group(ranges) {
        diags.push(range_error(program, &f));
    }
    for f in group(products) {
        diags.push(product_error(program, &f));
    }
    for f in group(degrees) {
        diags.push(degree_error(program, &f));
    }
}

/// `dp(2) × tp(4)`, or `one replica`.
fn product(l: &Layout) -> String {
    let factors: Vec<String> = [("dp", l.dp), ("fsdp", l.fsdp), ("tp", l.tp), ("pp", l.pp)]
        .iter()
        .filter_map(|(n, f)| f.map(|f| format!("{n}({})", f.value)))
        .collect();
    if factors.is_empty() {
        "one replica".to_string()
    } else {
        factors.join(" × ")
    }
}

/// The span of a placement's layout (`dp(2), tp(4)`), or of the whole `place` line.
fn layout_span(p: &Placement) -> rlc_diagnostics::Span {
    let l = &p.layout;
    [l.dp, l.fsdp, l.tp, l.pp, l.sp, l.micro]
        .iter()
        .flatten()
        .map(|f| f.origin.span)
        .reduce(|a, b| a.to(b))
        .unwrap_or(p.origin.span)
}

/// The degree a divisibility code is about.
fn degree(l: &Layout, code: Code) -> Option<Sourced<u64>> {
    match code {
        Code::LayersPp => l.pp,
        Code::HeadsSp => l.sp,
        _ => l.tp,
    }
}

/// The role and phase of each `place` line of a finding, for its message.
fn place_names(program: &Program, f: &Finding) -> Vec<String> {
    f.places
        .iter()
        .map(|&i| {
            let p = &program.placements[i];
            phase_name(&program.models[p.model], p.phase)
        })
        .collect()
}

fn range_error(program: &Program, f: &Finding) -> Diagnostic {
    let first = &program.placements[f.places[0]];
    let cluster = &program.clusters[first.cluster];
    let total = cluster.device_count();
    let (start, end) = (first.devices.start, first.devices.end);
    let names = place_names(program, f);
    let why = if start >= end {
        "the range is empty".to_string()
    } else {
        format!("`{}` has devices 0..{total}", cluster.name)
    };
    let placed = if names.len() == 1 { "is" } else { "are" };
    let mut d = Diagnostic::new(
        Code::DevicesOutOfRange,
        format!(
            "{} {placed} placed on devices {start}..{end} but {why}",
            and_list(&names)
        ),
        first.devices_origin.file,
        first.devices_origin.span,
    )
    .primary_label(if start >= end {
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
    );
    for &i in &f.places[1..] {
        let p = &program.placements[i];
        d = d.label(
            p.devices_origin.file,
            p.devices_origin.span,
            "the same range",
        );
    }
    d.help(format!(
        "use a non-empty range within 0..{total}, e.g. `{}[0..{total}]`",
        cluster.name
    ))
}

fn product_error(program: &Program, f: &Finding) -> Diagnostic {
    let (_, product, uses, devices) = &f.key;
    let names = place_names(program, f);
    let first = &program.placements[f.places[0]];
    let (verb, placed) = if names.len() == 1 {
        ("uses", "is")
    } else {
        ("use", "are")
    };
    // The primary label goes on the layout (`with …`), the devices get their own.
    let mut d = Diagnostic::new(
        Code::LayoutProduct,
        format!(
            "{} {verb} {product} = {uses} devices but {placed} placed on {devices}",
            and_list(&names)
        ),
        first.origin.file,
        layout_span(first),
    )
    .primary_label(format!("{uses} ≠ {devices}"))
    .label(
        first.devices_origin.file,
        first.devices_origin.span,
        format!("{devices} devices"),
    );
    for &i in &f.places[1..] {
        let p = &program.placements[i];
        d = d.label(
            p.origin.file,
            layout_span(p),
            format!("the same layout on {devices} devices"),
        );
    }
    let places: Vec<&Placement> = f.places.iter().map(|&i| &program.placements[i]).collect();
    if let Some((message, edits)) = product_fix(program, &places, *devices) {
        d = d.fix(message, edits);
    }
    d.help(if names.len() == 1 {
        "make dp·fsdp·tp·pp equal the number of devices (sp and micro do not take devices)"
            .to_string()
    } else {
        format!(
            "make dp·fsdp·tp·pp equal the number of devices on each of these {} lines (sp and micro do not take devices)",
            names.len()
        )
    })
}

fn degree_error(program: &Program, f: &Finding) -> Diagnostic {
    let (code, _, value, n) = f.key;
    let places: Vec<&Placement> = f.places.iter().map(|&i| &program.placements[i]).collect();
    let mut models: Vec<&Model> = Vec::new();
    for p in &places {
        let m = &program.models[p.model];
        if !models.iter().any(|x| x.name == m.name) {
            models.push(m);
        }
    }
    let names: Vec<String> = models.iter().map(|m| format!("`{}`", m.name)).collect();
    // The preset's name, when every model named shares it.
    let presets: Vec<Option<&str>> = models
        .iter()
        .map(|m| m.arch.as_ref().and_then(|a| a.preset.as_deref()))
        .collect();
    let preset = match presets[0] {
        Some(p) if presets.iter().all(|q| *q == Some(p)) => format!(" ({p})"),
        _ => String::new(),
    };
    let (what_n, name) = match code {
        Code::HeadsTp => ("attention heads", "tp"),
        Code::LayersPp => ("layers", "pp"),
        Code::VocabTp => ("vocabulary entries", "tp"),
        Code::HeadsSp => ("attention heads", "sp"),
        _ => ("key/value heads", "tp"),
    };
    let first = degree(&places[0].layout, code).expect("a finding has its degree");
    let (message, help) = if code == Code::KvHeadsTp {
        (
            format!(
                "tp({value}) and the {n} key/value heads of {}{preset} fit neither way",
                and_list(&names)
            ),
            "tp must divide the key/value heads (each rank holds whole heads) or be a multiple of them (heads are replicated)".to_string(),
        )
    } else {
        (
            format!(
                "{name}({value}) does not divide the {n} {what_n} of {}{preset}",
                and_list(&names)
            ),
            format!(
                "choose a {name} degree that divides {n}: {}",
                divisors(n, 16)
            ),
        )
    };
    let mut d = Diagnostic::new(code, message, first.origin.file, first.origin.span)
        .primary_label(format!("{name}({value})"));
    let mut arch_labels: Vec<Origin> = Vec::new();
    for m in &models {
        if !arch_labels.contains(&m.arch_origin) {
            arch_labels.push(m.arch_origin);
            d = d.label(
                m.arch_origin.file,
                m.arch_origin.span,
                format!("{n} {what_n}"),
            );
        }
    }
    for p in &places[1..] {
        if let Some(f) = degree(&p.layout, code) {
            d = d.label(
                f.origin.file,
                f.origin.span,
                format!("{name}({value}) again"),
            );
        }
    }
    if code == Code::HeadsTp {
        for note in tp_also(&models, value) {
            d = d.note(note);
        }
    }
    if places.len() > 1 {
        d = d.note(format!(
            "the same degree is written on {} `place` lines; each needs the fix",
            places.len()
        ));
    }
    if matches!(code, Code::HeadsTp | Code::LayersPp)
        && let Some((message, edits)) = degree_fix(program, &places, code)
    {
        d = d.fix(message, edits);
    }
    d.help(help)
}

/// What else a tp degree that does not divide the heads does not fit, one note each (E0504 and
/// E0506 are not reported beside E0503 for the same degree).
fn tp_also(models: &[&Model], tp: u64) -> Vec<String> {
    // The models of each (key/value heads, vocabulary), in order.
    let mut groups: Vec<((u64, u64), Vec<String>)> = Vec::new();
    for m in models {
        let Some(arch) = &m.arch else { continue };
        let key = (arch.kv_heads, arch.vocab);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, names)) => names.push(format!("`{}`", m.name)),
            None => groups.push((key, vec![format!("`{}`", m.name)])),
        }
    }
    let mut notes = Vec::new();
    for ((kv_heads, vocab), names) in groups {
        let names = and_list(&names);
        if !kv_heads.is_multiple_of(tp) && !tp.is_multiple_of(kv_heads) {
            notes.push(format!(
                "tp({tp}) and the {kv_heads} key/value heads of {names} do not fit either (E0504)"
            ));
        }
        if !vocab.is_multiple_of(tp) {
            notes.push(format!(
                "tp({tp}) does not divide the {vocab} vocabulary entries of {names} either (E0506)"
            ));
        }
    }
    notes
}

/// For tp degrees that do not divide the heads: the largest tp that divides the degree and
/// fits the heads, key/value heads and vocabulary, with data parallelism taking up the
/// devices it frees (`tp(8)` on 8 devices of a 28-head model: `dp(2), tp(4)`).
/// For pp degrees that do not divide the layers, the same with the largest pp that divides
/// both (`pp(4)` on 8 devices of a 6-layer model: `dp(2), pp(2)`).
fn degree_fix(program: &Program, places: &[&Placement], code: Code) -> Option<(String, Vec<Edit>)> {
    let mut edits: Vec<Edit> = Vec::new();
    let mut message = String::new();
    for p in places {
        let l = &p.layout;
        // A layout that does not fill its devices either has E0502's fix, which fixes both;
        // this one keeps the product and would leave that error.
        if l.devices() != p.devices.end.saturating_sub(p.devices.start) {
            return None;
        }
        let arch = program.models[p.model].arch.as_ref()?;
        let (tp, name, d, what) = if code == Code::LayersPp {
            let pp = l.pp?;
            let d = *super::divisors_of(super::gcd(pp.value, arch.layers)).last()?;
            (pp, "pp", d, format!("{} layers", arch.layers))
        } else {
            let tp = l.tp?;
            let d = largest_tp(arch, l, tp.value)?;
            (tp, "tp", d, format!("{} heads", arch.heads))
        };
        let t = tp.value;
        if d >= t {
            return None;
        }
        let k = t / d;
        let layout = match l.dp {
            Some(dp) => {
                let dp = dp.value.checked_mul(k)?;
                push_edit(&mut edits, l.dp?.origin, format!("dp({dp})"));
                push_edit(&mut edits, tp.origin, format!("{name}({d})"));
                format!("dp({dp}) and {name}({d})")
            }
            None => {
                push_edit(&mut edits, tp.origin, format!("dp({k}), {name}({d})"));
                format!("dp({k}), {name}({d})")
            }
        };
        if message.is_empty() {
            message = format!("use {layout}: {name}({d}) divides the {what}");
        }
    }
    edits.sort_by_key(|e| (e.file, e.span.start));
    // Two edits of one span, or overlapping ones, would not apply: no fix then.
    let overlap = edits
        .windows(2)
        .any(|w| w[0].file == w[1].file && w[1].span.start < w[0].span.end);
    (!edits.is_empty() && !overlap).then_some((message, edits))
}

/// The largest tp degree that divides `t` and fits the heads, key/value heads, vocabulary and
/// the layout's sp. A fitting degree divides both `t` and the heads: the divisors of their
/// gcd, found in √gcd steps (a degree near 2³¹ must not be searched one by one).
fn largest_tp(arch: &Arch, l: &Layout, t: u64) -> Option<u64> {
    let fits = |d: u64| {
        t.is_multiple_of(d)
            && arch.heads.is_multiple_of(d)
            && (arch.kv_heads.is_multiple_of(d) || d.is_multiple_of(arch.kv_heads))
            && arch.vocab.is_multiple_of(d)
            && l.sp.is_none_or(|sp| {
                d.checked_mul(sp.value)
                    .is_some_and(|ds| arch.heads.is_multiple_of(ds))
            })
    };
    super::divisors_of(super::gcd(t, arch.heads))
        .into_iter()
        .filter(|&d| fits(d))
        .max()
}

/// For a layout whose product is not the device count: the same layout with the data-parallel
/// degree (or, without one, fsdp) taking up what the other factors leave of `devices`; when
/// they do not divide it, tp shrinks to the largest degree that does and still fits the model
/// (`dp(3)` on 2 devices: `dp(2)`; `tp(16)` on 8 devices of a 4-head model: `dp(2), tp(4)`).
/// The edits rewrite the layout's device factors, in place.
fn product_fix(
    program: &Program,
    places: &[&Placement],
    devices: u64,
) -> Option<(String, Vec<Edit>)> {
    let mut edits: Vec<Edit> = Vec::new();
    let mut message = String::new();
    for p in places {
        let l = &p.layout;
        // A layout without factors has nowhere to write one.
        if [l.dp, l.fsdp, l.tp, l.pp].iter().all(Option::is_none) {
            return None;
        }
        let (pp, fsdp) = (l.pp(), l.fsdp());
        let mut tp = l.tp();
        // What dp (or fsdp, in place of a missing dp) must be.
        let rest = |tp: u64, with_fsdp: bool| {
            let others = pp
                .checked_mul(tp)?
                .checked_mul(if with_fsdp { fsdp } else { 1 })?;
            devices.is_multiple_of(others).then(|| devices / others)
        };
        let scale_fsdp = l.dp.is_none() && l.fsdp.is_some();
        let mut k = rest(tp, !scale_fsdp);
        if k.is_none()
            && l.tp.is_some()
            && let Some(arch) = program.models[p.model].arch.as_ref()
        {
            let room = rest(1, !scale_fsdp)?;
            tp = largest_tp(arch, l, super::gcd(tp, room))?;
            k = rest(tp, !scale_fsdp);
        }
        let k = k?;
        let mut written: Vec<String> = Vec::new();
        if let Some(t) = l.tp
            && tp != t.value
        {
            push_edit(&mut edits, t.origin, format!("tp({tp})"));
            written.push(format!("tp({tp})"));
        }
        match (l.dp, l.fsdp) {
            (Some(dp), _) => {
                push_edit(&mut edits, dp.origin, format!("dp({k})"));
                written.insert(0, format!("dp({k})"));
            }
            (None, Some(f)) => {
                push_edit(&mut edits, f.origin, format!("fsdp({k})"));
                written.insert(0, format!("fsdp({k})"));
            }
            (None, None) => {
                // Before the first factor as written.
                let first = [l.tp, l.pp]
                    .iter()
                    .flatten()
                    .map(|f| f.origin)
                    .min_by_key(|o| o.span.start)?;
                written.insert(0, format!("dp({k})"));
                // Written with the first factor's own edit (the shrunk tp), or inserted.
                match edits
                    .iter_mut()
                    .find(|e| e.file == first.file && e.span == first.span)
                {
                    Some(e) => e.text = format!("dp({k}), {}", e.text),
                    None => {
                        let at = first.span.start as usize;
                        push_edit(
                            &mut edits,
                            Origin {
                                file: first.file,
                                span: rlc_diagnostics::Span::new(at, at),
                            },
                            format!("dp({k}), "),
                        );
                    }
                }
            }
        }
        if message.is_empty() {
            message = format!("use {} to fill the {devices} devices", and_list(&written));
        }
    }
    edits.sort_by_key(|e| (e.file, e.span.start));
    // Two edits of one span, or overlapping ones, would not apply: no fix then.
    let overlap = edits
        .windows(2)
        .any(|w| w[0].file == w[1].file && w[1].span.start < w[0].span.end);
    (!edits.is_empty() && !overlap).then_some((message, edits))
}

/// Adds an edit unless one of the same span is there (several places may share one layout).
fn push_edit(edits: &mut Vec<Edit>, origin: Origin, text: String) {
    if !edits
        .iter()
        .any(|e| e.file == origin.file && e.span == origin.span)
    {
        edits.push(Edit {
            file: origin.file,
            span: origin.span,
            text,
        });
    }
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

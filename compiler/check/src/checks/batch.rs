//! Batch arithmetic: every batch splits evenly over the data-parallel ranks of the phase that
//! receives it; minibatches fit in the batch and split into micro-batches.

use super::divisors;
use crate::program::*;
use rlc_diagnostics::{Code, Diagnostic, Edit};

pub fn check(program: &Program, diags: &mut Vec<Diagnostic>) {
    let Some(pipeline) = &program.pipeline else {
        return;
    };
    // One batch that does not split is one mistake however many phases receive it.
    let mut splits: Vec<(Sourced<i64>, Vec<Split>)> = Vec::new();
    for (i, call) in pipeline.calls.iter().enumerate() {
        let model = &program.models[call.model];
        let phase = call.op.phase();
        let name = format!("`{}.{}`", model.name, phase.as_str());
        if let Some(epochs) = call.epochs
            && epochs.value < 1
        {
            diags.push(
                Diagnostic::new(
                    Code::EpochsBelowOne,
                    format!(
                        "{name} runs {} epochs: nothing would be trained",
                        epochs.value
                    ),
                    epochs.origin.file,
                    epochs.origin.span,
                )
                .primary_label("at least 1")
                .help("set `epochs: 1` or more"),
            );
        }
        let Some(batch) = call.batch else { continue };
        // A layout that does not fit its devices is reported by the placement check; its
        // ranks would only repeat that mistake here.
        let placement = program
            .placement_for(call.model, phase)
            .filter(|p| !p.auto && fits(program, p));
        let ranks = placement.map_or(1, |p| p.layout.data_ranks());
        if let Some(p) = placement
            && batch.value % ranks as i64 != 0
        {
            let split = Split {
                call: i,
                placement: p,
                ranks,
            };
            match splits
                .iter_mut()
                .find(|(b, _)| b.value == batch.value && b.origin == batch.origin)
            {
                Some((_, all)) => all.push(split),
                None => splits.push((batch, vec![split])),
            }
            continue;
        }
        let Some(minibatch) = call.minibatch else {
            continue;
        };
        if minibatch.value < 1 || minibatch.value > batch.value {
            diags.push(
                Diagnostic::new(
                    Code::MinibatchTooLarge,
                    format!(
                        "{name} uses minibatches of {} but each step has {} sequences",
                        minibatch.value, batch.value
                    ),
                    minibatch.origin.file,
                    minibatch.origin.span,
                )
                .primary_label(if minibatch.value < 1 {
                    "not positive".to_string()
                } else {
                    "larger than the batch".to_string()
                })
                .label(
                    batch.origin.file,
                    batch.origin.span,
                    format!("{} sequences per step", batch.value),
                )
                .help(format!("use a minibatch between 1 and {}", batch.value))
                .fix_opt(number_fix(
                    minibatch.origin,
                    // The largest that splits over the ranks, or the whole batch.
                    Some(batch.value / ranks as i64 * ranks as i64)
                        .filter(|&m| m >= 1)
                        .unwrap_or(batch.value),
                    "minibatch",
                )),
            );
            continue;
        }
        let Some(p) = placement else { continue };
        if minibatch.value % ranks as i64 != 0 {
            diags.push(
                Diagnostic::new(
                    Code::BatchNotDivisible,
                    format!(
                        "{name}: a minibatch of {} does not split over {ranks} data-parallel ranks",
                        minibatch.value
                    ),
                    minibatch.origin.file,
                    minibatch.origin.span,
                )
                .primary_label(format!("{} sequences", minibatch.value))
                .label(
                    p.origin.file,
                    p.origin.span,
                    format!("{ranks} data-parallel ranks"),
                )
                .help(format!("use a multiple of {ranks}"))
                .fix_opt(number_fix(
                    minibatch.origin,
                    nearest_multiple(minibatch.value, ranks as i64, batch.value),
                    "minibatch",
                )),
            );
            continue;
        }
        let per_rank = minibatch.value as u64 / ranks;
        if let Some(micro) = p.layout.micro {
            if micro.value > per_rank {
                diags.push(
                    Diagnostic::new(
                        Code::ZeroAccumulation,
                        format!("{name}: micro-batches of {} but each rank's share of a minibatch is {per_rank}: zero accumulation steps", micro.value),
                        micro.origin.file,
                        micro.origin.span,
                    )
                    .primary_label(format!("micro({})", micro.value))
                    .label(minibatch.origin.file, minibatch.origin.span, format!("minibatch {} over {ranks} ranks = {per_rank} each", minibatch.value))
                    .help(format!("use micro({per_rank}) or smaller"))
                    .fix(format!("use micro({per_rank})"), vec![Edit { file: micro.origin.file, span: micro.origin.span, text: format!("micro({per_rank})") }]),
                );
            } else if !per_rank.is_multiple_of(micro.value) {
                diags.push(
                    Diagnostic::new(
                        Code::MinibatchMicro,
                        format!("{name}: each rank's {per_rank} sequences do not split into micro-batches of {}", micro.value),
                        micro.origin.file,
                        micro.origin.span,
                    )
                    .primary_label(format!("micro({})", micro.value))
                    .label(minibatch.origin.file, minibatch.origin.span, format!("minibatch {} over {ranks} ranks = {per_rank} each", minibatch.value))
                    .help(format!(
                        "choose a micro-batch that divides each rank's share of {per_rank}: {}",
                        micro_sizes(per_rank)
                    ))
                    .fix_opt(nearest_divisor(per_rank, micro.value).map(|k| {
                        (format!("use micro({k})"), vec![Edit { file: micro.origin.file, span: micro.origin.span, text: format!("micro({k})") }])
                    })),
                );
            }
        }
    }
    for (batch, all) in &splits {
        diags.push(split_error(program, &pipeline.calls, *batch, all));
    }
}

/// A fix that writes `value` in place of the number at `origin` (kept only where the source
/// has a number literal there: see `rlc_check::check`).
fn number_fix(origin: Origin, value: i64, what: &str) -> Option<(String, Vec<Edit>)> {
    (value >= 1 && origin != Origin::default()).then(|| {
        (
            format!("use {what} {value}"),
            vec![Edit {
                file: origin.file,
                span: origin.span,
                text: value.to_string(),
            }],
        )
    })
}

/// The multiple of `step` nearest to `n` between `step` and `max` (the larger on a tie).
fn nearest_multiple(n: i64, step: i64, max: i64) -> i64 {
    let down = n / step * step;
    let up = down.saturating_add(step);
    let fits = |m: i64| m >= step && m <= max;
    match (fits(down), fits(up)) {
        (true, true) if n - down < up - n => down,
        (_, true) => up,
        (true, false) => down,
        (false, false) => 0,
    }
}

/// The divisor of `n` nearest to `k` (the larger on a tie), in √n steps.
fn nearest_divisor(n: u64, k: u64) -> Option<u64> {
    super::divisors_of(n)
        .into_iter()
        .min_by_key(|&d| (d.abs_diff(k), std::cmp::Reverse(d)))
}

/// The micro-batch sizes that divide a rank's share `n`: all of them up to 64, then `n`.
fn micro_sizes(n: u64) -> String {
    if n > 64 {
        format!("{}, …, {n}", divisors(n, 64))
    } else {
        divisors(n, 64)
    }
}

/// A phase that receives a batch its data-parallel ranks do not split.
struct Split<'a> {
    /// Index into the pipeline's calls.
    call: usize,
    placement: &'a Placement,
    ranks: u64,
}

/// Whether a placement's devices lie in its cluster and its layout uses exactly them.
fn fits(program: &Program, p: &Placement) -> bool {
    let total = program.clusters[p.cluster].device_count();
    p.devices.start < p.devices.end
        && p.devices.end <= total
        && p.layout.devices() == p.devices.end - p.devices.start
}

/// One error for a batch that does not split, naming every phase it reaches: the first call
/// is primary, the other calls, the batch's source and each placement are labels.
fn split_error(
    program: &Program,
    calls: &[RoleCall],
    batch: Sourced<i64>,
    all: &[Split],
) -> Diagnostic {
    let phase = |s: &Split| {
        let call = &calls[s.call];
        format!(
            "`{}.{}`",
            program.models[call.model].name,
            call.op.phase().as_str()
        )
    };
    let first = &all[0];
    let first_call = &calls[first.call];
    let n = batch.value;
    let message = if all.len() == 1 {
        format!(
            "{} receives {n} sequences per step, which do not split over its {} data-parallel ranks",
            phase(first),
            first.ranks
        )
    } else {
        let each: Vec<String> = all
            .iter()
            .map(|s| format!("{} ({})", phase(s), s.ranks))
            .collect();
        format!(
            "the {n} sequences of each step do not split over the data-parallel ranks of {}",
            super::placement::and_list(&each)
        )
    };
    let mut d = Diagnostic::new(
        Code::BatchNotDivisible,
        message,
        first_call.origin.file,
        first_call.origin.span,
    )
    .primary_label(format!("{n} sequences"));
    for s in &all[1..] {
        let call = &calls[s.call];
        d = d.label(call.origin.file, call.origin.span, format!("{n} sequences"));
    }
    d = d.label(
        batch.origin.file,
        batch.origin.span,
        "the batch size comes from here",
    );
    // Each placement once, with the phases it serves.
    let mut placements: Vec<(&Placement, u64, Vec<String>)> = Vec::new();
    for s in all {
        match placements
            .iter_mut()
            .find(|(p, _, _)| std::ptr::eq(*p, s.placement))
        {
            Some((_, _, phases)) => phases.push(phase(s)),
            None => placements.push((s.placement, s.ranks, vec![phase(s)])),
        }
    }
    for (p, ranks, phases) in &placements {
        let text = if all.len() == 1 {
            format!("{ranks} data-parallel ranks")
        } else {
            format!(
                "{ranks} data-parallel ranks ({})",
                super::placement::and_list(phases)
            )
        };
        d = d.label(p.origin.file, p.origin.span, text);
    }
    // The smallest batch every phase splits: the least common multiple of their ranks.
    let lcm = all.iter().try_fold(1u64, |l, s| {
        (l / super::gcd(l, s.ranks)).checked_mul(s.ranks)
    });
    let layouts = if placements.len() == 1 {
        "the layout"
    } else {
        "the layouts"
    };
    match lcm {
        Some(lcm) => d
            .help(format!(
                "make prompts × n a multiple of {lcm}, or change {layouts}"
            ))
            .fix_opt(batch_fix(calls, batch, lcm)),
        None => d.help(format!("change {layouts}")),
    }
}

/// For a generated batch that does not split: the factor written where the batch size comes
/// from (`n`, or the prompts' count when `n` is left out) changed to the nearest value that
/// makes prompts × n a multiple of `lcm`.
fn batch_fix(calls: &[RoleCall], batch: Sourced<i64>, lcm: u64) -> Option<(String, Vec<Edit>)> {
    let n = calls
        .iter()
        .filter(|c| c.batch.is_some_and(|b| b.origin == batch.origin))
        .find_map(|c| c.sampling.as_ref())?
        .n;
    let lcm = i64::try_from(lcm).ok()?;
    if n.value < 1 || batch.value % n.value != 0 {
        return None;
    }
    let (written, other, what) = if n.origin == batch.origin {
        (n.value, batch.value / n.value, "n")
    } else {
        (batch.value / n.value, n.value, "the prompt count")
    };
    // written × other is a multiple of lcm when written is a multiple of this step.
    let step = lcm / super::gcd(lcm as u64, other as u64) as i64;
    let value = nearest_multiple(written, step, i64::MAX / other.max(1));
    let (message, edits) = number_fix(batch.origin, value, what)?;
    let _ = message;
    Some((
        format!(
            "use {what} {value}: {} sequences split over every phase's ranks",
            value * other
        ),
        edits,
    ))
}

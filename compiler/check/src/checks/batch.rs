//! Batch arithmetic: every batch splits evenly over the data-parallel ranks of the phase that
//! receives it; minibatches fit in the batch and split into micro-batches.

use crate::program::*;
use rlc_diagnostics::{Code, Diagnostic};

pub fn check(program: &Program, diags: &mut Vec<Diagnostic>) {
    let Some(pipeline) = &program.pipeline else {
        return;
    };
    for call in &pipeline.calls {
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
        let placement = program.placement_for(call.model, phase).filter(|p| !p.auto);
        let ranks = placement.map_or(1, |p| p.layout.data_ranks());
        if let Some(p) = placement
            && batch.value % ranks as i64 != 0
        {
            diags.push(
                Diagnostic::new(
                    Code::BatchNotDivisible,
                    format!("{name} receives {} sequences per step, which do not split over its {ranks} data-parallel ranks", batch.value),
                    call.origin.file,
                    call.origin.span,
                )
                .primary_label(format!("{} sequences", batch.value))
                .label(batch.origin.file, batch.origin.span, "the batch size comes from here")
                .label(p.origin.file, p.origin.span, format!("{ranks} data-parallel ranks"))
                .help(format!("make prompts × n a multiple of {ranks}, or change the layout")),
            );
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
                .help(format!("use a minibatch between 1 and {}", batch.value)),
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
                .help(format!("use a multiple of {ranks}")),
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
                    .help(format!("use micro({per_rank}) or smaller")),
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
                    .help("choose a micro-batch that divides each rank's share"),
                );
            }
        }
    }
}

//! The 1F1B order of one stage's forwards and backwards, as a pure function.

/// One step of a stage's schedule, on micro-batch `i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Forward(usize),
    Backward(usize),
}

/// Stage `stage` of `stages` over `micro` micro-batches: `min(stages − stage − 1, micro)`
/// warm-up forwards, then one forward and one backward in turn, then the remaining backwards.
/// The last stage alternates from the start; stage `s` holds at most `stages − s` micro-batches'
/// activations, where running all forwards first would hold `micro`.
pub fn one_f_one_b(stages: usize, stage: usize, micro: usize) -> Vec<Op> {
    let warm_up = stages.saturating_sub(stage + 1).min(micro);
    let mut ops: Vec<Op> = (0..warm_up).map(Op::Forward).collect();
    for i in warm_up..micro {
        ops.push(Op::Forward(i));
        ops.push(Op::Backward(i - warm_up));
    }
    ops.extend((micro - warm_up..micro).map(Op::Backward));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn position(ops: &[Op], op: Op) -> usize {
        let found: Vec<usize> = (0..ops.len()).filter(|&k| ops[k] == op).collect();
        assert_eq!(found.len(), 1, "{op:?} appears {} times", found.len());
        found[0]
    }

    #[test]
    fn every_micro_batch_runs_forward_then_backward_once_within_the_memory_bound() {
        for stages in 1..=5 {
            for micro in 1..=9 {
                for stage in 0..stages {
                    let ops = one_f_one_b(stages, stage, micro);
                    assert_eq!(ops.len(), 2 * micro);
                    for i in 0..micro {
                        assert!(
                            position(&ops, Op::Forward(i)) < position(&ops, Op::Backward(i)),
                            "{stages} stages, stage {stage}, {micro} micro-batches: {ops:?}"
                        );
                    }
                    let mut in_flight = 0usize;
                    for op in &ops {
                        match op {
                            Op::Forward(_) => in_flight += 1,
                            Op::Backward(_) => in_flight -= 1,
                        }
                        assert!(in_flight <= stages - stage, "{ops:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn warm_up_then_alternation_then_cool_down() {
        use Op::{Backward as B, Forward as F};
        assert_eq!(
            one_f_one_b(4, 0, 6),
            [
                F(0),
                F(1),
                F(2),
                F(3),
                B(0),
                F(4),
                B(1),
                F(5),
                B(2),
                B(3),
                B(4),
                B(5)
            ]
        );
        assert_eq!(one_f_one_b(4, 3, 2), [F(0), B(0), F(1), B(1)]);
        assert_eq!(one_f_one_b(4, 0, 2), [F(0), F(1), B(0), B(1)]);
    }

    /// Runs every stage's schedule with buffered sends: a forward waits for the previous stage's
    /// forward of its micro-batch, a backward for the next stage's backward. All must finish.
    #[test]
    fn the_stages_schedules_never_wait_on_each_other_in_a_cycle() {
        for stages in 1..=5 {
            for micro in 1..=9 {
                let schedules: Vec<Vec<Op>> =
                    (0..stages).map(|s| one_f_one_b(stages, s, micro)).collect();
                let mut next = vec![0usize; stages];
                let mut done = vec![Vec::<Op>::new(); stages];
                loop {
                    let mut progressed = false;
                    for s in 0..stages {
                        let Some(&op) = schedules[s].get(next[s]) else {
                            continue;
                        };
                        let ready = match op {
                            Op::Forward(i) => s == 0 || done[s - 1].contains(&Op::Forward(i)),
                            Op::Backward(i) => {
                                s + 1 == stages || done[s + 1].contains(&Op::Backward(i))
                            }
                        };
                        if ready {
                            done[s].push(op);
                            next[s] += 1;
                            progressed = true;
                        }
                    }
                    if !progressed {
                        break;
                    }
                }
                assert!(
                    (0..stages).all(|s| next[s] == 2 * micro),
                    "{stages} stages, {micro} micro-batches stall at {next:?}"
                );
            }
        }
    }
}

//! The modules together: data-parallel training on thread ranks (gradients averaged with
//! `all_reduce`) follows the same trajectory as training on the whole batch in one process.

use std::thread;

use rlc_plan::model::LrSchedule;
use rlc_runtime::collectives::{Communicator, Group, ReduceOp};
use rlc_runtime::model::{Heads, ModelConfig, Transformer};
use rlc_runtime::optim::{AdamW, AdamWConfig, Schedule, clip_grad_norm};
use rlc_runtime::rng::Rng;
use tch::{Device, Kind, Tensor, nn};

const BATCH: i64 = 4;
const STEPS: u64 = 3;
const SEED: u64 = 7;
/// Peak learning rate and how far the data-parallel weights may be from one process's. AdamW
/// divides each element's step by that element's own gradient size, so where a gradient nearly
/// cancels over the batch, the rounding of another summation order (two half-batch means
/// averaged) becomes a weight difference proportional to the learning rate. At 1e-2 with a
/// bound of 1e-5, the test failed on every run on one machine (1.005e-5: another CPU, other
/// MKL code paths); at 1e-3 the difference is 1e-6 there and three steps move weights by up to
/// 3e-3, 30× the bound (as `tests/layouts/fixture.rs` reasons for the layouts).
const PEAK_LR: f64 = 1e-3;
const TOLERANCE: f64 = 1e-4;

fn batch_rows(first: i64, count: i64) -> Tensor {
    let config = ModelConfig::tiny();
    let mut rng = Rng::new(99);
    let ids: Vec<i64> = (0..BATCH * 8)
        .map(|_| (rng.next_u64() % config.vocab as u64) as i64)
        .collect();
    Tensor::from_slice(&ids)
        .view([BATCH, 8])
        .narrow(0, first, count)
}

/// Trains on rows `[first, first + count)`; with a communicator, gradients are averaged over
/// ranks before clipping. Returns the final parameters in name order.
fn train(first: i64, count: i64, comm: Option<&Communicator>) -> Vec<(String, Tensor)> {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Transformer::new(&vs.root(), &ModelConfig::tiny(), Heads::POLICY, SEED).unwrap();
    let mut adam = AdamW::for_var_store(&vs, AdamWConfig::default());
    let schedule = Schedule {
        shape: LrSchedule::Cosine,
        peak_lr: PEAK_LR,
        min_lr: PEAK_LR / 10.0,
        warmup_steps: 1,
        total_steps: STEPS,
    };
    let ids = batch_rows(first, count);
    let mask = ids.ones_like();
    for step in 0..STEPS {
        adam.zero_grad();
        // Token mean; every rank holds as many tokens, so the mean of rank means is the global one.
        let loss = -model.logprobs(&ids, &mask).mean(Kind::Float);
        loss.backward();
        if let Some(comm) = comm {
            tch::no_grad(|| {
                for param in adam.params() {
                    let mut grad = param.grad();
                    grad.copy_(&comm.all_reduce(&grad, ReduceOp::Mean).unwrap());
                }
            });
        }
        clip_grad_norm(&adam.params(), 1.0);
        adam.step(schedule.lr(step + 1));
    }
    let mut params: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    params
}

#[test]
fn two_ranks_follow_the_single_process_trajectory() {
    let single = train(0, BATCH, None);
    let ranks: Vec<Vec<(String, Tensor)>> = thread::scope(|scope| {
        let handles: Vec<_> = Group::new(2)
            .into_iter()
            .map(|comm| {
                scope.spawn(move || {
                    let rows = BATCH / 2;
                    train(comm.rank() as i64 * rows, rows, Some(&comm))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let initial = nn::VarStore::new(Device::Cpu);
    Transformer::new(&initial.root(), &ModelConfig::tiny(), Heads::POLICY, SEED).unwrap();
    let initial = initial.variables();
    for (i, (name, expected)) in single.iter().enumerate() {
        let (rank0, rank1) = (&ranks[0][i].1, &ranks[1][i].1);
        assert_eq!(&ranks[0][i].0, name);
        assert!(rank0.equal(rank1), "{name}: ranks diverged");
        let err = (rank0 - expected).abs().max().double_value(&[]);
        assert!(
            err < TOLERANCE,
            "{name}: data-parallel result differs by {err}"
        );
        let moved = (expected - &initial[name]).abs().max().double_value(&[]);
        assert!(moved > TOLERANCE, "{name} did not train");
    }
}

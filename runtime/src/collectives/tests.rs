use std::thread;

use tch::Tensor;

use super::*;
use crate::rng::Rng;

const WORLD_SIZES: [usize; 3] = [1, 2, 4];

/// The input rank `rank` contributes: `[4·2, 3]` so reduce_scatter divides it for every size.
fn input(rank: usize) -> Tensor {
    Rng::new(100 + rank as u64).normal_tensor(&[8, 3], 1.0)
}

fn inputs(world_size: usize) -> Vec<Tensor> {
    (0..world_size).map(input).collect()
}

/// Runs `body` on every rank of a fresh group, one thread per rank; results in rank order.
fn on_ranks<T: Send>(world_size: usize, body: impl Fn(Communicator) -> T + Sync) -> Vec<T> {
    thread::scope(|scope| {
        let handles: Vec<_> = Group::new(world_size)
            .into_iter()
            .map(|comm| scope.spawn(|| body(comm)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank panicked"))
            .collect()
    })
}

fn assert_bit_identical(got: &Tensor, expected: &Tensor, what: &str) {
    assert_eq!(got.size(), expected.size(), "{what}: shape");
    assert!(got.equal(expected), "{what}: values differ");
}

#[test]
fn all_reduce_matches_the_sequential_fold() {
    for world_size in WORLD_SIZES {
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            let expected = reduce_in_order(&inputs(world_size), op);
            let results = on_ranks(world_size, |comm| {
                comm.all_reduce(&input(comm.rank()), op).unwrap()
            });
            for (rank, got) in results.iter().enumerate() {
                assert_bit_identical(
                    got,
                    &expected,
                    &format!("{op:?} on rank {rank} of {world_size}"),
                );
            }
        }
    }
    // The fold itself: a sum of [1, 2, 4] · x is 7 · x, and the mean divides by the count.
    let x = Tensor::from_slice(&[1.0f32, -2.0]);
    let scaled = [&x * 1.0, &x * 2.0, &x * 4.0];
    assert_eq!(
        Vec::<f32>::try_from(reduce_in_order(&scaled, ReduceOp::Sum)).unwrap(),
        [7.0, -14.0]
    );
    assert_eq!(
        Vec::<f32>::try_from(reduce_in_order(&scaled, ReduceOp::Max)).unwrap(),
        [4.0, -2.0]
    );
    let mean = Vec::<f32>::try_from(reduce_in_order(&scaled, ReduceOp::Mean)).unwrap();
    assert!((mean[0] - 7.0 / 3.0).abs() < 1e-6);
}

#[test]
fn all_gather_and_gather_return_every_input_in_rank_order() {
    for world_size in WORLD_SIZES {
        let expected = inputs(world_size);
        let gathered = on_ranks(world_size, |comm| {
            comm.all_gather(&input(comm.rank())).unwrap()
        });
        let root = world_size - 1;
        let at_root = on_ranks(world_size, |comm| {
            comm.gather(&input(comm.rank()), root).unwrap()
        });
        for rank in 0..world_size {
            assert_eq!(gathered[rank].len(), world_size);
            for (i, t) in gathered[rank].iter().enumerate() {
                assert_bit_identical(t, &expected[i], &format!("all_gather[{i}] on rank {rank}"));
            }
            assert_eq!(at_root[rank].is_some(), rank == root);
        }
        for (i, t) in at_root[root].as_ref().unwrap().iter().enumerate() {
            assert_bit_identical(t, &expected[i], &format!("gather[{i}]"));
        }
    }
}

#[test]
fn reduce_scatter_gives_each_rank_its_rows_of_the_reduction() {
    for world_size in WORLD_SIZES {
        for op in [ReduceOp::Sum, ReduceOp::Mean] {
            let full = reduce_in_order(&inputs(world_size), op);
            let rows = 8 / world_size as i64;
            let results = on_ranks(world_size, |comm| {
                comm.reduce_scatter(&input(comm.rank()), op).unwrap()
            });
            for (rank, got) in results.iter().enumerate() {
                let expected = full.narrow(0, rank as i64 * rows, rows);
                assert_bit_identical(
                    got,
                    &expected,
                    &format!("{op:?} rank {rank} of {world_size}"),
                );
            }
        }
    }
    let odd = on_ranks(3, |comm| {
        comm.reduce_scatter(&input(comm.rank()), ReduceOp::Sum)
            .unwrap_err()
    });
    assert!(odd.iter().all(|e| *e
        == CollectiveError::NotDivisible {
            size: 8,
            world_size: 3
        }));
}

#[test]
fn broadcast_and_scatter_deliver_the_roots_data() {
    for world_size in WORLD_SIZES {
        let root = world_size / 2;
        let expected = input(root);
        let received = on_ranks(world_size, |comm| {
            let mine = input(comm.rank());
            comm.broadcast(Some(&mine), root).unwrap()
        });
        for (rank, got) in received.iter().enumerate() {
            assert_bit_identical(got, &expected, &format!("broadcast to rank {rank}"));
        }

        let chunks = input(root).chunk(world_size as i64, 0);
        let scattered = on_ranks(world_size, |comm| {
            let mine = (comm.rank() == root).then(|| input(root).chunk(world_size as i64, 0));
            comm.scatter(mine.as_deref(), root).unwrap()
        });
        for (rank, got) in scattered.iter().enumerate() {
            assert_bit_identical(got, &chunks[rank], &format!("scatter to rank {rank}"));
        }
    }
}

#[test]
fn misuse_is_reported_on_every_rank() {
    let missing = on_ranks(2, |comm| comm.broadcast(None, 0).unwrap_err());
    assert!(
        missing
            .iter()
            .all(|e| matches!(e, CollectiveError::MissingRootInput { root: 0, .. }))
    );
    let shapes = on_ranks(2, |comm| {
        let t = Tensor::zeros(
            [comm.rank() as i64 + 1],
            (tch::Kind::Float, tch::Device::Cpu),
        );
        comm.all_reduce(&t, ReduceOp::Sum).unwrap_err()
    });
    assert!(
        shapes
            .iter()
            .all(|e| matches!(e, CollectiveError::ShapeMismatch { rank: 1, .. }))
    );
    let comms = Group::new(2);
    assert_eq!(
        comms[0].gather(&input(0), 2).unwrap_err(),
        CollectiveError::InvalidRoot {
            root: 2,
            world_size: 2
        }
    );
}

#[test]
fn a_departed_rank_fails_the_others_instead_of_hanging() {
    let results = on_ranks(3, |comm| {
        if comm.rank() == 1 {
            drop(comm);
            return Ok(());
        }
        comm.barrier()
    });
    assert_eq!(results[0], Err(CollectiveError::PeerLost));
    assert_eq!(results[2], Err(CollectiveError::PeerLost));
}

#[test]
fn many_rounds_stay_in_step() {
    // Back-to-back collectives must not mix up the deposits of consecutive rounds.
    let sums = on_ranks(4, |comm| {
        (0..50)
            .map(|round| {
                let t = Tensor::from_slice(&[(round * 10 + comm.rank()) as f64]);
                comm.all_reduce(&t, ReduceOp::Sum)
                    .unwrap()
                    .double_value(&[0])
            })
            .collect::<Vec<_>>()
    });
    for rank_sums in &sums {
        for (round, sum) in rank_sums.iter().enumerate() {
            assert_eq!(*sum, (round * 40 + 6) as f64);
        }
    }
}

fn scalar(value: f64) -> Tensor {
    Tensor::from_slice(&[value])
}

#[test]
fn messages_arrive_in_order_per_pair_whatever_order_pairs_are_read() {
    let received = on_ranks(3, |comm| match comm.rank() {
        0 => {
            for i in 0..5 {
                comm.send(&scalar(i as f64), 1).unwrap();
                comm.send(&scalar(100.0 + i as f64), 2).unwrap();
            }
            Vec::new()
        }
        1 => {
            comm.send(&scalar(-1.0), 2).unwrap();
            (0..5)
                .map(|_| comm.recv(0).unwrap().double_value(&[0]))
                .collect()
        }
        _ => {
            // Reads the later sender first: the other pair's messages wait in their own queue.
            let mut got = vec![comm.recv(1).unwrap().double_value(&[0])];
            got.extend((0..5).map(|_| comm.recv(0).unwrap().double_value(&[0])));
            got
        }
    });
    assert_eq!(received[1], [0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(received[2], [-1.0, 100.0, 101.0, 102.0, 103.0, 104.0]);
}

#[test]
fn sends_are_buffered_private_copies() {
    // Rank 0 sends everything before rank 1 receives anything (the barrier would deadlock if a
    // send waited for its receiver), and changes its tensor after each send.
    let received = on_ranks(2, |comm| {
        if comm.rank() == 0 {
            let mut t = Tensor::from_slice(&[1.5f32, -2.0]);
            for _ in 0..8 {
                comm.send(&t, 1).unwrap();
                let _ = t.f_add_scalar_(1.0).unwrap();
            }
            comm.barrier().unwrap();
            Vec::new()
        } else {
            comm.barrier().unwrap();
            (0..8).map(|_| comm.recv(0).unwrap()).collect()
        }
    });
    for (i, got) in received[1].iter().enumerate() {
        let expected = Tensor::from_slice(&[1.5 + i as f32, -2.0 + i as f32]);
        assert_bit_identical(got, &expected, &format!("message {i}"));
    }
}

#[test]
fn a_departed_sender_is_reported_after_its_messages() {
    let results = on_ranks(2, |comm| {
        if comm.rank() == 0 {
            comm.send(&scalar(7.0), 1).unwrap();
            return Vec::new();
        }
        let first = comm.recv(0).map(|t| t.double_value(&[0]));
        let second = comm.recv(0).map(|t| t.double_value(&[0]));
        let reply = comm.send(&scalar(1.0), 0);
        vec![first, second, reply.map(|()| 0.0)]
    });
    assert_eq!(
        results[1],
        [
            Ok(7.0),
            Err(CollectiveError::PeerLost),
            Err(CollectiveError::PeerLost)
        ]
    );
}

#[test]
fn peers_must_be_other_ranks_of_the_group() {
    let comms = Group::new(2);
    for peer in [0, 2] {
        let expected = CollectiveError::InvalidPeer {
            peer,
            rank: 0,
            world_size: 2,
        };
        assert_eq!(comms[0].send(&scalar(0.0), peer), Err(expected.clone()));
        assert_eq!(comms[0].recv(peer).unwrap_err(), expected);
    }
}

/// An environment of `pairs` for [`slurm_without_pmi`].
fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

#[test]
fn several_slurm_tasks_without_pmi_are_refused() {
    let why = slurm_without_pmi(env_of(&[
        ("SLURM_STEP_NUM_TASKS", "2"),
        ("SLURM_PROCID", "1"),
    ]))
    .expect("two tasks without PMI refused");
    assert!(
        why.contains("2 tasks") && why.contains("--mpi=pmix"),
        "{why}"
    );
    // With PMIx (`srun --mpi=pmix`), a single task, outside a Slurm step, or a batch script
    // (no task id): nothing to refuse.
    for env in [
        &[
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_PROCID", "0"),
            ("PMIX_RANK", "0"),
        ][..],
        &[("SLURM_STEP_NUM_TASKS", "1"), ("SLURM_PROCID", "0")],
        &[],
        &[("SLURM_STEP_NUM_TASKS", "2")],
    ] {
        assert_eq!(slurm_without_pmi(env_of(env)), None, "{env:?}");
    }
}

//! The collectives with ranks as processes (MPI, `mpirun` on loopback): every collective gives
//! each process exactly the bits the in-process fold gives, for 2, 3 and 4 processes, on
//! messages small and large, in sub-groups, and point-to-point messages are buffered and ordered.
//! The driver test starts the `#[ignore]`d rank program under `mpirun`.
#![cfg(feature = "mpi")]

mod mpi_job;

use rlc_runtime::collectives::{
    CollectiveError, Communicator, ReduceOp, init_processes, reduce_in_order, split,
};
use tch::{Device, Kind, Tensor};

/// Rank `rank`'s input: `[8, 3]` floats no two ranks share.
fn input(rank: usize) -> Tensor {
    (Tensor::arange(24, (Kind::Float, Device::Cpu)) * 0.731 + rank as f64 * 1.3)
        .sin()
        .view([8, 3])
}

fn assert_bits(got: &Tensor, expected: &Tensor, what: &str) {
    assert_eq!(
        (got.size(), got.kind()),
        (expected.size(), expected.kind()),
        "{what}"
    );
    assert!(got.equal(expected), "{what}: values differ");
}

fn check_group(comm: &Communicator, members: &[usize], what: &str) {
    let inputs: Vec<Tensor> = members.iter().map(|&r| input(r)).collect();
    let me = members[comm.rank()];
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
        let got = comm.all_reduce(&input(me), op).unwrap();
        assert_bits(
            &got,
            &reduce_in_order(&inputs, op),
            &format!("{what} all_reduce {op:?}"),
        );
    }
    let gathered = comm.all_gather(&input(me)).unwrap();
    assert_eq!(gathered.len(), members.len());
    for (got, expected) in gathered.iter().zip(&inputs) {
        assert_bits(got, expected, &format!("{what} all_gather"));
    }
}

#[test]
#[ignore = "one rank of the job the driver test starts under mpirun"]
fn rank_of_a_job() {
    let world = init_processes().unwrap().expect("started by mpirun");
    let (n, me) = (world.size, world.rank);
    let mut all = split(&[(0..n as u32).collect()]).unwrap();
    assert_eq!(all.len(), 1, "this process's communicator only");
    let (rank, comm) = all.pop().unwrap();
    assert_eq!((rank as usize, comm.rank(), comm.world_size()), (me, me, n));
    assert!(comm.is_processes());
    let everyone: Vec<usize> = (0..n).collect();
    check_group(&comm, &everyone, "world");

    // Shapes and kinds that differ by rank travel as they are.
    let own = if me % 2 == 0 {
        Tensor::full([me as i64 + 1, 2], me as i64, (Kind::Int64, Device::Cpu))
    } else {
        Tensor::full([me as i64 + 1], 0.5, (Kind::Double, Device::Cpu))
    };
    for (r, got) in comm.all_gather(&own).unwrap().iter().enumerate() {
        let expected_kind = if r % 2 == 0 {
            Kind::Int64
        } else {
            Kind::Double
        };
        assert_eq!((got.size()[0], got.kind()), (r as i64 + 1, expected_kind));
    }

    // reduce_scatter: each rank its 4 rows of the fold.
    let tall = |r: usize| Tensor::cat(&[input(r), input(r + 7)], 0).narrow(0, 0, 4 * n as i64);
    let full = reduce_in_order(
        &everyone.iter().map(|&r| tall(r)).collect::<Vec<_>>(),
        ReduceOp::Sum,
    );
    let mine = comm.reduce_scatter(&tall(me), ReduceOp::Sum).unwrap();
    assert_bits(&mine, &full.narrow(0, 4 * me as i64, 4), "reduce_scatter");

    // Large messages (12 MB): past Open MPI's eager limit.
    let big = |r: usize| {
        (Tensor::arange(3_000_000, (Kind::Float, Device::Cpu)) * (0.001 * (r + 1) as f64)).cos()
    };
    let summed = comm.all_reduce(&big(me), ReduceOp::Sum).unwrap();
    let expected = reduce_in_order(
        &everyone.iter().map(|&r| big(r)).collect::<Vec<_>>(),
        ReduceOp::Sum,
    );
    assert_bits(&summed, &expected, "large all_reduce");
    let root = n - 1;
    let from_root = comm
        .broadcast((me == root).then(|| big(root)).as_ref(), root)
        .unwrap();
    assert_bits(&from_root, &big(root), "large broadcast");

    // scatter and gather.
    let chunks: Vec<Tensor> = (0..n).map(|r| input(r + 10)).collect();
    let got = comm
        .scatter((me == 0).then_some(chunks.as_slice()), 0)
        .unwrap();
    assert_bits(&got, &chunks[me], "scatter");
    let at_root = comm.gather(&input(me), root).unwrap();
    assert_eq!(at_root.is_some(), me == root);
    if let Some(all) = at_root {
        for (r, t) in all.iter().enumerate() {
            assert_bits(t, &input(r), "gather");
        }
    }

    // Misuse fails on every rank, the same way.
    let bad = Tensor::zeros([me as i64 + 1], (Kind::Float, Device::Cpu));
    match comm.all_reduce(&bad, ReduceOp::Sum) {
        Err(CollectiveError::ShapeMismatch { rank: 1, .. }) => {}
        other => panic!("a shape mismatch, not {other:?}"),
    }
    comm.barrier().unwrap();

    // Point-to-point around the ring: every rank sends all its messages (one large) before
    // receiving any, which only works if sends are buffered; each pair's order is kept.
    let next = (me + 1) % n;
    let previous = (me + n - 1) % n;
    for i in 0..5 {
        let message = if i == 2 {
            big(me)
        } else {
            Tensor::from_slice(&[(me * 100 + i) as f32])
        };
        comm.send(&message, next).unwrap();
    }
    for i in 0..5 {
        let got = comm.recv(previous).unwrap();
        if i == 2 {
            assert_bits(&got, &big(previous), "large message");
        } else {
            assert_eq!(
                got.double_value(&[0]),
                (previous * 100 + i) as f64,
                "message {i}"
            );
        }
    }

    // Sub-groups: even and odd ranks, each in its own group order.
    let evens: Vec<u32> = (0..n as u32).filter(|r| r % 2 == 0).collect();
    let odds: Vec<u32> = (0..n as u32).filter(|r| r % 2 == 1).collect();
    let mut mine = split(&[evens.clone(), odds.clone()]).unwrap();
    let (_, sub) = mine.pop().expect("every rank is in one group");
    let members: Vec<usize> = if me % 2 == 0 { &evens } else { &odds }
        .iter()
        .map(|&r| r as usize)
        .collect();
    assert_eq!(sub.world_size(), members.len());
    check_group(&sub, &members, "sub-group");
    // A group that leaves this rank out gives it no communicator.
    assert!(split(&[vec![0]]).unwrap().len() == usize::from(me == 0));
    eprintln!("rank {me} of {n}: every collective matched the in-process fold");
}

#[test]
fn collectives_as_processes_equal_the_in_process_fold() {
    for n in [2, 3, 4] {
        let (passed, text) = mpi_job::run_as_processes(n, "rank_of_a_job");
        assert!(passed, "{n} processes: {text}");
        let matched = text
            .matches("every collective matched the in-process fold")
            .count();
        assert_eq!(matched, n, "{n} processes: {text}");
    }
}

#[test]
#[ignore = "one rank of the job the driver test starts under mpirun"]
fn rank_reports_who_shares_its_cpus() {
    let world = init_processes().unwrap().expect("started by mpirun");
    eprintln!(
        "rank {}: {} processes here, {} on its CPUs",
        world.rank, world.local_size, world.cpu_sharers
    );
}

/// Each process's count of processes on its CPUs, from the rank program's lines.
fn sharers(text: &str) -> Vec<usize> {
    text.lines()
        .filter_map(|l| l.split(" processes here, ").nth(1))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

/// How many threads each rank's libtorch gets comes from this count: unbound processes share
/// the machine's CPUs, processes bound each to CPUs of their own do not.
#[test]
fn processes_bound_to_their_own_cpus_share_none() {
    let (passed, text) = mpi_job::run_as_processes_with(
        2,
        &["--bind-to", "none"],
        "rank_reports_who_shares_its_cpus",
    );
    assert!(passed, "{text}");
    assert_eq!(sharers(&text), [2, 2], "{text}");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        eprintln!("one CPU here: binding two processes to CPUs of their own is not possible");
        return;
    }
    // Hardware threads, not cores: two CPUs may be one core's two threads.
    let (passed, text) = mpi_job::run_as_processes_with(
        2,
        &["--bind-to", "hwthread"],
        "rank_reports_who_shares_its_cpus",
    );
    assert!(passed, "{text}");
    assert_eq!(sharers(&text), [1, 1], "{text}");
}

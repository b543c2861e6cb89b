//! Collectives of CUDA tensors between processes through NCCL (`Communicator::use_nccl`): where
//! every process has a GPU of its own and NCCL's library, all-reduce, reduce-scatter, all-gather
//! and broadcast of CUDA tensors go through NCCL and give each process the host path's bits
//! (one or two processes: a sum of two is the same either way); what NCCL does not take (CPU
//! tensors, booleans to reduce, shapes that differ) takes the host path. Where NCCL cannot be
//! used (no GPU, no NCCL library, two processes on one GPU), `use_nccl` says why once per
//! process on stderr and every collective gives the host path's result.
//!
//! The driver test starts the `#[ignore]`d rank program under `mpirun`: without a GPU (this
//! project's CI) as 2 processes on the CPU, the "no NCCL" path; with one GPU as 1 process
//! (NCCL) and 2 (sharing the GPU: the host path); with two or more as 1 and 2 processes (NCCL).
//! It skips, saying so, without `mpirun` or a GPU, unless `RLC_REQUIRE_GPU` is set
//! (`scripts/gpu-check.sh`), where a missing GPU, mpirun or NCCL is a failure.
#![cfg(feature = "mpi")]

use std::time::Instant;

mod mpi_job;

use rlc_runtime::collectives::{Communicator, ReduceOp, init_processes, nccl_launches, split};
use rlc_runtime::device::cuda_devices;
use tch::{Device, Kind, Tensor};

/// Rank `rank`'s `[rows, 3]` values of `kind` (no two ranks share them), on `device`.
fn values(rank: usize, rows: i64, kind: Kind, device: Device) -> Tensor {
    let x = (Tensor::arange(rows * 3, (Kind::Float, Device::Cpu)) * 0.731 + rank as f64 * 1.3)
        .sin()
        .view([rows, 3]);
    let x = match kind {
        Kind::Int64 | Kind::Int | Kind::Uint8 => (x * 40.0 + 50.0).to_kind(kind),
        Kind::Bool => x.gt(0.0),
        _ => x.to_kind(kind),
    };
    x.to_device(device)
}

/// Same kind, shape, device and bits.
fn assert_same(got: &Tensor, expected: &Tensor, what: &str) {
    assert_eq!(
        (got.size(), got.kind(), got.device()),
        (expected.size(), expected.kind(), expected.device()),
        "{what}"
    );
    let (got, expected) = (got.to_device(Device::Cpu), expected.to_device(Device::Cpu));
    assert!(got.equal(&expected), "{what}: values differ");
}

/// One rank's checks: `comm` may run collectives through NCCL (`nccl`), `host` never does.
struct Checks<'a> {
    comm: &'a Communicator,
    host: &'a Communicator,
    nccl: bool,
}

impl Checks<'_> {
    /// Runs `f` on both communicators: the same result, through NCCL where `routed` (and NCCL
    /// is used), through host memory where not.
    fn same<T>(&self, what: &str, routed: bool, f: impl Fn(&Communicator) -> T) -> (T, T) {
        let before = nccl_launches();
        let got = f(self.comm);
        assert_eq!(
            nccl_launches() - before,
            usize::from(self.nccl && routed),
            "{what}: NCCL calls"
        );
        let before = nccl_launches();
        let expected = f(self.host);
        assert_eq!(nccl_launches(), before, "{what}: the host path used NCCL");
        (got, expected)
    }

    fn tensor(&self, what: &str, routed: bool, f: impl Fn(&Communicator) -> Tensor) {
        let (got, expected) = self.same(what, routed, f);
        assert_same(&got, &expected, what);
    }

    fn tensors(&self, what: &str, routed: bool, f: impl Fn(&Communicator) -> Vec<Tensor>) {
        let (got, expected) = self.same(what, routed, f);
        assert_eq!(got.len(), expected.len(), "{what}");
        for (g, e) in got.iter().zip(&expected) {
            assert_same(g, e, what);
        }
    }
}

#[test]
#[ignore = "one rank of the job the driver test starts under mpirun"]
fn nccl_rank() {
    let world = init_processes().unwrap().expect("started by mpirun");
    let (n, me) = (world.size, world.rank);
    let gpu = cuda_devices()
        .ok()
        .map(|count| Device::Cuda(world.local_rank % count));
    let everyone: Vec<u32> = (0..n as u32).collect();
    let (_, mut comm) = split(std::slice::from_ref(&everyone))
        .unwrap()
        .pop()
        .unwrap();
    let (_, host) = split(std::slice::from_ref(&everyone))
        .unwrap()
        .pop()
        .unwrap();
    // Without a GPU this asks for one all the same: the "no CUDA" path.
    let nccl = comm
        .use_nccl(gpu.unwrap_or(Device::Cuda(world.local_rank)))
        .unwrap();
    assert_eq!(nccl, comm.uses_nccl());
    assert!(!host.uses_nccl());
    if nccl {
        assert!(gpu.is_some(), "NCCL without a GPU");
    }
    eprintln!(
        "rank {me} of {n}: through NCCL: {}",
        if nccl { "yes" } else { "no" }
    );
    let device = gpu.unwrap_or(Device::Cpu);
    let on_gpu = gpu.is_some();
    let c = Checks {
        comm: &comm,
        host: &host,
        nccl,
    };

    for kind in [
        Kind::Float,
        Kind::Double,
        Kind::Half,
        Kind::BFloat16,
        Kind::Int64,
    ] {
        let floating = !matches!(kind, Kind::Int64);
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            if op == ReduceOp::Mean && !floating {
                continue;
            }
            c.tensor(&format!("all_reduce {kind:?} {op:?}"), on_gpu, |comm| {
                comm.all_reduce(&values(me, 8, kind, device), op).unwrap()
            });
        }
        c.tensor(&format!("reduce_scatter {kind:?}"), on_gpu, |comm| {
            let tall = values(me, 4 * n as i64, kind, device);
            comm.reduce_scatter(&tall, ReduceOp::Sum).unwrap()
        });
        c.tensors(&format!("all_gather {kind:?}"), on_gpu, |comm| {
            comm.all_gather(&values(me, 8, kind, device)).unwrap()
        });
    }
    c.tensor("reduce_scatter Mean", on_gpu, |comm| {
        let tall = values(me, 2 * n as i64, Kind::Float, device);
        comm.reduce_scatter(&tall, ReduceOp::Mean).unwrap()
    });
    // A view that is not contiguous, and booleans (gathered as bytes, reduced on the host).
    c.tensor("all_reduce of a transposed view", on_gpu, |comm| {
        comm.all_reduce(
            &values(me, 8, Kind::Float, device).transpose(0, 1),
            ReduceOp::Sum,
        )
        .unwrap()
    });
    c.tensors("all_gather Bool", on_gpu, |comm| {
        comm.all_gather(&values(me, 5, Kind::Bool, device)).unwrap()
    });
    c.tensor("all_reduce Bool (host)", false, |comm| {
        comm.all_reduce(&values(me, 5, Kind::Bool, device), ReduceOp::Sum)
            .unwrap()
    });
    // Shapes that differ by rank: the host path.
    c.tensors("all_gather of different shapes (host)", false, |comm| {
        comm.all_gather(&values(me, me as i64 + 1, Kind::Float, device))
            .unwrap()
    });
    // CPU tensors stay on the host path.
    c.tensor("all_reduce of CPU tensors (host)", false, |comm| {
        comm.all_reduce(&values(me, 8, Kind::Float, Device::Cpu), ReduceOp::Sum)
            .unwrap()
    });

    // Broadcast: the root's kind and shape first; other ranks get it on the device they pass
    // a tensor on, the CPU if none.
    let root = n - 1;
    for kind in [Kind::Float, Kind::Int64, Kind::Bool] {
        c.tensor(
            &format!("broadcast {kind:?}, nothing passed"),
            on_gpu,
            |comm| {
                let mine = (me == root).then(|| values(root, 6, kind, device));
                comm.broadcast(mine.as_ref(), root).unwrap()
            },
        );
        c.tensor(
            &format!("broadcast {kind:?}, a tensor passed"),
            on_gpu,
            |comm| {
                let mine = values(me, 6, kind, device);
                comm.broadcast(Some(&mine), root).unwrap()
            },
        );
    }
    let big = |r: usize| {
        (Tensor::arange(16 << 20, (Kind::Float, Device::Cpu)) * (0.001 * (r + 1) as f64))
            .cos()
            .to_device(device)
    };
    c.tensor("broadcast of 64 MiB", on_gpu, |comm| {
        comm.broadcast((me == root).then(|| big(root)).as_ref(), root)
            .unwrap()
    });
    c.tensor("all_reduce of 64 MiB", on_gpu, |comm| {
        comm.all_reduce(&big(me), ReduceOp::Sum).unwrap()
    });

    // The all-reduce of 64 MiB both ways, timed (figures only; both wait for the result).
    if n > 1 {
        let x = big(me);
        for (name, comm) in [("NCCL", &comm), ("host memory (MPI)", &host)] {
            let _ = comm.all_reduce(&x, ReduceOp::Sum).unwrap().sum(Kind::Float);
            let started = Instant::now();
            for _ in 0..5 {
                let _ = comm
                    .all_reduce(&x, ReduceOp::Sum)
                    .unwrap()
                    .sum(Kind::Float)
                    .double_value(&[]);
            }
            let seconds = started.elapsed().as_secs_f64() / 5.0;
            if me == 0 && (nccl || name != "NCCL") {
                eprintln!(
                    "all_reduce of 64 MiB over {n} processes through {name}: {:.2} ms ({:.1} GB/s)",
                    seconds * 1e3,
                    (4u64 << 24) as f64 / 1e9 / seconds
                );
            }
        }
    }
    comm.barrier().unwrap();
    eprintln!("rank {me} of {n}: every collective matched the host path");
}

#[test]
fn nccl_collectives_equal_the_host_path() {
    let require = std::env::var_os("RLC_REQUIRE_GPU").is_some();
    if std::process::Command::new("mpirun")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(!require, "RLC_REQUIRE_GPU is set and mpirun is missing");
        eprintln!("nccl_collectives_equal_the_host_path: skipped (no mpirun: Open MPI)");
        return;
    }
    // (processes, whether NCCL should carry their CUDA tensors)
    let runs: Vec<(usize, bool)> = match cuda_devices() {
        Ok(gpus) if gpus >= 2 => vec![(1, true), (2, true)],
        Ok(_) => vec![(1, true), (2, false)],
        Err(why) => {
            assert!(
                !require,
                "RLC_REQUIRE_GPU is set and CUDA is not available: {why}"
            );
            eprintln!(
                "nccl_collectives_equal_the_host_path: no GPU ({why}): the path without NCCL only"
            );
            vec![(2, false)]
        }
    };
    for (np, nccl) in runs {
        let (passed, text) = mpi_job::run_as_processes(np, "nccl_rank");
        assert!(passed, "{np} processes: {text}");
        let matched = text
            .matches("every collective matched the host path")
            .count();
        assert_eq!(matched, np, "{np} processes: {text}");
        let through_nccl = text.matches("through NCCL: yes").count();
        if nccl && through_nccl != np {
            assert!(!require, "{np} processes did not use NCCL: {text}");
            eprintln!("warning: {np} processes did not use NCCL:\n{text}");
        } else if !nccl {
            assert_eq!(through_nccl, 0, "{np} processes: {text}");
            // Each process says why, once.
            assert_eq!(
                text.matches("note: NCCL is not used (").count(),
                np,
                "{np} processes: {text}"
            );
        }
        for line in text.lines().filter(|l| l.contains("all_reduce of 64 MiB")) {
            eprintln!("{line}");
        }
    }
}

//! The transport of ranks that are processes, over MPI (the library `mpirun` or Slurm's `srun`
//! started them with): collectives as MPI all-gathers and all-to-alls of encoded tensors
//! ([`super::wire`]), point-to-point messages as MPI sends that never wait for their receiver.
//!
//! MPI is initialised once per process, on request ([`init`]), with every thread allowed to
//! call it, and finalised when the process exits. A rank that dies ends the job through the
//! launcher (`mpirun` kills the other ranks and names the dead one); a rank that fails calls
//! [`abort`] after reporting why.

use std::os::raw::{c_int, c_void};
use std::sync::{Mutex, OnceLock};

use mpi_sys as ffi;
use tch::{Device, Tensor};

use super::{CollectiveError, ProcessWorld, wire};

static WORLD: OnceLock<Result<ProcessWorld, String>> = OnceLock::new();

/// Initialises MPI (once; later calls return the first answer).
pub fn init() -> Result<ProcessWorld, String> {
    WORLD.get_or_init(initialise).clone()
}

/// The job's processes, when [`init`] has connected them.
pub fn world() -> Option<ProcessWorld> {
    WORLD.get().and_then(|w| w.as_ref().ok().copied())
}

fn check(rc: c_int, what: &str) -> Result<(), String> {
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed (MPI error {rc})"))
    }
}

fn initialise() -> Result<ProcessWorld, String> {
    // SAFETY: plain MPI calls on out-parameters owned here; `MPI_Init_thread` runs once
    // (`WORLD` is initialised once) and accepts null argc/argv.
    unsafe {
        let mut provided: c_int = 0;
        check(
            ffi::MPI_Init_thread(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                ffi::RSMPI_THREAD_MULTIPLE,
                &mut provided,
            ),
            "MPI_Init_thread",
        )?;
        if provided < ffi::RSMPI_THREAD_SERIALIZED {
            return Err(format!(
                "the MPI library allows calls from one thread only (thread level {provided}); \
                 rlc needs MPI_THREAD_SERIALIZED or better"
            ));
        }
        libc::atexit(finalize);
        let world = ffi::RSMPI_COMM_WORLD;
        let (rank, size) = rank_and_size(world)?;
        let mut node: ffi::MPI_Comm = ffi::RSMPI_COMM_NULL;
        check(
            ffi::MPI_Comm_split_type(
                world,
                ffi::RSMPI_COMM_TYPE_SHARED,
                rank as c_int,
                ffi::RSMPI_INFO_NULL,
                &mut node,
            ),
            "MPI_Comm_split_type",
        )?;
        let (local_rank, local_size) = rank_and_size(node)?;
        let cpu_sharers = cpu_sharers(node, local_size);
        ffi::MPI_Comm_free(&mut node);
        Ok(ProcessWorld {
            rank,
            size,
            local_rank,
            local_size,
            cpu_sharers: cpu_sharers?,
        })
    }
}

/// This process's CPUs (its affinity mask) as words of bits; `None` when the system will not
/// say.
fn own_cpus() -> Option<[u64; CPU_WORDS]> {
    // SAFETY: `sched_getaffinity` fills the zeroed set owned here, of the size given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        let mut words = [0u64; CPU_WORDS];
        for cpu in 0..CPU_WORDS * 64 {
            if libc::CPU_ISSET(cpu, &set) {
                words[cpu / 64] |= 1 << (cpu % 64);
            }
        }
        Some(words)
    }
}

/// Words of a CPU mask (`cpu_set_t`'s 1024 CPUs).
const CPU_WORDS: usize = 16;

/// How many of the `local_size` processes of `node` (this machine) may run on some CPU this one
/// may run on, itself included: every one when the launcher bound none of them, only itself
/// when it bound each to CPUs of its own (`mpirun`'s binding, Slurm's `--cpus-per-task`).
///
/// # Safety
/// `node` is a live communicator of `local_size` processes, which all call this together.
unsafe fn cpu_sharers(node: ffi::MPI_Comm, local_size: usize) -> Result<usize, String> {
    // A process that cannot read its mask claims every CPU: it counts as sharing with all.
    let mine = own_cpus().unwrap_or([u64::MAX; CPU_WORDS]);
    let mut all = vec![0u64; CPU_WORDS * local_size];
    // SAFETY: CPU_WORDS words sent by each of `local_size` processes into a buffer of that many.
    check(
        unsafe {
            ffi::MPI_Allgather(
                mine.as_ptr() as *const c_void,
                CPU_WORDS as c_int,
                ffi::RSMPI_UINT64_T,
                all.as_mut_ptr() as *mut c_void,
                CPU_WORDS as c_int,
                ffi::RSMPI_UINT64_T,
                node,
            )
        },
        "MPI_Allgather",
    )?;
    Ok(all
        .chunks(CPU_WORDS)
        .filter(|theirs| theirs.iter().zip(&mine).any(|(a, b)| a & b != 0))
        .count()
        .max(1))
}

/// One of the constants MPI's library defines (handles and numbers it never changes).
fn constant<T: Copy>(value: *const T) -> T {
    // SAFETY: the pointer is to an initialised, immutable static of the MPI library.
    unsafe { *value }
}

/// # Safety
/// `comm` is a valid communicator.
unsafe fn rank_and_size(comm: ffi::MPI_Comm) -> Result<(usize, usize), String> {
    let (mut rank, mut size) = (0, 0);
    // SAFETY: out-parameters owned here; the caller vouches for `comm`.
    unsafe {
        check(ffi::MPI_Comm_rank(comm, &mut rank), "MPI_Comm_rank")?;
        check(ffi::MPI_Comm_size(comm, &mut size), "MPI_Comm_size")?;
    }
    Ok((rank as usize, size as usize))
}

extern "C" fn finalize() {
    // SAFETY: MPI was initialised (this is registered after `MPI_Init_thread`); finalising
    // twice is avoided by asking first.
    unsafe {
        let mut done = 0;
        ffi::MPI_Finalized(&mut done);
        if done == 0 {
            ffi::MPI_Finalize();
        }
    }
}

/// Ends every process of the job with `code` (after this one reported why).
pub fn abort(code: i32) -> ! {
    // SAFETY: MPI is initialised whenever a process transport exists; `MPI_Abort` does not return.
    unsafe {
        ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code);
    }
    std::process::exit(code)
}

/// This process's communicator in the group (of global ranks, in group order) that holds its
/// rank, with its position and the group's size; every process of the job calls this with the
/// same partition (MPI splits the world collectively). `None` where no group holds this rank.
pub(crate) fn split(groups: &[Vec<u32>]) -> Result<Option<(ProcessComm, usize, usize)>, String> {
    let world = world().ok_or("MPI is not initialised")?;
    let mine = groups.iter().enumerate().find_map(|(color, group)| {
        group
            .iter()
            .position(|&r| r as usize == world.rank)
            .map(|at| (color, at, group.len()))
    });
    let (color, key) = match mine {
        Some((color, at, _)) => (color as c_int, at as c_int),
        None => (constant(&raw const ffi::RSMPI_UNDEFINED), 0),
    };
    let mut comm: ffi::MPI_Comm = constant(&raw const ffi::RSMPI_COMM_NULL);
    // SAFETY: MPI is initialised; `comm` is an out-parameter owned here.
    check(
        unsafe { ffi::MPI_Comm_split(ffi::RSMPI_COMM_WORLD, color, key, &mut comm) },
        "MPI_Comm_split",
    )?;
    Ok(mine.map(|(_, at, len)| {
        (
            ProcessComm {
                comm,
                pending: Mutex::new(Vec::new()),
            },
            at,
            len,
        )
    }))
}

/// A send in flight: its buffer must live until MPI is done with it.
struct PendingSend {
    buffer: Vec<u64>,
    request: ffi::MPI_Request,
}

/// One rank's MPI communicator of its group.
pub(crate) struct ProcessComm {
    comm: ffi::MPI_Comm,
    pending: Mutex<Vec<PendingSend>>,
}

// SAFETY: MPI handles are plain identifiers, valid from any thread of a process initialised
// with MPI_THREAD_SERIALIZED or better; a rank's communicator is used by its one rank thread.
unsafe impl Send for ProcessComm {}
unsafe impl Sync for ProcessComm {}

const TAG: c_int = 0;

fn count(n: usize, what: &str) -> Result<c_int, CollectiveError> {
    c_int::try_from(n).map_err(|_| {
        CollectiveError::Unsupported(format!(
            "{what} of {n} words: MPI counts are 32-bit (messages up to 16 GiB)"
        ))
    })
}

fn mpi_error(rc: c_int, what: &str) -> Result<(), CollectiveError> {
    check(rc, what).map_err(CollectiveError::Transport)
}

impl ProcessComm {
    fn size(&self) -> usize {
        // SAFETY: `comm` is this process's valid communicator.
        unsafe { rank_and_size(self.comm) }.map_or(1, |(_, size)| size)
    }

    /// Every rank's `contribution` in rank order, on `device`.
    pub(crate) fn exchange(
        &self,
        contribution: &[Tensor],
        device: Device,
    ) -> Result<Vec<Vec<Tensor>>, CollectiveError> {
        let mut words = Vec::new();
        wire::encode(contribution, &mut words)?;
        let size = self.size();
        let mine = [words.len() as u64];
        let mut lengths = vec![0u64; size];
        // SAFETY: one u64 sent, `size` received into a buffer of `size`.
        mpi_error(
            unsafe {
                ffi::MPI_Allgather(
                    mine.as_ptr() as *const c_void,
                    1,
                    ffi::RSMPI_UINT64_T,
                    lengths.as_mut_ptr() as *mut c_void,
                    1,
                    ffi::RSMPI_UINT64_T,
                    self.comm,
                )
            },
            "MPI_Allgather",
        )?;
        let (counts, displs, total) = layout(&lengths)?;
        let mut all = vec![0u64; total];
        // SAFETY: the receive buffer holds the sum of every rank's count at their displacements.
        mpi_error(
            unsafe {
                ffi::MPI_Allgatherv(
                    words.as_ptr() as *const c_void,
                    count(words.len(), "a contribution")?,
                    ffi::RSMPI_UINT64_T,
                    all.as_mut_ptr() as *mut c_void,
                    counts.as_ptr(),
                    displs.as_ptr(),
                    ffi::RSMPI_UINT64_T,
                    self.comm,
                )
            },
            "MPI_Allgatherv",
        )?;
        (0..size)
            .map(|r| {
                let at = displs[r] as usize;
                let tensors = wire::decode(&all[at..at + counts[r] as usize])?;
                Ok(tensors.into_iter().map(|t| t.to_device(device)).collect())
            })
            .collect()
    }

    /// Sends `parts[r]` to rank `r`; what each rank sent this one, in rank order, on `device`.
    pub(crate) fn all_to_all(
        &self,
        parts: &[Tensor],
        device: Device,
    ) -> Result<Vec<Tensor>, CollectiveError> {
        let mut words = Vec::new();
        let mut send_lengths = Vec::with_capacity(parts.len());
        for part in parts {
            let before = words.len();
            wire::encode(std::slice::from_ref(part), &mut words)?;
            send_lengths.push((words.len() - before) as u64);
        }
        let mut recv_lengths = vec![0u64; parts.len()];
        // SAFETY: one u64 to and from every rank, buffers of the group's size.
        mpi_error(
            unsafe {
                ffi::MPI_Alltoall(
                    send_lengths.as_ptr() as *const c_void,
                    1,
                    ffi::RSMPI_UINT64_T,
                    recv_lengths.as_mut_ptr() as *mut c_void,
                    1,
                    ffi::RSMPI_UINT64_T,
                    self.comm,
                )
            },
            "MPI_Alltoall",
        )?;
        let (send_counts, send_displs, _) = layout(&send_lengths)?;
        let (recv_counts, recv_displs, total) = layout(&recv_lengths)?;
        let mut received = vec![0u64; total];
        // SAFETY: counts and displacements describe exactly the two buffers.
        mpi_error(
            unsafe {
                ffi::MPI_Alltoallv(
                    words.as_ptr() as *const c_void,
                    send_counts.as_ptr(),
                    send_displs.as_ptr(),
                    ffi::RSMPI_UINT64_T,
                    received.as_mut_ptr() as *mut c_void,
                    recv_counts.as_ptr(),
                    recv_displs.as_ptr(),
                    ffi::RSMPI_UINT64_T,
                    self.comm,
                )
            },
            "MPI_Alltoallv",
        )?;
        (0..parts.len())
            .map(|r| {
                let at = recv_displs[r] as usize;
                let mut one = wire::decode(&received[at..at + recv_counts[r] as usize])?;
                match one.pop() {
                    Some(t) if one.is_empty() => Ok(t.to_device(device)),
                    _ => Err(CollectiveError::Transport(
                        "an all-to-all part was not one tensor".into(),
                    )),
                }
            })
            .collect()
    }

    /// Starts sending `tensor` to `dst` and returns; the buffer lives until the send completes.
    pub(crate) fn send(&self, tensor: &Tensor, dst: usize) -> Result<(), CollectiveError> {
        let mut buffer = Vec::new();
        wire::encode(std::slice::from_ref(tensor), &mut buffer)?;
        let mut request: ffi::MPI_Request = constant(&raw const ffi::RSMPI_REQUEST_NULL);
        // SAFETY: `buffer` is moved into `pending` below without reallocating (its heap block
        // stays put) and kept there until MPI reports the send complete.
        mpi_error(
            unsafe {
                ffi::MPI_Isend(
                    buffer.as_ptr() as *const c_void,
                    count(buffer.len(), "a message")?,
                    ffi::RSMPI_UINT64_T,
                    dst as c_int,
                    TAG,
                    self.comm,
                    &mut request,
                )
            },
            "MPI_Isend",
        )?;
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.push(PendingSend { buffer, request });
        pending.retain_mut(|send| !completed(send));
        Ok(())
    }

    /// The oldest message from `src` not yet received, waiting for one.
    pub(crate) fn recv(&self, src: usize) -> Result<Tensor, CollectiveError> {
        let mut message: ffi::MPI_Message = constant(&raw const ffi::RSMPI_MESSAGE_NULL);
        // SAFETY: MPI_Status is plain data; the out-parameters are owned here and the receive
        // buffer is sized from the matched message's count.
        unsafe {
            let mut status: ffi::MPI_Status = std::mem::zeroed();
            mpi_error(
                ffi::MPI_Mprobe(src as c_int, TAG, self.comm, &mut message, &mut status),
                "MPI_Mprobe",
            )?;
            let mut words: c_int = 0;
            mpi_error(
                ffi::MPI_Get_count(&status, ffi::RSMPI_UINT64_T, &mut words),
                "MPI_Get_count",
            )?;
            let mut buffer = vec![0u64; words.max(0) as usize];
            mpi_error(
                ffi::MPI_Mrecv(
                    buffer.as_mut_ptr() as *mut c_void,
                    words,
                    ffi::RSMPI_UINT64_T,
                    &mut message,
                    ffi::RSMPI_STATUS_IGNORE,
                ),
                "MPI_Mrecv",
            )?;
            let mut one = wire::decode(&buffer)?;
            match one.pop() {
                Some(t) if one.is_empty() => Ok(t),
                _ => Err(CollectiveError::Transport(
                    "a message was not one tensor".into(),
                )),
            }
        }
    }
}

/// Whether MPI is done with `send` (its buffer may go).
fn completed(send: &mut PendingSend) -> bool {
    let mut flag: c_int = 0;
    // SAFETY: `request` is an active send request of this process.
    unsafe { ffi::MPI_Test(&mut send.request, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
    flag != 0
}

/// Counts and displacements (in words) of consecutive blocks of `lengths`, and their total.
fn layout(lengths: &[u64]) -> Result<(Vec<c_int>, Vec<c_int>, usize), CollectiveError> {
    let mut counts = Vec::with_capacity(lengths.len());
    let mut displs = Vec::with_capacity(lengths.len());
    let mut total = 0usize;
    for &len in lengths {
        displs.push(count(total, "an exchange")?);
        counts.push(count(len as usize, "a contribution")?);
        total += len as usize;
    }
    count(total, "an exchange")?;
    Ok((counts, displs, total))
}

impl Drop for ProcessComm {
    fn drop(&mut self) {
        let pending = std::mem::take(self.pending.get_mut().unwrap_or_else(|p| p.into_inner()));
        for mut send in pending {
            if !completed(&mut send) {
                // Nobody may wait here (the receiver may have failed): MPI finishes the send on
                // its own, and the buffer it still reads is left alive.
                // SAFETY: an active request; freeing it does not cancel the send.
                unsafe { ffi::MPI_Request_free(&mut send.request) };
                std::mem::forget(send.buffer);
            }
        }
        // SAFETY: a valid communicator of this process, not used after this. Skipped once MPI
        // is finalised (handles dropped at exit).
        unsafe {
            let mut done = 0;
            ffi::MPI_Finalized(&mut done);
            if done == 0 {
                ffi::MPI_Comm_free(&mut self.comm);
            }
        }
    }
}

/// `mpirun -np <np>` on this machine as the tests and scripts start jobs: more processes than
/// cores allowed, and (when running as root, as in containers) Open MPI's root check confirmed.
pub fn local_mpirun(np: usize) -> std::process::Command {
    let mut command = std::process::Command::new("mpirun");
    command.args(["--oversubscribe", "-np", &np.to_string()]);
    // Containers often forbid the cross-memory attach Open MPI's shared-memory transport uses.
    command.env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        command.env("OMPI_ALLOW_RUN_AS_ROOT", "1");
        command.env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    command
}

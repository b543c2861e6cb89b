//! NCCL for CUDA tensors between processes. A group of processes whose ranks each hold a GPU of
//! their own gets an NCCL communicator beside its MPI one ([`connect`], through
//! [`Communicator::use_nccl`]); all-reduce, reduce-scatter, all-gather of same-shape tensors and
//! broadcast of CUDA tensors then run on the tensors' memory instead of through host memory.
//! Everything else stays on MPI: CPU tensors, tensors whose shapes differ between ranks,
//! scatter, gather, and point-to-point messages (NCCL's sends wait for their receiver, and
//! pipeline stages rely on buffered sends).
//!
//! Every routed collective starts with one small MPI exchange of each rank's descriptor of its
//! tensor (usable by NCCL, kind, shape), so all ranks of the group take the same path. NCCL's
//! reductions fold in an order of their own: for two ranks the bits are the host path's (a sum
//! of two is commutative), for more they may differ in the last bits from the rank-order fold;
//! every rank gets the same bits either way.
//!
//! Ordering with libtorch: NCCL's kernels are queued on the device's legacy default stream, the
//! stream libtorch's tensor operations (and the fused CUDA kernels) use, so a collective runs
//! after the work that produced its input, and work on its output runs after it; the host does
//! not wait for it.
//!
//! Loading: NCCL's library is opened here with `dlopen` under its soname `libnccl.so.2` (NVIDIA's
//! packages, PyTorch's `nvidia-nccl` wheel; usually already in the process, loaded by
//! `libtorch_cuda.so`), its functions looked up by name with cudarc's types. cudarc's own loader
//! does not try that name, and panics when the library is missing; here a missing library,
//! symbol, driver or device is an error, which becomes one note on stderr and the MPI path.
//!
//! An NCCL communicator is created once per set of (process, GPU) and kept for the life of the
//! process: groups with the same members (a layout's `dp` and `data` groups, the groups of
//! colocated instances) share one, and none is destroyed (recent NCCL makes that a collective of
//! the node's ranks; the driver frees it at exit). Creating one is a collective of the group:
//! every process creates its groups' companions in the same order (`exec` does). If
//! `ncclCommInitRank` fails on one rank after every rank found NCCL and its GPU, that rank's
//! error ends the job (the others wait in NCCL's bootstrap).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{result as cu, sys as cu_sys};
use cudarc::nccl::sys::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};
use tch::{Device, Kind, Tensor};

use super::communicator::Communicator;
use super::{CollectiveError, ReduceOp, wire};
use crate::dylib::{self, Library, Scope};

/// NCCL's library by the names it is installed under, its soname first.
const LIBRARY: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// `ncclResult_t` read as an int: a newer library may return codes the bindings do not list.
type Status = c_int;
type ReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    ncclRedOp_t,
    ncclComm_t,
    cudaStream_t,
) -> Status;

/// The functions of NCCL's C API used here (signatures of `nccl.h`).
struct Api {
    version: String,
    get_error_string: unsafe extern "C" fn(Status) -> *const c_char,
    get_unique_id: unsafe extern "C" fn(*mut ncclUniqueId) -> Status,
    comm_init_rank: unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> Status,
    all_reduce: ReduceFn,
    reduce_scatter: ReduceFn,
    all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        ncclDataType_t,
        ncclComm_t,
        cudaStream_t,
    ) -> Status,
    broadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        ncclDataType_t,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Status,
}

/// NCCL's library, loaded once per process; why not, when it cannot be.
fn library() -> Result<&'static Api, String> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| load(&LIBRARY))
        .as_ref()
        .map_err(String::clone)
}

/// Opens the first of `names` that loads (never unloaded) and looks up the API.
fn load(names: &[&str]) -> Result<Api, String> {
    let mut failures = Vec::new();
    let mut opened = None;
    for name in names {
        match dylib::open(Path::new(name), Scope::Local) {
            Ok(library) => {
                opened = Some(library);
                break;
            }
            Err(why) => failures.push(why),
        }
    }
    let Some(handle) = opened else {
        return Err(format!(
            "cannot load NCCL's library ({}); PyTorch's CUDA wheels install it \
             (nvidia-nccl-cu12): add site-packages/nvidia/nccl/lib to LD_LIBRARY_PATH",
            failures.first().map_or("no name to try", String::as_str)
        ));
    };
    // SAFETY: each type is the function's signature in nccl.h, with cudarc's types for NCCL's
    // (an enum argument is passed as the C int it is; results are read as ints).
    unsafe {
        let get_version: unsafe extern "C" fn(*mut c_int) -> Status =
            symbol(handle, "ncclGetVersion")?;
        let mut code: c_int = 0;
        let version = if get_version(&mut code) == 0 {
            // NCCL_VERSION_CODE: 1000·major + 100·minor + patch before 2.9, 10000·major after.
            let (major, rest) = if code >= 10000 {
                (code / 10000, code % 10000)
            } else {
                (code / 1000, code % 1000)
            };
            if (major, rest / 100) < (2, 10) {
                return Err(format!(
                    "NCCL {major}.{}.{} is older than 2.10 (bfloat16, the oldest rlc uses)",
                    rest / 100,
                    rest % 100
                ));
            }
            format!("{major}.{}.{}", rest / 100, rest % 100)
        } else {
            "?".into()
        };
        Ok(Api {
            version,
            get_error_string: symbol(handle, "ncclGetErrorString")?,
            get_unique_id: symbol(handle, "ncclGetUniqueId")?,
            comm_init_rank: symbol(handle, "ncclCommInitRank")?,
            all_reduce: symbol(handle, "ncclAllReduce")?,
            reduce_scatter: symbol(handle, "ncclReduceScatter")?,
            all_gather: symbol(handle, "ncclAllGather")?,
            broadcast: symbol(handle, "ncclBroadcast")?,
        })
    }
}

/// The function `name` of NCCL's library.
///
/// # Safety
/// `F` is the function pointer type of `name`'s C signature.
unsafe fn symbol<F: Copy>(handle: Library, name: &str) -> Result<F, String> {
    // SAFETY: as the caller vouches.
    unsafe { dylib::symbol(handle, name) }
        .map_err(|why| format!("NCCL's library has no {name} ({why})"))
}

impl Api {
    fn check(&self, status: Status, what: &str) -> Result<(), String> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static string for any code.
        let text = unsafe {
            let text = (self.get_error_string)(status);
            if text.is_null() {
                "unknown error".into()
            } else {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            }
        };
        Err(format!(
            "{what} failed: {text} (NCCL {} error {status})",
            self.version
        ))
    }
}

/// A rank's GPU as NCCL needs it: the device's primary context (the one libtorch's tensors live
/// in), made current around NCCL's calls, and its UUID (two ranks on one GPU cannot share an
/// NCCL communicator).
struct Gpu {
    ordinal: usize,
    dev: cu_sys::CUdevice,
    ctx: cu_sys::CUcontext,
    uuid: [u8; 16],
}

impl Gpu {
    fn open(ordinal: usize) -> Result<Gpu, String> {
        // SAFETY: only tries to open the driver library by its usual names.
        if !unsafe { cu_sys::is_culib_present() } {
            return Err("the CUDA driver library (libcuda.so.1) could not be loaded".into());
        }
        // cudarc panics when one of the driver's functions is missing: caught here, and every
        // function a collective calls later is called once here.
        let opened = catch_unwind(AssertUnwindSafe(|| -> Result<Gpu, cu::DriverError> {
            cu::init()?;
            let dev = cu::device::get(ordinal as c_int)?;
            let uuid = cu::device::get_uuid(dev)?;
            // SAFETY: `dev` is a device the driver returned.
            let ctx = unsafe { cu::primary_ctx::retain(dev)? };
            let gpu = Gpu {
                ordinal,
                dev,
                ctx,
                uuid: uuid.bytes.map(|b| b as u8),
            };
            let previous = gpu.enter()?;
            gpu.leave(previous);
            Ok(gpu)
        }));
        match opened {
            Ok(Ok(gpu)) => Ok(gpu),
            Ok(Err(e)) => Err(format!("CUDA device {ordinal}: {e}")),
            Err(panic) => Err(format!(
                "the CUDA driver: {}",
                crate::panics::panic_message(&panic)
            )),
        }
    }

    /// Makes the device's context current on this thread; the context that was.
    fn enter(&self) -> Result<Option<cu_sys::CUcontext>, cu::DriverError> {
        let previous = cu::ctx::get_current()?;
        if previous != Some(self.ctx) {
            // SAFETY: a primary context this value retains.
            unsafe { cu::ctx::set_current(self.ctx)? };
        }
        Ok(previous)
    }

    /// Makes `previous` (from [`Gpu::enter`]) current again.
    fn leave(&self, previous: Option<cu_sys::CUcontext>) {
        if previous != Some(self.ctx) {
            // SAFETY: the context that was current (or none), still alive: libtorch holds it.
            let _ = unsafe { cu::ctx::set_current(previous.unwrap_or(std::ptr::null_mut())) };
        }
    }

    /// The UUID as two words of a descriptor.
    fn uuid_words(&self) -> [i64; 2] {
        let (a, b) = self.uuid.split_at(8);
        [
            i64::from_le_bytes(a.try_into().expect("8 bytes")),
            i64::from_le_bytes(b.try_into().expect("8 bytes")),
        ]
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: releases the reference `open` retained.
        let _ = unsafe { cu::primary_ctx::release(self.dev) };
    }
}

/// One rank's NCCL communicator of its group, on its GPU.
pub(crate) struct Nccl {
    api: &'static Api,
    comm: ncclComm_t,
    gpu: Gpu,
    device: Device,
    /// NCCL's calls on a communicator are not thread-safe: one at a time.
    calls: Mutex<()>,
}

// SAFETY: the communicator and the context are handles valid from any thread of the process;
// calls through them are serialised by `calls`.
unsafe impl Send for Nccl {}
unsafe impl Sync for Nccl {}

/// NCCL collectives launched by this process (tests check that a path went through NCCL).
static LAUNCHES: AtomicUsize = AtomicUsize::new(0);

/// How many collectives this process has run through NCCL.
pub fn launches() -> usize {
    LAUNCHES.load(Ordering::Relaxed)
}

impl Nccl {
    /// Queues one NCCL call (`call(comm, stream)`) on the legacy default stream, with the GPU's
    /// context current; returns without waiting for it.
    fn launch(
        &self,
        what: &str,
        call: impl FnOnce(ncclComm_t, cudaStream_t) -> Status,
    ) -> Result<(), CollectiveError> {
        let _one = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let previous = self
            .gpu
            .enter()
            .map_err(|e| CollectiveError::Nccl(format!("{what}: CUDA: {e}")))?;
        let status = call(self.comm, std::ptr::null_mut());
        self.gpu.leave(previous);
        LAUNCHES.fetch_add(1, Ordering::Relaxed);
        self.api.check(status, what).map_err(CollectiveError::Nccl)
    }

    /// This rank's `tensor` as the group compares it before a collective: `[1, kind, dims…]`
    /// where NCCL can take it (a non-empty tensor on this GPU that `carries` accepts), `[0]`
    /// where not.
    fn descriptor(&self, tensor: Option<&Tensor>, carries: impl Fn(&Tensor) -> bool) -> Vec<i64> {
        match tensor {
            Some(t) if t.device() == self.device && t.numel() > 0 && carries(t) => {
                match kind_code(t.kind()) {
                    Some(code) => [1, code].into_iter().chain(t.size()).collect(),
                    None => vec![0],
                }
            }
            _ => vec![0],
        }
    }
}

/// `kind`'s code in a descriptor: its wire code.
fn kind_code(kind: Kind) -> Option<i64> {
    wire::kind_code(kind).map(|c| c as i64)
}

/// NCCL's type for reducing tensors of `kind` with `op`; `None` where the host path reduces
/// them (booleans, 16-bit integers; a mean of integers).
fn reduce_type(kind: Kind, op: ReduceOp) -> Option<ncclDataType_t> {
    use ncclDataType_t::*;
    let floating = matches!(
        kind,
        Kind::Half | Kind::Float | Kind::Double | Kind::BFloat16
    );
    if op == ReduceOp::Mean && !floating {
        return None;
    }
    Some(match kind {
        Kind::Uint8 => ncclUint8,
        Kind::Int8 => ncclInt8,
        Kind::Int => ncclInt32,
        Kind::Int64 => ncclInt64,
        Kind::Half => ncclFloat16,
        Kind::Float => ncclFloat32,
        Kind::Double => ncclFloat64,
        Kind::BFloat16 => ncclBfloat16,
        _ => return None,
    })
}

/// A mean is the sum divided by the group's size, as the host path's fold computes it.
fn red_op(op: ReduceOp) -> ncclRedOp_t {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => ncclRedOp_t::ncclSum,
        ReduceOp::Max => ncclRedOp_t::ncclMax,
        ReduceOp::Min => ncclRedOp_t::ncclMin,
    }
}

/// Every rank's `mine`, in rank order (one small exchange over MPI).
fn exchange_words(comm: &Communicator, mine: &[i64]) -> Result<Vec<Vec<i64>>, CollectiveError> {
    comm.exchange(vec![Tensor::from_slice(mine)], Device::Cpu)?
        .into_iter()
        .map(|from| match from.as_slice() {
            [t] => Vec::<i64>::try_from(t)
                .map_err(|e| CollectiveError::Transport(format!("a descriptor: {e}"))),
            _ => Err(CollectiveError::Transport(
                "a descriptor was not one tensor".into(),
            )),
        })
        .collect()
}

/// Whether every rank gave the same descriptor, one NCCL can take.
fn agreed(all: &[Vec<i64>]) -> bool {
    all[0][0] == 1 && all.iter().all(|d| *d == all[0])
}

/// `tensor` as NCCL reads it: detached and contiguous (a copy where it was not).
fn input(tensor: &Tensor) -> Tensor {
    tensor.detach().contiguous()
}

/// [`Communicator::all_reduce`] through NCCL; `None` where the group takes the host path.
pub(super) fn all_reduce(
    comm: &Communicator,
    nccl: &Nccl,
    tensor: &Tensor,
    op: ReduceOp,
) -> Result<Option<Tensor>, CollectiveError> {
    reduce(comm, nccl, tensor, op, Reduction::All)
}

/// [`Communicator::reduce_scatter`] through NCCL (the first dimension is divisible by the
/// group's size); `None` where the group takes the host path.
pub(super) fn reduce_scatter(
    comm: &Communicator,
    nccl: &Nccl,
    tensor: &Tensor,
    op: ReduceOp,
) -> Result<Option<Tensor>, CollectiveError> {
    reduce(comm, nccl, tensor, op, Reduction::Scatter)
}

/// Where a reduction's result goes: to every rank whole, or each rank its block of rows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    All,
    Scatter,
}

/// An all-reduce or a reduce-scatter through NCCL (the two calls take the same arguments);
/// `None` where the group takes the host path.
fn reduce(
    comm: &Communicator,
    nccl: &Nccl,
    tensor: &Tensor,
    op: ReduceOp,
    reduction: Reduction,
) -> Result<Option<Tensor>, CollectiveError> {
    let mine = nccl.descriptor(Some(tensor), |t| {
        (reduction == Reduction::All || t.dim() >= 1) && reduce_type(t.kind(), op).is_some()
    });
    let all = exchange_words(comm, &mine)?;
    let Some(dtype) = reduce_type(tensor.kind(), op).filter(|_| agreed(&all)) else {
        return Ok(None);
    };
    let input = input(tensor);
    let world = comm.world_size();
    let (mut out, count, name, call) = match reduction {
        Reduction::All => (
            input.empty_like(),
            input.numel(),
            "ncclAllReduce",
            nccl.api.all_reduce,
        ),
        Reduction::Scatter => {
            let mut shape = input.size();
            shape[0] /= world as i64;
            (
                Tensor::empty(shape.as_slice(), (input.kind(), nccl.device)),
                input.numel() / world,
                "ncclReduceScatter",
                nccl.api.reduce_scatter,
            )
        }
    };
    nccl.launch(name, |c, stream| {
        // SAFETY: both buffers are contiguous tensors on the communicator's GPU, the output of
        // `count` elements of `dtype` and the input of as many (all-reduce) or `world` times as
        // many (reduce-scatter), alive until the call returns; later work on them is queued on
        // the same stream, after NCCL's kernel.
        unsafe {
            call(
                input.data_ptr(),
                out.data_ptr(),
                count,
                dtype,
                red_op(op),
                c,
                stream,
            )
        }
    })?;
    if op == ReduceOp::Mean {
        out /= world as f64;
    }
    Ok(Some(out))
}

/// [`Communicator::all_gather`] through NCCL where every rank's tensor has the same kind and
/// shape (as bytes); `None` where the group takes the host path.
pub(super) fn all_gather(
    comm: &Communicator,
    nccl: &Nccl,
    tensor: &Tensor,
) -> Result<Option<Vec<Tensor>>, CollectiveError> {
    let all = exchange_words(comm, &nccl.descriptor(Some(tensor), |_| true))?;
    if !agreed(&all) {
        return Ok(None);
    }
    let input = input(tensor);
    let world = comm.world_size();
    let shape: Vec<i64> = [world as i64].into_iter().chain(input.size()).collect();
    let out = Tensor::empty(shape.as_slice(), (input.kind(), nccl.device));
    let bytes = input.numel() * input.kind().elt_size_in_bytes();
    nccl.launch("ncclAllGather", |c, stream| {
        // SAFETY: the input holds `bytes` bytes, the output `world · bytes`, both contiguous on
        // the communicator's GPU (see reduce for their lifetimes).
        unsafe {
            (nccl.api.all_gather)(
                input.data_ptr(),
                out.data_ptr(),
                bytes,
                ncclDataType_t::ncclUint8,
                c,
                stream,
            )
        }
    })?;
    Ok(Some((0..world as i64).map(|r| out.get(r)).collect()))
}

/// [`Communicator::broadcast`] through NCCL where the root's tensor is on its GPU (its kind and
/// shape go first, in the descriptors); each rank's result is where the MPI path puts it (the
/// device of the tensor it passed, the CPU if none). `None` where the group takes the host path.
pub(super) fn broadcast(
    comm: &Communicator,
    nccl: &Nccl,
    tensor: Option<&Tensor>,
    root: usize,
) -> Result<Option<Tensor>, CollectiveError> {
    let mine = if comm.rank() == root {
        nccl.descriptor(tensor, |_| true)
    } else {
        vec![1]
    };
    let all = exchange_words(comm, &mine)?;
    let from_root = &all[root];
    if from_root[0] != 1 {
        return Ok(None);
    }
    let Some(kind) = wire::kind_of(from_root[1] as usize) else {
        return Ok(None);
    };
    let received = Tensor::empty(&from_root[2..], (kind, nccl.device));
    let sent = match tensor {
        Some(t) if comm.rank() == root => input(t),
        _ => received.shallow_clone(),
    };
    let bytes = received.numel() * kind.elt_size_in_bytes();
    nccl.launch("ncclBroadcast", |c, stream| {
        // SAFETY: both buffers hold `bytes` bytes, contiguous on the communicator's GPU (the
        // root's input checked by its descriptor; see reduce for their lifetimes).
        unsafe {
            (nccl.api.broadcast)(
                sent.data_ptr(),
                received.data_ptr(),
                bytes,
                ncclDataType_t::ncclUint8,
                root as c_int,
                c,
                stream,
            )
        }
    })?;
    let target = tensor.map_or(Device::Cpu, Tensor::device);
    Ok(Some(received.to_device(target)))
}

/// Says once per process why CUDA tensors' collectives between processes take the host path.
fn note(why: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "note: NCCL is not used ({why}); collectives of CUDA tensors between processes go \
             through host memory (MPI)"
        );
    }
}

/// The companions created in this process, by their group's descriptors (each rank's process
/// rank, readiness and GPU): groups with the same members share one; `None` where a group of
/// those members could not have one.
type Created = Vec<(Vec<Vec<i64>>, Option<Arc<Nccl>>)>;
static CREATED: Mutex<Created> = Mutex::new(Vec::new());

/// This rank's NCCL companion for the group of `comm` (ranks that are processes), its tensors
/// on `device`: a collective of the group, over MPI. `None` where a rank of the group cannot use
/// NCCL (no CUDA device, no NCCL library or driver, two ranks on one GPU), after one note on
/// stderr per process (none where this rank is on the CPU: it said why): the group then takes
/// the MPI path, never a crash. `Err` where MPI fails, or NCCL fails to create the communicator
/// after every rank found it.
pub(super) fn connect(
    comm: &Communicator,
    device: Device,
) -> Result<Option<Arc<Nccl>>, CollectiveError> {
    let here = match device {
        Device::Cuda(ordinal) => library().and_then(|api| Ok((api, Gpu::open(ordinal)?))),
        other => Err(format!("this rank's device is {other:?}")),
    };
    let process = super::process_world().map_or(0, |w| w.rank as i64);
    let mut mine = vec![process, i64::from(here.is_ok())];
    if let Ok((_, gpu)) = &here {
        mine.extend(gpu.uuid_words());
    }
    let all = exchange_words(comm, &mine)?;
    let created = |all: &Vec<Vec<i64>>| {
        let created = CREATED.lock().unwrap_or_else(|p| p.into_inner());
        created
            .iter()
            .find(|(members, _)| members == all)
            .map(|(_, nccl)| nccl.clone())
    };
    if let Some(found) = created(&all) {
        return Ok(found);
    }
    let made = create(comm, device, here, &all)?;
    CREATED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((all, made.clone()));
    Ok(made)
}

fn create(
    comm: &Communicator,
    device: Device,
    here: Result<(&'static Api, Gpu), String>,
    all: &[Vec<i64>],
) -> Result<Option<Arc<Nccl>>, CollectiveError> {
    let unable: Vec<usize> = (0..all.len()).filter(|&r| all[r][1] != 1).collect();
    let (api, gpu) = match here {
        Err(why) => {
            // On the CPU, the note that CUDA is not available said it all.
            if device.is_cuda() {
                note(&why);
            }
            return Ok(None);
        }
        Ok(_) if !unable.is_empty() => {
            note(&format!(
                "rank(s) {unable:?} of a group of {} cannot use it",
                all.len()
            ));
            return Ok(None);
        }
        Ok(found) => found,
    };
    for a in 0..all.len() {
        if let Some(b) = (a + 1..all.len()).find(|&b| all[b][2..] == all[a][2..]) {
            note(&format!(
                "ranks {a} and {b} of a group share one GPU; NCCL needs a GPU per rank"
            ));
            return Ok(None);
        }
    }
    // Rank 0 makes the group's id and broadcasts it over MPI ([ok, id…] or [0, why…]).
    let message = (comm.rank() == 0).then(|| {
        let mut id = ncclUniqueId { internal: [0; 128] };
        // SAFETY: an out-parameter owned here.
        let status = unsafe { (api.get_unique_id)(&mut id) };
        let bytes: Vec<u8> = match api.check(status, "ncclGetUniqueId") {
            Ok(()) => [1u8]
                .into_iter()
                .chain(id.internal.iter().map(|&b| b as u8))
                .collect(),
            Err(why) => [0u8].into_iter().chain(why.into_bytes()).collect(),
        };
        Tensor::from_slice(&bytes)
    });
    let got = comm.broadcast(message.as_ref(), 0)?;
    let got = Vec::<u8>::try_from(&got)
        .map_err(|e| CollectiveError::Transport(format!("the NCCL id: {e}")))?;
    if got.first() != Some(&1) || got.len() != 129 {
        note(&format!(
            "rank 0 of a group could not make an NCCL id: {}",
            String::from_utf8_lossy(got.get(1..).unwrap_or_default())
        ));
        return Ok(None);
    }
    let mut id = ncclUniqueId { internal: [0; 128] };
    for (to, &from) in id.internal.iter_mut().zip(&got[1..]) {
        *to = from as c_char;
    }
    let previous = gpu
        .enter()
        .map_err(|e| CollectiveError::Nccl(format!("ncclCommInitRank: CUDA: {e}")))?;
    let mut nccl_comm: ncclComm_t = std::ptr::null_mut();
    // SAFETY: an out-parameter owned here; the group's size and this rank's place in it; the
    // GPU's context is current (NCCL takes the current device).
    let status = unsafe {
        (api.comm_init_rank)(
            &mut nccl_comm,
            comm.world_size() as c_int,
            id,
            comm.rank() as c_int,
        )
    };
    gpu.leave(previous);
    api.check(status, "ncclCommInitRank")
        .map_err(CollectiveError::Nccl)?;
    Ok(Some(Arc::new(Nccl {
        api,
        comm: nccl_comm,
        device: Device::Cuda(gpu.ordinal),
        gpu,
        calls: Mutex::new(()),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectives::Group;

    #[test]
    fn a_missing_library_is_an_error_that_says_what_to_do() {
        let why = load(&["libnccl-absent.so.2"])
            .err()
            .expect("no such library");
        assert!(why.contains("libnccl-absent.so.2"), "{why}");
        assert!(why.contains("LD_LIBRARY_PATH"), "{why}");
    }

    /// Without NCCL or a GPU (this project's CI) opening them gives the reason, never a panic.
    #[test]
    fn opening_nccl_without_it_gives_the_reason() {
        match library().and_then(|api| Gpu::open(0).map(|_| api)) {
            Ok(api) => eprintln!("NCCL {} and a GPU are here", api.version),
            Err(why) => {
                assert!(!why.is_empty());
                eprintln!("NCCL cannot be used here: {why}");
            }
        }
    }

    #[test]
    fn reductions_nccl_cannot_do_stay_on_the_host() {
        assert!(reduce_type(Kind::Bool, ReduceOp::Sum).is_none());
        assert!(reduce_type(Kind::Int16, ReduceOp::Max).is_none());
        assert!(reduce_type(Kind::Int64, ReduceOp::Mean).is_none());
        assert_eq!(
            reduce_type(Kind::Int64, ReduceOp::Sum),
            Some(ncclDataType_t::ncclInt64)
        );
        assert_eq!(
            reduce_type(Kind::BFloat16, ReduceOp::Mean),
            Some(ncclDataType_t::ncclBfloat16)
        );
        assert_eq!(red_op(ReduceOp::Mean), ncclRedOp_t::ncclSum);
    }

    #[test]
    fn nccl_runs_only_where_every_rank_agrees() {
        assert!(agreed(&[vec![1, 6, 4, 2], vec![1, 6, 4, 2]]));
        assert!(!agreed(&[vec![1, 6, 4, 2], vec![1, 6, 4, 3]]));
        assert!(!agreed(&[vec![1, 6, 4], vec![0]]));
        assert!(!agreed(&[vec![0], vec![0]]));
        assert_eq!(kind_code(Kind::Float), Some(6));
        assert_eq!(kind_code(Kind::ComplexFloat), None);
    }

    /// Ranks that are threads share their process's memory: no NCCL, and no note.
    #[test]
    fn threads_never_use_nccl() {
        let mut group = Group::new(1);
        assert_eq!(group[0].use_nccl(Device::Cuda(0)), Ok(false));
        assert!(!group[0].uses_nccl());
    }
}

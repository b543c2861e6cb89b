//! One rank's handle to its group, and the collectives, written once over the transports: the
//! ranks' exchange of private copies (in-process mailboxes or MPI messages) is all a transport
//! provides; what each rank computes from the exchanged tensors is the same code for both, so
//! results are bit-identical whether ranks are threads or processes (except, for groups of three
//! or more processes, the reductions of CUDA tensors that go through NCCL, `nccl.rs`).

use std::sync::Arc;

use tch::{Device, Tensor};

#[cfg(feature = "mpi")]
use super::nccl::{self, Nccl};
#[cfg(feature = "mpi")]
use super::processes::ProcessComm;
use super::threads::ThreadTransport;
use super::{CollectiveError, ReduceOp, reduce_in_order};

/// Creates the handles of an in-process group.
pub struct Group;

impl Group {
    /// One [`Communicator`] per rank, in rank order; move each into its rank's thread.
    ///
    /// # Panics
    /// If `world_size` is 0.
    // The handles are the group: there is no group object left for a rank to hold.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(world_size: usize) -> Vec<Communicator> {
        assert!(world_size > 0, "a group needs at least one rank");
        let shared = ThreadTransport::new(world_size);
        (0..world_size)
            .map(|rank| Communicator {
                rank,
                world_size,
                transport: Transport::Threads(Arc::clone(&shared)),
            })
            .collect()
    }
}

enum Transport {
    Threads(Arc<ThreadTransport>),
    /// The group's MPI communicator, and its NCCL companion where the group's tensors live on
    /// CUDA devices ([`Communicator::use_nccl`]).
    #[cfg(feature = "mpi")]
    Processes(ProcessComm, Option<Arc<Nccl>>),
}

/// A private copy that the depositing rank may go on mutating its original of.
fn deposit_copy(t: &Tensor) -> Tensor {
    t.detach().copy()
}

/// One rank's handle to its group.
pub struct Communicator {
    rank: usize,
    world_size: usize,
    transport: Transport,
}

impl Communicator {
    /// Rank `rank` of a group of processes connected by MPI.
    #[cfg(feature = "mpi")]
    pub(super) fn processes(comm: ProcessComm, rank: usize, world_size: usize) -> Communicator {
        Communicator {
            rank,
            world_size,
            transport: Transport::Processes(comm, None),
        }
    }

    /// Between processes, runs this group's collectives of CUDA tensors through NCCL from now
    /// on, this rank's tensors being on `device`: a collective of the group (every rank calls
    /// it, each with its own device, in the same order as other groups' calls). `Ok(false)`
    /// where the ranks are threads, or (after one note on stderr per process) where a rank of
    /// the group cannot use NCCL (no CUDA device, no NCCL library or driver, two ranks on one
    /// GPU): the host path then, as before.
    pub fn use_nccl(&mut self, device: Device) -> Result<bool, CollectiveError> {
        #[cfg(feature = "mpi")]
        if matches!(self.transport, Transport::Processes(..)) {
            let companion = nccl::connect(self, device)?;
            let used = companion.is_some();
            if let Transport::Processes(_, slot) = &mut self.transport {
                *slot = companion;
            }
            return Ok(used);
        }
        let _ = device;
        Ok(false)
    }

    /// Whether this group's collectives of CUDA tensors go through NCCL.
    pub fn uses_nccl(&self) -> bool {
        #[cfg(feature = "mpi")]
        if let Transport::Processes(_, Some(_)) = &self.transport {
            return true;
        }
        false
    }

    /// The NCCL companion, where there is one.
    #[cfg(feature = "mpi")]
    fn nccl(&self) -> Option<&Nccl> {
        match &self.transport {
            Transport::Processes(_, nccl) => nccl.as_deref(),
            Transport::Threads(_) => None,
        }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// Whether the ranks of this group are processes (MPI) rather than threads of this process.
    pub fn is_processes(&self) -> bool {
        !matches!(self.transport, Transport::Threads(_))
    }

    /// Contributes `contribution` (on `device`), waits for every rank, and returns all
    /// contributions in rank order, on `device`.
    pub(super) fn exchange(
        &self,
        contribution: Vec<Tensor>,
        device: Device,
    ) -> Result<Vec<Vec<Tensor>>, CollectiveError> {
        match &self.transport {
            Transport::Threads(t) => {
                let _ = device;
                t.exchange(self.rank, contribution.iter().map(deposit_copy).collect())
            }
            #[cfg(feature = "mpi")]
            Transport::Processes(p, _) => p.exchange(&contribution, device),
        }
    }

    /// Sends `parts[r]` to rank `r` and returns what every rank sent this one, in rank order.
    fn all_to_all(
        &self,
        parts: Vec<Tensor>,
        device: Device,
    ) -> Result<Vec<Tensor>, CollectiveError> {
        debug_assert_eq!(parts.len(), self.world_size);
        match &self.transport {
            Transport::Threads(_) => {
                let all = self.exchange(parts, device)?;
                Ok(all
                    .into_iter()
                    .map(|mut from| std::mem::replace(&mut from[self.rank], Tensor::new()))
                    .collect())
            }
            #[cfg(feature = "mpi")]
            Transport::Processes(p, _) => p.all_to_all(&parts, device),
        }
    }

    fn check_peer(&self, peer: usize) -> Result<(), CollectiveError> {
        if peer >= self.world_size || peer == self.rank {
            return Err(CollectiveError::InvalidPeer {
                peer,
                rank: self.rank,
                world_size: self.world_size,
            });
        }
        Ok(())
    }

    /// Sends a private copy of `tensor` to rank `dst` and returns at once: messages are buffered,
    /// so a pipeline's stages may run ahead of each other without deadlocking.
    pub fn send(&self, tensor: &Tensor, dst: usize) -> Result<(), CollectiveError> {
        self.check_peer(dst)?;
        match &self.transport {
            Transport::Threads(t) => t.send(self.rank, dst, deposit_copy(tensor)),
            #[cfg(feature = "mpi")]
            Transport::Processes(p, _) => p.send(tensor, dst),
        }
    }

    /// The oldest message from rank `src` not yet received, waiting for one if none is there.
    /// Messages from one sender arrive in the order it sent them; in-process, once the sender
    /// has dropped its handle and its messages are read, this fails with
    /// [`CollectiveError::PeerLost`] (between processes, the launcher ends a job whose rank died).
    pub fn recv(&self, src: usize) -> Result<Tensor, CollectiveError> {
        self.check_peer(src)?;
        match &self.transport {
            Transport::Threads(t) => t.recv(src, self.rank),
            #[cfg(feature = "mpi")]
            Transport::Processes(p, _) => p.recv(src),
        }
    }

    fn check_root(&self, root: usize) -> Result<(), CollectiveError> {
        if root >= self.world_size {
            return Err(CollectiveError::InvalidRoot {
                root,
                world_size: self.world_size,
            });
        }
        Ok(())
    }

    /// Checks that every rank passes `tensor`'s shape (one small exchange), so that a rank
    /// that would reduce a different shape fails on every rank instead of mismatching silently.
    fn agree_on_shape(&self, tensor: &Tensor) -> Result<(), CollectiveError> {
        let shape = Tensor::from_slice(&tensor.size());
        let shapes = Self::flatten_one(self.exchange(vec![shape], Device::Cpu)?);
        let found: Vec<Vec<i64>> = shapes
            .iter()
            .map(|s| Vec::<i64>::try_from(s).expect("int64 shape"))
            .collect();
        match found.iter().position(|s| *s != found[0]) {
            Some(rank) => Err(CollectiveError::ShapeMismatch {
                rank,
                expected: found[0].clone(),
                found: found[rank].clone(),
            }),
            None => Ok(()),
        }
    }

    fn flatten_one(deposits: Vec<Vec<Tensor>>) -> Vec<Tensor> {
        deposits.into_iter().flatten().collect()
    }

    /// Every rank gets the reduction of all ranks' `tensor`s. Each rank folds `1/world` of the
    /// elements (in rank order, so every element is the sequential fold's bits) and the pieces
    /// are gathered back.
    pub fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor, CollectiveError> {
        #[cfg(feature = "mpi")]
        if let Some(n) = self.nccl()
            && let Some(out) = nccl::all_reduce(self, n, tensor, op)?
        {
            return Ok(out);
        }
        if self.world_size == 1 {
            return Ok(reduce_in_order(&[tensor.detach()], op));
        }
        self.agree_on_shape(tensor)?;
        let flat = tensor.detach().reshape([-1]);
        let bounds = piece_bounds(flat.size()[0], self.world_size);
        let parts = bounds
            .iter()
            .map(|&(start, len)| flat.narrow(0, start, len))
            .collect();
        let mine = reduce_in_order(&self.all_to_all(parts, tensor.device())?, op);
        let pieces = Self::flatten_one(self.exchange(vec![mine], tensor.device())?);
        Ok(Tensor::cat(&pieces, 0).view(tensor.size().as_slice()))
    }

    /// Every rank gets every rank's `tensor`, in rank order (shapes may differ).
    pub fn all_gather(&self, tensor: &Tensor) -> Result<Vec<Tensor>, CollectiveError> {
        #[cfg(feature = "mpi")]
        if let Some(n) = self.nccl()
            && let Some(out) = nccl::all_gather(self, n, tensor)?
        {
            return Ok(out);
        }
        Ok(Self::flatten_one(
            self.exchange(vec![tensor.shallow_clone()], tensor.device())?,
        ))
    }

    /// Reduces `tensor` (`[world_size · k, …]`, same shape on every rank) and gives rank `r`
    /// rows `r·k .. (r+1)·k` of the result. Each rank receives and reduces only its own rows.
    pub fn reduce_scatter(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor, CollectiveError> {
        let size = tensor.size().first().copied().unwrap_or(0);
        if size % self.world_size as i64 != 0 {
            return Err(CollectiveError::NotDivisible {
                size,
                world_size: self.world_size,
            });
        }
        #[cfg(feature = "mpi")]
        if let Some(n) = self.nccl()
            && let Some(out) = nccl::reduce_scatter(self, n, tensor, op)?
        {
            return Ok(out);
        }
        if self.world_size > 1 {
            self.agree_on_shape(tensor)?;
        }
        let rows = size / self.world_size as i64;
        let detached = tensor.detach();
        let parts = (0..self.world_size as i64)
            .map(|r| detached.narrow(0, r * rows, rows))
            .collect();
        let mine = self.all_to_all(parts, tensor.device())?;
        Ok(reduce_in_order(&mine, op))
    }

    /// Every rank gets the root's tensor; other ranks pass `None` (anything they pass is ignored).
    pub fn broadcast(
        &self,
        tensor: Option<&Tensor>,
        root: usize,
    ) -> Result<Tensor, CollectiveError> {
        self.check_root(root)?;
        #[cfg(feature = "mpi")]
        if let Some(n) = self.nccl()
            && let Some(out) = nccl::broadcast(self, n, tensor, root)?
        {
            return Ok(out);
        }
        let (contribution, device) = match tensor {
            Some(t) if self.rank == root => (vec![t.shallow_clone()], t.device()),
            Some(t) => (Vec::new(), t.device()),
            None => (Vec::new(), Device::Cpu),
        };
        let deposits = self.exchange(contribution, device)?;
        match deposits[root].as_slice() {
            [t] => Ok(t.copy()),
            other => Err(CollectiveError::MissingRootInput {
                root,
                expected: 1,
                found: other.len(),
            }),
        }
    }

    /// Rank `r` gets `chunks[r]` of the root, which passes one tensor per rank.
    pub fn scatter(
        &self,
        chunks: Option<&[Tensor]>,
        root: usize,
    ) -> Result<Tensor, CollectiveError> {
        self.check_root(root)?;
        let contribution: Vec<Tensor> = match chunks {
            Some(chunks) if self.rank == root => chunks.iter().map(Tensor::shallow_clone).collect(),
            _ => Vec::new(),
        };
        let device = contribution.first().map_or(Device::Cpu, Tensor::device);
        let mut deposits = self.exchange(contribution, device)?;
        let from_root = std::mem::take(&mut deposits[root]);
        if from_root.len() != self.world_size {
            return Err(CollectiveError::MissingRootInput {
                root,
                expected: self.world_size,
                found: from_root.len(),
            });
        }
        // Only this rank reads its chunk, and the deposit is already a private copy.
        Ok(from_root
            .into_iter()
            .nth(self.rank)
            .expect("one chunk per rank"))
    }

    /// The root gets every rank's `tensor` in rank order; the other ranks get `None`.
    pub fn gather(
        &self,
        tensor: &Tensor,
        root: usize,
    ) -> Result<Option<Vec<Tensor>>, CollectiveError> {
        self.check_root(root)?;
        let deposits = self.exchange(vec![tensor.shallow_clone()], tensor.device())?;
        Ok((self.rank == root).then(|| Self::flatten_one(deposits)))
    }

    /// Returns once every rank has called it.
    pub fn barrier(&self) -> Result<(), CollectiveError> {
        self.exchange(Vec::new(), Device::Cpu).map(|_| ())
    }
}

/// `(start, len)` of `world` consecutive pieces of `n` elements, the first `n mod world` one
/// element longer.
fn piece_bounds(n: i64, world: usize) -> Vec<(i64, i64)> {
    let world = world as i64;
    let (base, extra) = (n / world, n % world);
    let mut start = 0;
    (0..world)
        .map(|r| {
            let len = base + i64::from(r < extra);
            let piece = (start, len);
            start += len;
            piece
        })
        .collect()
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("processes", &self.is_processes())
            .finish_non_exhaustive()
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        match &self.transport {
            Transport::Threads(t) => t.depart(self.rank),
            #[cfg(feature = "mpi")]
            Transport::Processes(..) => {}
        }
    }
}

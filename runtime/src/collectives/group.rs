//! The rendezvous shared by the ranks of a group, the mailboxes of its point-to-point messages
//! and the per-rank handle.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tch::Tensor;

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
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                generation: 0,
                arrived: 0,
                deposits: empty_slots(world_size),
                published: Vec::new(),
                unread: 0,
                broken: false,
            }),
            all_arrived: Condvar::new(),
            mail: Mutex::new(Mail {
                queues: (0..world_size * world_size)
                    .map(|_| VecDeque::new())
                    .collect(),
                departed: vec![false; world_size],
            }),
            mail_arrived: Condvar::new(),
        });
        (0..world_size)
            .map(|rank| Communicator {
                rank,
                world_size,
                shared: Arc::clone(&shared),
            })
            .collect()
    }
}

struct Shared {
    state: Mutex<State>,
    all_arrived: Condvar,
    /// Point-to-point messages, apart from the collectives' rendezvous so that neither waits on
    /// the other.
    mail: Mutex<Mail>,
    mail_arrived: Condvar,
}

/// Messages sent and not yet received, one FIFO queue per ordered pair of ranks.
struct Mail {
    /// Queue `src · world_size + dst`.
    queues: Vec<VecDeque<Tensor>>,
    /// Ranks that dropped their handle: they will send nothing more and receive nothing.
    departed: Vec<bool>,
}

struct State {
    /// Number of completed collectives; a waiting rank is released when it changes.
    generation: u64,
    arrived: usize,
    deposits: Vec<Vec<Tensor>>,
    /// The deposits of the last completed collective, until every rank has read them. The
    /// next collective cannot complete before that, since each rank reads before depositing again.
    published: Vec<Vec<Tensor>>,
    /// Ranks that have not yet read `published`.
    unread: usize,
    /// A rank dropped its handle; collectives that would wait for it fail instead of hanging.
    broken: bool,
}

fn empty_slots(world_size: usize) -> Vec<Vec<Tensor>> {
    (0..world_size).map(|_| Vec::new()).collect()
}

/// A private copy that the depositing rank may go on mutating its original of.
fn deposit_copy(t: &Tensor) -> Tensor {
    t.detach().copy()
}

/// One rank's handle to its group.
pub struct Communicator {
    rank: usize,
    world_size: usize,
    shared: Arc<Shared>,
}

impl Communicator {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A rank that panicked while holding the lock left the state consistent (every update
        // is a few assignments), so a poisoned lock is still usable.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Deposits `contribution`, waits for every rank, and returns all deposits in rank order.
    fn exchange(&self, contribution: Vec<Tensor>) -> Result<Vec<Vec<Tensor>>, CollectiveError> {
        let mut state = self.lock();
        if state.broken {
            return Err(CollectiveError::PeerLost);
        }
        state.deposits[self.rank] = contribution;
        state.arrived += 1;
        let generation = state.generation;
        if state.arrived == self.world_size {
            state.published = std::mem::replace(&mut state.deposits, empty_slots(self.world_size));
            state.unread = self.world_size;
            state.arrived = 0;
            state.generation += 1;
            self.shared.all_arrived.notify_all();
        } else {
            while state.generation == generation && !state.broken {
                state = self
                    .shared
                    .all_arrived
                    .wait(state)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            if state.generation == generation {
                return Err(CollectiveError::PeerLost);
            }
        }
        let all = state
            .published
            .iter()
            .map(|slot| slot.iter().map(Tensor::shallow_clone).collect())
            .collect();
        state.unread -= 1;
        if state.unread == 0 {
            // Let go of the inputs (possibly a whole model's gradients) as soon as all have them.
            state.published = Vec::new();
        }
        Ok(all)
    }

    fn lock_mail(&self) -> MutexGuard<'_, Mail> {
        // As for `lock`: every update leaves the mailboxes consistent.
        self.shared
            .mail
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The index of the queue from `src` to `dst`.
    fn queue(&self, src: usize, dst: usize) -> usize {
        src * self.world_size + dst
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
        let copy = deposit_copy(tensor);
        let mut mail = self.lock_mail();
        if mail.departed[dst] {
            return Err(CollectiveError::PeerLost);
        }
        let queue = self.queue(self.rank, dst);
        mail.queues[queue].push_back(copy);
        self.shared.mail_arrived.notify_all();
        Ok(())
    }

    /// The oldest message from rank `src` not yet received, waiting for one if none is there.
    /// Messages from one sender arrive in the order it sent them; once the sender has dropped its
    /// handle and its messages are read, this fails with [`CollectiveError::PeerLost`].
    pub fn recv(&self, src: usize) -> Result<Tensor, CollectiveError> {
        self.check_peer(src)?;
        let queue = self.queue(src, self.rank);
        let mut mail = self.lock_mail();
        loop {
            if let Some(tensor) = mail.queues[queue].pop_front() {
                return Ok(tensor);
            }
            if mail.departed[src] {
                return Err(CollectiveError::PeerLost);
            }
            mail = self
                .shared
                .mail_arrived
                .wait(mail)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
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

    /// The single tensor each rank deposited, checked to have one shape.
    fn same_shape_inputs(deposits: Vec<Vec<Tensor>>) -> Result<Vec<Tensor>, CollectiveError> {
        let inputs: Vec<Tensor> = deposits.into_iter().flatten().collect();
        let expected = inputs[0].size();
        for (rank, input) in inputs.iter().enumerate() {
            if input.size() != expected {
                return Err(CollectiveError::ShapeMismatch {
                    rank,
                    expected,
                    found: input.size(),
                });
            }
        }
        Ok(inputs)
    }

    /// Every rank gets the reduction of all ranks' `tensor`s.
    pub fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor, CollectiveError> {
        let inputs = Self::same_shape_inputs(self.exchange(vec![deposit_copy(tensor)])?)?;
        Ok(reduce_in_order(&inputs, op))
    }

    /// Every rank gets every rank's `tensor`, in rank order (shapes may differ).
    pub fn all_gather(&self, tensor: &Tensor) -> Result<Vec<Tensor>, CollectiveError> {
        let deposits = self.exchange(vec![deposit_copy(tensor)])?;
        Ok(deposits.into_iter().flatten().collect())
    }

    /// Reduces `tensor` (`[world_size · k, …]`, same shape on every rank) and gives rank `r`
    /// rows `r·k .. (r+1)·k` of the result. Each rank reduces only its own rows.
    pub fn reduce_scatter(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor, CollectiveError> {
        let size = tensor.size().first().copied().unwrap_or(0);
        if size % self.world_size as i64 != 0 {
            return Err(CollectiveError::NotDivisible {
                size,
                world_size: self.world_size,
            });
        }
        let inputs = Self::same_shape_inputs(self.exchange(vec![deposit_copy(tensor)])?)?;
        let rows = size / self.world_size as i64;
        let mine: Vec<Tensor> = inputs
            .iter()
            .map(|t| t.narrow(0, self.rank as i64 * rows, rows))
            .collect();
        Ok(reduce_in_order(&mine, op))
    }

    /// Every rank gets the root's tensor; other ranks pass `None` (anything they pass is ignored).
    pub fn broadcast(
        &self,
        tensor: Option<&Tensor>,
        root: usize,
    ) -> Result<Tensor, CollectiveError> {
        self.check_root(root)?;
        let contribution = match tensor {
            Some(t) if self.rank == root => vec![deposit_copy(t)],
            _ => Vec::new(),
        };
        let deposits = self.exchange(contribution)?;
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
        let contribution = match chunks {
            Some(chunks) if self.rank == root => chunks.iter().map(deposit_copy).collect(),
            _ => Vec::new(),
        };
        let mut deposits = self.exchange(contribution)?;
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
        let deposits = self.exchange(vec![deposit_copy(tensor)])?;
        Ok((self.rank == root).then(|| deposits.into_iter().flatten().collect()))
    }

    /// Returns once every rank has called it.
    pub fn barrier(&self) -> Result<(), CollectiveError> {
        self.exchange(Vec::new()).map(|_| ())
    }
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .finish_non_exhaustive()
    }
}

impl Drop for Communicator {
    /// A rank that leaves (normally or by panicking) can join no further collective, so the
    /// others are told instead of waiting forever.
    fn drop(&mut self) {
        self.lock().broken = true;
        self.shared.all_arrived.notify_all();
        let mut mail = self.lock_mail();
        mail.departed[self.rank] = true;
        // Nobody will read what was sent to this rank.
        for src in 0..self.world_size {
            let queue = self.queue(src, self.rank);
            mail.queues[queue].clear();
        }
        drop(mail);
        self.shared.mail_arrived.notify_all();
    }
}

//! The transport of ranks that are threads of one process: a rendezvous shared by the ranks of a
//! group for the collectives, and per-pair mailboxes for point-to-point messages.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tch::Tensor;

use super::CollectiveError;

/// The state one in-process group shares; each rank holds an `Arc` of it.
pub(super) struct ThreadTransport {
    state: Mutex<State>,
    all_arrived: Condvar,
    /// Point-to-point messages, apart from the collectives' rendezvous so that neither waits on
    /// the other.
    mail: Mutex<Mail>,
    mail_arrived: Condvar,
    world_size: usize,
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

impl ThreadTransport {
    pub(super) fn new(world_size: usize) -> Arc<ThreadTransport> {
        Arc::new(ThreadTransport {
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
            world_size,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A rank that panicked while holding the lock left the state consistent (every update
        // is a few assignments), so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Deposits `contribution` (private copies) as rank `rank`, waits for every rank, and
    /// returns all deposits in rank order.
    pub(super) fn exchange(
        &self,
        rank: usize,
        contribution: Vec<Tensor>,
    ) -> Result<Vec<Vec<Tensor>>, CollectiveError> {
        let mut state = self.lock();
        if state.broken {
            return Err(CollectiveError::PeerLost);
        }
        state.deposits[rank] = contribution;
        state.arrived += 1;
        let generation = state.generation;
        if state.arrived == self.world_size {
            state.published = std::mem::replace(&mut state.deposits, empty_slots(self.world_size));
            state.unread = self.world_size;
            state.arrived = 0;
            state.generation += 1;
            self.all_arrived.notify_all();
        } else {
            while state.generation == generation && !state.broken {
                state = self
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
        self.mail
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The index of the queue from `src` to `dst`.
    fn queue(&self, src: usize, dst: usize) -> usize {
        src * self.world_size + dst
    }

    /// Queues `copy` (private) from `src` to `dst`.
    pub(super) fn send(&self, src: usize, dst: usize, copy: Tensor) -> Result<(), CollectiveError> {
        let mut mail = self.lock_mail();
        if mail.departed[dst] {
            return Err(CollectiveError::PeerLost);
        }
        let queue = self.queue(src, dst);
        mail.queues[queue].push_back(copy);
        self.mail_arrived.notify_all();
        Ok(())
    }

    /// The oldest message from `src` to `dst`, waiting for one.
    pub(super) fn recv(&self, src: usize, dst: usize) -> Result<Tensor, CollectiveError> {
        let queue = self.queue(src, dst);
        let mut mail = self.lock_mail();
        loop {
            if let Some(tensor) = mail.queues[queue].pop_front() {
                return Ok(tensor);
            }
            if mail.departed[src] {
                return Err(CollectiveError::PeerLost);
            }
            mail = self
                .mail_arrived
                .wait(mail)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Rank `rank` leaves (normally or by panicking): it can join no further collective, so the
    /// others are told instead of waiting forever.
    pub(super) fn depart(&self, rank: usize) {
        self.lock().broken = true;
        self.all_arrived.notify_all();
        let mut mail = self.lock_mail();
        mail.departed[rank] = true;
        // Nobody will read what was sent to this rank.
        for src in 0..self.world_size {
            let queue = self.queue(src, rank);
            mail.queues[queue].clear();
        }
        drop(mail);
        self.mail_arrived.notify_all();
    }
}

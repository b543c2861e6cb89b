//! Checking off the message loop. One thread runs the checker; the loop hands it a [`Job`] per
//! change and goes on answering the client (`shutdown`, hover on other documents, …) while it
//! runs. Jobs queued for the same document replace each other, so a burst of keystrokes is
//! checked once, at its newest version; a check under way when a newer version arrives runs to
//! its end, and the loop drops its result (its generation is no longer the document's).

use super::analysis::{Analysis, Documents};
use crossbeam_channel::{Receiver, Sender};
use std::collections::VecDeque;
use std::sync::Arc;

/// The checker thread's stack: the parser and checker bound their recursion to fit in 1 MiB
/// (compiler/syntax/tests/depth.rs); this leaves room as the main thread's 8 MiB did.
const STACK: usize = 16 << 20;

/// A check to run: document `uri`'s text against the open documents' texts as they were when
/// it was asked for.
pub struct Job {
    pub uri: String,
    pub name: String,
    pub text: Arc<str>,
    pub sources: Documents,
    /// The document's generation: bumped for every check asked for, whatever the reason.
    pub generation: u64,
    /// The server's edit count when the job was made: an imported document edited later makes
    /// the result stale.
    pub seq: u64,
}

/// A finished check.
pub struct Done {
    pub uri: String,
    pub generation: u64,
    pub seq: u64,
    pub analysis: Analysis,
}

/// Starts the checker thread: jobs go in through the returned sender, analyses come out
/// through `done`. The thread ends when either side is dropped.
pub fn spawn(done: Sender<Done>) -> Sender<Job> {
    let (jobs, queued) = crossbeam_channel::unbounded::<Job>();
    std::thread::Builder::new()
        .name("lsp-checker".into())
        .stack_size(STACK)
        .spawn(move || run(&queued, &done))
        .expect("spawn the language server's checker thread");
    jobs
}

fn run(jobs: &Receiver<Job>, done: &Sender<Done>) {
    let mut queue: VecDeque<Job> = VecDeque::new();
    loop {
        if queue.is_empty() {
            match jobs.recv() {
                Ok(job) => queue.push_back(job),
                Err(_) => return,
            }
        }
        while let Ok(job) = jobs.try_recv() {
            push(&mut queue, job);
        }
        let Some(job) = queue.pop_front() else {
            continue;
        };
        let analysis = super::analyze(&job.sources, &job.name, &job.text);
        let finished = Done {
            uri: job.uri,
            generation: job.generation,
            seq: job.seq,
            analysis,
        };
        if done.send(finished).is_err() {
            return;
        }
    }
}

/// Queues `job`, in place of a job for the same document that has not started.
fn push(queue: &mut VecDeque<Job>, job: Job) {
    match queue.iter_mut().find(|q| q.uri == job.uri) {
        Some(queued) => *queued = job,
        None => queue.push_back(job),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(uri: &str, generation: u64) -> Job {
        Job {
            uri: uri.into(),
            name: uri.into(),
            text: Arc::from(""),
            sources: Documents::default(),
            generation,
            seq: 0,
        }
    }

    #[test]
    fn a_newer_job_replaces_the_queued_one_of_its_document() {
        let mut queue = VecDeque::new();
        for (uri, generation) in [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)] {
            push(&mut queue, job(uri, generation));
        }
        let order: Vec<(&str, u64)> = queue
            .iter()
            .map(|j| (j.uri.as_str(), j.generation))
            .collect();
        assert_eq!(order, [("a", 3), ("b", 5), ("c", 4)]);
    }
}

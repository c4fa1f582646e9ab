//! Plain worker threads for the mount's prefetches.
//!
//! Not a rayon pool: a rayon worker that waits for a parallel loop (the chunk engine's) runs
//! other jobs of its pool meanwhile, on top of its own stack. A read that holds the dataset's
//! read lock would then run another read, or a prefetch, that waits for that lock behind a
//! queued writer, and neither could ever finish. A thread here only waits.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A fixed set of threads taking jobs from one queue, in order. The threads end once the
/// `Workers` is dropped and the queue is empty.
#[derive(Debug)]
pub(super) struct Workers {
    queue: Mutex<Sender<Job>>,
}

impl Workers {
    /// Starts `threads` (at least one) threads named `name-N`.
    pub(super) fn new(name: &str, threads: usize) -> std::io::Result<Workers> {
        let (queue, jobs) = mpsc::channel::<Job>();
        let jobs = Arc::new(Mutex::new(jobs));
        for i in 0..threads.max(1) {
            let jobs = Arc::clone(&jobs);
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || loop {
                    // The lock is held only to take one job, not while running it.
                    let next = jobs.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    match next {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                })?;
        }
        Ok(Workers {
            queue: Mutex::new(queue),
        })
    }

    /// Queues `job` for the next free thread.
    pub(super) fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        // The threads outlive every sender, so the queue is never closed while in use.
        let _ = queue.send(Box::new(job));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn runs_every_job_on_its_threads() {
        let workers = Workers::new("test", 3).unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        for _ in 0..100 {
            let (done, tx) = (Arc::clone(&done), tx.clone());
            workers.spawn(move || {
                done.fetch_add(1, Ordering::SeqCst);
                let name = std::thread::current().name().map(str::to_string);
                tx.send(name).unwrap();
            });
        }
        for _ in 0..100 {
            let name = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
            assert!(name.starts_with("test-"), "{name}");
        }
        assert_eq!(done.load(Ordering::SeqCst), 100);
    }

    /// A job waiting for a parallel loop does not run another job meanwhile (a rayon worker
    /// would), so a job holding a lock never meets a second job needing it on its own stack.
    #[test]
    fn a_waiting_job_runs_nothing_else() {
        use rayon::prelude::*;
        let workers = Workers::new("test", 1).unwrap();
        let lock = Arc::new(Mutex::new(()));
        let (tx, rx) = mpsc::channel();
        let (l1, tx1) = (Arc::clone(&lock), tx.clone());
        workers.spawn(move || {
            let _held = l1.lock().unwrap();
            let sum: u64 = (0..1000u64).into_par_iter().sum();
            tx1.send(sum).unwrap();
        });
        let l2 = Arc::clone(&lock);
        workers.spawn(move || {
            let _held = l2.lock().unwrap();
            tx.send(0).unwrap();
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(499_500));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(0));
    }
}

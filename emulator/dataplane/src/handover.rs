//! A bounded lock-free queue from one producer thread whose consumers never wait for it.
//!
//! crossbeam's `ArrayQueue` lets a push claim a slot before it writes the value; a pop that
//! finds the claimed slot still unwritten spins until the producer finishes. When the
//! consumer is a real-time thread (the cell thread, the writer) and the producer an
//! ordinary one (the reader, the diag thread, the recorder) on the same CPU, the consumer
//! preempts the producer inside its push and then spins until the kernel moves the
//! producer to another CPU: a profile showed the cell thread spinning 32 ms on the reader's
//! hand-over and 170 ms on the recorder's returned truth records, each a late clock and a
//! wasted core. Here a consumer takes only items whose push has completed (a count the
//! producer raises after each push), so it finds either a whole item or nothing.
//!
//! One producer thread at a time: with two, the count could cover a later push's item while
//! an earlier push is still writing. Any number of consumers.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;

/// The queue (see the module's documentation).
#[derive(Debug)]
pub struct Handover<T> {
    queue: ArrayQueue<T>,
    /// Items whose push has completed.
    published: AtomicU64,
    /// Items consumers have claimed (each claim is followed by one pop).
    claimed: AtomicU64,
}

impl<T> Handover<T> {
    /// An empty queue of `capacity` items (at least 1).
    pub fn new(capacity: usize) -> Handover<T> {
        Handover { queue: ArrayQueue::new(capacity.max(1)), published: AtomicU64::new(0), claimed: AtomicU64::new(0) }
    }

    /// Adds `item` (from the one producer thread); gives it back when the queue is full.
    pub fn push(&self, item: T) -> Result<(), T> {
        self.queue.push(item)?;
        self.published.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Takes the oldest item whose push has completed; `None` when there is none (a push
    /// in progress is not waited for).
    pub fn pop(&self) -> Option<T> {
        let mut claimed = self.claimed.load(Ordering::Relaxed);
        loop {
            if claimed >= self.published.load(Ordering::Acquire) {
                return None;
            }
            match self.claimed.compare_exchange_weak(claimed, claimed + 1, Ordering::AcqRel, Ordering::Relaxed) {
                // A claim below the published count leaves a whole item at the head for
                // this pop: the one producer completes its pushes in order, and at most
                // the other claims' pops came before.
                Ok(_) => return self.queue.pop(),
                Err(now) => claimed = now,
            }
        }
    }

    /// Whether no completed item is waiting.
    pub fn is_empty(&self) -> bool {
        self.claimed.load(Ordering::Relaxed) >= self.published.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn fifo_bounded_and_empty() {
        let q = Handover::new(3);
        assert!(q.is_empty() && q.pop().is_none());
        for i in 0..3 {
            q.push(i).expect("room");
        }
        assert_eq!(q.push(9), Err(9), "full");
        assert!(!q.is_empty());
        assert_eq!((q.pop(), q.pop()), (Some(0), Some(1)));
        q.push(3).expect("room again");
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(2), Some(3), None));
        assert!(q.is_empty());
    }

    #[test]
    fn every_item_arrives_once_in_order_across_threads() {
        // One producer, two consumers racing: every item is taken exactly once, and each
        // consumer sees its items in push order.
        const N: u64 = 200_000;
        let q = Arc::new(Handover::new(64));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let q = Arc::clone(&q);
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while got.last() != Some(&u64::MAX) {
                        match q.pop() {
                            Some(v) => got.push(v),
                            None => std::hint::spin_loop(),
                        }
                    }
                    got.pop();
                    got
                })
            })
            .collect();
        for i in 0..N {
            let mut item = i;
            while let Err(back) = q.push(item) {
                item = back;
                std::thread::yield_now();
            }
        }
        for _ in 0..2 {
            while q.push(u64::MAX).is_err() {
                std::thread::yield_now();
            }
        }
        let mut all = Vec::new();
        for c in consumers {
            let got = c.join().expect("consumer");
            assert!(got.windows(2).all(|w| w[0] < w[1]), "in order");
            all.extend(got);
        }
        all.sort_unstable();
        assert_eq!(all, (0..N).collect::<Vec<_>>());
    }
}

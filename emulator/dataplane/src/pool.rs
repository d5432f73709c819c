//! Packet buffers, recycled: the data plane allocates a buffer the first time it needs one
//! and reuses it ever after, so steady-state forwarding allocates nothing per packet.
//!
//! A [`Packet`] owns its buffer and gives it back to the [`Pool`] when dropped, wherever
//! that happens (written to a TUN, dropped by a queue inside the cell, discarded at
//! shutdown), so no code path can leak buffers. The free list is a lock-free bounded queue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

/// A bounded set of equally sized packet buffers.
#[derive(Debug)]
pub struct Pool {
    free: ArrayQueue<Box<[u8]>>,
    buf_bytes: usize,
    max_buffers: usize,
    allocated: AtomicUsize,
}

impl Pool {
    /// A pool of at most `max_buffers` buffers of `buf_bytes` bytes each (at least the
    /// largest MTU), none allocated yet.
    pub fn new(max_buffers: usize, buf_bytes: usize) -> Arc<Pool> {
        Arc::new(Pool {
            free: ArrayQueue::new(max_buffers.max(1)),
            buf_bytes,
            max_buffers,
            allocated: AtomicUsize::new(0),
        })
    }

    /// An empty packet with a full-size buffer to read into, or `None` when all
    /// `max_buffers` buffers are in flight (the caller drops the packet and counts it).
    pub fn take(self: &Arc<Pool>) -> Option<Packet> {
        let buf = match self.free.pop() {
            Some(buf) => buf,
            None => {
                // Only the reader thread takes buffers, so this check-then-add cannot race
                // with another taker; `fetch_add` keeps the count right for the others.
                if self.allocated.load(Ordering::Relaxed) >= self.max_buffers {
                    return None;
                }
                self.allocated.fetch_add(1, Ordering::Relaxed);
                vec![0u8; self.buf_bytes].into_boxed_slice()
            }
        };
        Some(Packet { buf, len: 0, pool: Arc::clone(self) })
    }

    /// Buffers allocated so far (in flight plus free).
    pub fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }
}

/// One IP packet in a pooled buffer.
#[derive(Debug)]
pub struct Packet {
    buf: Box<[u8]>,
    len: usize,
    pool: Arc<Pool>,
}

impl Packet {
    /// The whole buffer, to read a packet into; then call [`Packet::set_len`].
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Sets the packet length, bytes (clamped to the buffer size).
    pub fn set_len(&mut self, len_bytes: usize) {
        self.len = len_bytes.min(self.buf.len());
    }

    /// The packet bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Length, bytes.
    pub fn len_bytes(&self) -> usize {
        self.len
    }
}

impl Drop for Packet {
    fn drop(&mut self) {
        // A full free list means the buffer was allocated beyond the pool's bound, which
        // `take` prevents; freeing it is then the right thing anyway.
        let _ = self.pool.free.push(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_recycled_and_bounded() {
        let pool = Pool::new(2, 64);
        let mut a = pool.take().expect("first buffer");
        a.buffer_mut()[..3].copy_from_slice(b"abc");
        a.set_len(3);
        assert_eq!(a.bytes(), b"abc");
        let b = pool.take().expect("second buffer");
        assert!(pool.take().is_none(), "the pool is bounded");
        drop(a);
        let c = pool.take().expect("a recycled buffer");
        assert_eq!(c.len_bytes(), 0);
        assert_eq!(pool.allocated(), 2);
        drop((b, c));
        assert_eq!(pool.free.len(), 2);
    }
}

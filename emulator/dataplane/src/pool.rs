//! Packet buffers, recycled: the data plane allocates a buffer the first time it needs one
//! and reuses it ever after, so steady-state forwarding allocates nothing per packet.
//!
//! Buffers come in two sizes: small ones for the many short packets (TCP ACKs, small
//! datagrams) and full ones for an MTU-sized packet, so an ACK does not hold 1500 bytes of
//! cache-cold memory. A [`Packet`] owns its buffer and gives it back to the [`Pool`] when
//! dropped, wherever that happens (written to a TUN, dropped by a queue inside the cell,
//! discarded at shutdown), so no code path can leak buffers. The free lists are lock-free
//! bounded queues. The pool lives as long as the process (`&'static`): a reference count
//! per packet would be one more contended atomic on every packet's way between threads.

use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;

/// Size of a small buffer, bytes: a TCP ACK with every option, a 64-byte datagram.
pub const SMALL_BUFFER_BYTES: usize = 256;

/// One size of buffer.
#[derive(Debug)]
struct Class {
    free: ArrayQueue<Box<[u8]>>,
    buf_bytes: usize,
}

impl Class {
    fn new(max_buffers: usize, buf_bytes: usize) -> Class {
        Class { free: ArrayQueue::new(max_buffers.max(1)), buf_bytes }
    }
}

/// A bounded set of packet buffers in two sizes.
#[derive(Debug)]
pub struct Pool {
    small: Class,
    full: Class,
    max_buffers: usize,
    allocated: AtomicUsize,
}

impl Pool {
    /// A pool of at most `max_buffers` buffers (both sizes together), the large ones of
    /// `full_bytes` bytes (at least the largest packet), none allocated yet. It lives until
    /// the process ends.
    pub fn new(max_buffers: usize, full_bytes: usize) -> &'static Pool {
        Box::leak(Box::new(Pool {
            small: Class::new(max_buffers, SMALL_BUFFER_BYTES.min(full_bytes)),
            full: Class::new(max_buffers, full_bytes),
            max_buffers,
            allocated: AtomicUsize::new(0),
        }))
    }

    /// A packet holding a copy of `bytes`, in the smallest buffer that fits, or `None` when
    /// all `max_buffers` buffers are in flight or `bytes` is larger than a full buffer (the
    /// caller drops the packet and counts it).
    pub fn copy_of(&'static self, bytes: &[u8]) -> Option<Packet> {
        let mut packet = self.take(bytes.len())?;
        packet.buf[..bytes.len()].copy_from_slice(bytes);
        packet.len = bytes.len();
        Some(packet)
    }

    /// An empty packet whose buffer holds at least `len_bytes`; then fill it through
    /// [`Packet::buffer_mut`] and [`Packet::set_len`].
    pub fn take(&'static self, len_bytes: usize) -> Option<Packet> {
        let class = if len_bytes <= self.small.buf_bytes {
            &self.small
        } else if len_bytes <= self.full.buf_bytes {
            &self.full
        } else {
            return None;
        };
        let buf = match class.free.pop() {
            Some(buf) => buf,
            None => {
                // Only the reader thread takes buffers, so this check-then-add cannot race
                // with another taker; `fetch_add` keeps the count right for the others.
                if self.allocated.load(Ordering::Relaxed) >= self.max_buffers {
                    return None;
                }
                self.allocated.fetch_add(1, Ordering::Relaxed);
                vec![0u8; class.buf_bytes].into_boxed_slice()
            }
        };
        Some(Packet { buf, len: 0, pool: self })
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
    pool: &'static Pool,
}

impl Packet {
    /// The whole buffer, to fill; then call [`Packet::set_len`].
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

    /// The packet bytes, to edit in place.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }

    /// Length, bytes.
    pub fn len_bytes(&self) -> usize {
        self.len
    }
}

impl Drop for Packet {
    fn drop(&mut self) {
        let class = if self.buf.len() == self.pool.small.buf_bytes { &self.pool.small } else { &self.pool.full };
        // A full free list means the buffer was allocated beyond the pool's bound, which
        // `take` prevents; freeing it is then the right thing anyway.
        let _ = class.free.push(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_recycled_sized_and_bounded() {
        let pool = Pool::new(3, 1500);
        let a = pool.copy_of(b"abc").expect("first buffer");
        assert_eq!(a.bytes(), b"abc");
        assert_eq!(a.buf.len(), SMALL_BUFFER_BYTES, "a short packet takes a small buffer");
        let b = pool.copy_of(&[7u8; 1000]).expect("second buffer");
        assert_eq!(b.buf.len(), 1500);
        assert!(pool.copy_of(&[0u8; 1501]).is_none(), "larger than any buffer");
        let c = pool.take(10).expect("third buffer");
        assert!(pool.take(10).is_none(), "the pool is bounded");
        drop(a);
        let d = pool.take(SMALL_BUFFER_BYTES).expect("a recycled buffer");
        assert_eq!(d.len_bytes(), 0);
        assert_eq!(pool.allocated(), 3);
        drop((b, c, d));
        assert_eq!((pool.small.free.len(), pool.full.free.len()), (2, 1));
    }
}

//! The per-UE base-station buffer: which packets are admitted ([`QueuePolicy`], drop-tail
//! by bytes by default) and the packets themselves, kept in arrival order as one byte
//! stream that RLC cuts into transport blocks.
//!
//! The buffer holds a packet from its arrival until it is delivered or lost, because RLC
//! acknowledged mode keeps it until every byte has been received. What the policy limits
//! is the bytes *waiting for transmission* (never sent, or waiting for an RLC
//! retransmission), the quantity the seeds' buffer sizes describe.

use std::collections::VecDeque;

use crate::config::UeConfig;
use crate::policy::{Policy, Registry};

/// Decides whether an arriving packet joins a UE's base-station buffer.
pub trait QueuePolicy {
    /// Whether a packet of `len_bytes` may join a buffer where `waiting_bytes` bytes wait
    /// for transmission. A refused packet is an overflow drop.
    fn admits(&mut self, waiting_bytes: u64, len_bytes: u32) -> bool;
}

/// Drop-tail by bytes: a packet is admitted if the waiting bytes stay within the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropTail {
    /// Largest number of bytes waiting for transmission, bytes.
    pub limit_bytes: u64,
}

impl QueuePolicy for DropTail {
    fn admits(&mut self, waiting_bytes: u64, len_bytes: u32) -> bool {
        waiting_bytes.saturating_add(u64::from(len_bytes)) <= self.limit_bytes
    }
}

/// Every queue policy, by name: each UE's `cell.queue` choice (`crate::policy`). A new
/// policy is a type implementing [`QueuePolicy`] plus one entry here; the constructor sees
/// the UE's configuration (`queue_limit_bytes`).
pub static POLICIES: Registry<dyn QueuePolicy + Send, UeConfig> = Registry {
    category: "queue",
    config_key: "ues[i].cell.queue",
    default: "drop-tail",
    summary: "which downlink packets a UE's base-station buffer admits",
    policies: &[Policy {
        name: "drop-tail",
        summary: "admit a packet while the bytes waiting for transmission stay within the UE's queue_limit_bytes",
        params: &[],
        build: |_, ue| Box::new(DropTail { limit_bytes: ue.queue_limit_bytes }),
    }],
    legacy: None,
};

/// One packet (an RLC SDU) in the buffer.
#[derive(Debug)]
pub(crate) struct Sdu<H> {
    /// The data plane's handle, returned when the packet is delivered or lost.
    pub handle: H,
    /// Offset of the packet's first byte in the UE's byte stream.
    pub start: u64,
    /// Length, bytes (> 0).
    pub len_bytes: u32,
    /// Bytes not yet received: the packet is complete when this reaches 0.
    pub undecoded_bytes: u32,
    /// RLC gave up on some of its bytes: the packet is lost.
    pub lost: bool,
}

impl<H> Sdu<H> {
    /// Offset one past the packet's last byte.
    pub fn end(&self) -> u64 {
        self.start + u64::from(self.len_bytes)
    }
}

/// The packets of one UE, oldest first, addressed by byte-stream offsets that only grow.
#[derive(Debug)]
pub(crate) struct SduBuffer<H> {
    sdus: VecDeque<Sdu<H>>,
    /// Offset one past the last byte ever enqueued.
    end: u64,
}

impl<H> SduBuffer<H> {
    pub fn new() -> SduBuffer<H> {
        SduBuffer { sdus: VecDeque::new(), end: 0 }
    }

    /// Appends a packet of `len_bytes` (> 0) at the end of the stream.
    pub fn push(&mut self, len_bytes: u32, handle: H) {
        self.sdus.push_back(Sdu { handle, start: self.end, len_bytes, undecoded_bytes: len_bytes, lost: false });
        self.end += u64::from(len_bytes);
    }

    /// Offset one past the last byte ever enqueued.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Offset of the oldest byte still held; bytes before it belong to packets already
    /// delivered or lost.
    pub fn head(&self) -> u64 {
        self.sdus.front().map_or(self.end, |sdu| sdu.start)
    }

    /// Index of the packet holding byte `offset`, if it is still held.
    pub fn index_of(&self, offset: u64) -> Option<usize> {
        let i = self.sdus.partition_point(|sdu| sdu.end() <= offset);
        self.sdus.get(i).filter(|sdu| sdu.start <= offset).map(|_| i)
    }

    pub fn get(&self, index: usize) -> Option<&Sdu<H>> {
        self.sdus.get(index)
    }

    pub fn get_mut(&mut self, index: usize) -> Option<&mut Sdu<H>> {
        self.sdus.get_mut(index)
    }

    pub fn front(&self) -> Option<&Sdu<H>> {
        self.sdus.front()
    }

    pub fn pop_front(&mut self) -> Option<Sdu<H>> {
        self.sdus.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_tail_by_bytes() {
        let mut policy = DropTail { limit_bytes: 3000 };
        assert!(policy.admits(1500, 1500));
        assert!(!policy.admits(1501, 1500));
        assert!(!policy.admits(0, 3001));
    }

    #[test]
    fn offsets_and_lookup() {
        let mut buffer = SduBuffer::new();
        buffer.push(100, 'a');
        buffer.push(50, 'b');
        assert_eq!(buffer.end(), 150);
        assert_eq!(buffer.index_of(0), Some(0));
        assert_eq!(buffer.index_of(99), Some(0));
        assert_eq!(buffer.index_of(100), Some(1));
        assert_eq!(buffer.index_of(150), None);
        assert_eq!(buffer.pop_front().map(|sdu| sdu.handle), Some('a'));
        assert_eq!(buffer.head(), 100);
        assert_eq!(buffer.index_of(10), None);
        assert_eq!(buffer.index_of(120), Some(0));
    }
}

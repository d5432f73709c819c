//! RLC acknowledged mode over the UE's byte stream: segmentation into transport blocks,
//! retransmission of what HARQ gave up on, in-order delivery, and loss after the limit.
//!
//! - A transport block carries the next bytes of the stream, byte-accurate: it ends
//!   wherever its TBS ends, inside a packet if need be (RLC segmentation), never on
//!   1500-byte quanta. Pending retransmissions that are ready go first.
//! - A packet is complete when every one of its bytes has been carried by a transport block
//!   that passed its CRC. Packets are handed over in order (RLC reordering), so a complete
//!   packet waits for any older packet still missing bytes; this is the head-of-line
//!   blocking a HARQ retransmission causes on a real link.
//! - When HARQ gives up on a transport block, RLC retransmits its bytes after
//!   `retx_delay_ms`; bytes that have already been retransmitted `max_retx` times are given
//!   up instead, and every packet they belong to is lost (an RLC loss).
//!
//! The model carries no RLC/MAC header bytes: a transport block's payload is its TBS.

use crate::queue::SduBuffer;
use crate::{DropCause, UeId};
use std::collections::VecDeque;

/// Most contiguous byte ranges (RLC PDUs) one transport block carries: up to three
/// retransmissions and the new data. More ready retransmissions wait for the next block.
pub(crate) const MAX_SEGMENTS_PER_TB: usize = 4;

/// A contiguous range of the UE's byte stream in a transport block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Offset of the first byte.
    pub start: u64,
    /// Offset one past the last byte.
    pub end: u64,
    /// RLC retransmissions of these bytes so far (0: their first transmission).
    pub rlc_retx: u8,
}

impl Segment {
    fn len_bytes(&self) -> u64 {
        self.end - self.start
    }
}

/// What one transport block carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TbPayload {
    segments: [Segment; MAX_SEGMENTS_PER_TB],
    count: u8,
}

impl TbPayload {
    pub fn segments(&self) -> &[Segment] {
        &self.segments[..usize::from(self.count)]
    }

    fn push(&mut self, segment: Segment) {
        self.segments[usize::from(self.count)] = segment;
        self.count += 1;
    }

    fn is_full(&self) -> bool {
        usize::from(self.count) == MAX_SEGMENTS_PER_TB
    }

    /// Payload bytes.
    pub fn len_bytes(&self) -> u64 {
        self.segments().iter().map(Segment::len_bytes).sum()
    }

    /// Whether any bytes are RLC retransmissions (which makes the block's first
    /// transmission follow a failure, see [`crate::harq::Transmission`]).
    pub fn carries_rlc_retx(&self) -> bool {
        self.segments().iter().any(|segment| segment.rlc_retx > 0)
    }

    /// Number of RLC PDUs (contiguous ranges) in the block.
    pub fn rlc_pdus(&self) -> u8 {
        self.count
    }
}

/// Bytes waiting for an RLC retransmission, from `ready_ms` on.
#[derive(Clone, Copy, Debug)]
struct PendingRetx {
    segment: Segment,
    ready_ms: u64,
}

/// Cumulative RLC counters of one UE, as the diag feed reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RlcCounters {
    /// RLC PDUs retransmitted (ranges put into a transport block again).
    pub retx_pdus: u64,
    /// Packets lost after the RLC retransmission limit.
    pub lost_packets: u64,
    /// RLC PDUs negatively acknowledged (ranges of transport blocks HARQ gave up on).
    pub nacked_pdus: u64,
}

/// Where resolved packets go, and their tally for this subframe.
pub(crate) struct Resolved<'a, H> {
    pub ue: UeId,
    pub delivered: &'a mut Vec<(UeId, H)>,
    pub lost: &'a mut Vec<(UeId, H, DropCause)>,
    pub delivered_packets: u32,
    pub delivered_bytes: u64,
    pub lost_packets: u32,
    pub lost_bytes: u64,
}

/// The RLC entity of one UE at the base station, owning its buffered packets.
#[derive(Debug)]
pub(crate) struct RlcEntity<H> {
    buffer: SduBuffer<H>,
    /// Offset of the first byte never transmitted.
    next_new: u64,
    /// Ranges waiting for retransmission, in the order they became (or become) ready.
    retx: VecDeque<PendingRetx>,
    /// Bytes in `retx`.
    retx_bytes: u64,
    pub counters: RlcCounters,
}

impl<H> RlcEntity<H> {
    pub fn new() -> RlcEntity<H> {
        RlcEntity {
            buffer: SduBuffer::new(),
            next_new: 0,
            retx: VecDeque::new(),
            retx_bytes: 0,
            counters: RlcCounters::default(),
        }
    }

    /// Appends a packet of `len_bytes` (> 0).
    pub fn enqueue(&mut self, len_bytes: u32, handle: H) {
        self.buffer.push(len_bytes, handle);
    }

    /// Bytes waiting for transmission: never sent, or waiting for an RLC retransmission.
    pub fn waiting_bytes(&self) -> u64 {
        (self.buffer.end() - self.next_new) + self.retx_bytes
    }

    /// Bytes a transport block could carry at `t_ms`: never sent, or ready for an RLC
    /// retransmission.
    pub fn sendable_bytes(&self, t_ms: u64) -> u64 {
        let ready: u64 = self
            .retx
            .iter()
            .take_while(|pending| pending.ready_ms <= t_ms)
            .map(|pending| pending.segment.len_bytes())
            .sum();
        (self.buffer.end() - self.next_new) + ready
    }

    /// Whether any packet is held (waiting, in flight, or waiting for an older one).
    pub fn holds_packets(&self) -> bool {
        self.buffer.front().is_some()
    }

    /// Moves `offset` past bytes that no longer need sending: those of packets already
    /// resolved, and those of packets already lost.
    fn skip_dead_bytes(&self, mut offset: u64, end: u64) -> u64 {
        offset = offset.max(self.buffer.head());
        while offset < end {
            match self.buffer.index_of(offset).and_then(|i| self.buffer.get(i)) {
                Some(sdu) if sdu.lost => offset = sdu.end(),
                _ => break,
            }
        }
        offset.min(end)
    }

    /// Cuts the payload of a transport block of `capacity_bytes` at `t_ms`: ready
    /// retransmissions first, then new bytes. Counts the retransmitted PDUs.
    pub fn fill(&mut self, t_ms: u64, capacity_bytes: u64) -> TbPayload {
        let mut payload = TbPayload::default();
        let mut room = capacity_bytes;
        self.next_new = self.skip_dead_bytes(self.next_new, self.buffer.end());
        // Keep the last segment for new data, unless there is none.
        let new_waiting = self.buffer.end() > self.next_new;
        let retx_slots = if new_waiting { MAX_SEGMENTS_PER_TB - 1 } else { MAX_SEGMENTS_PER_TB };
        while room > 0 && usize::from(payload.count) < retx_slots {
            let Some(&PendingRetx { segment, ready_ms }) = self.retx.front() else { break };
            if ready_ms > t_ms {
                break;
            }
            let start = self.skip_dead_bytes(segment.start, segment.end);
            let take = (segment.end - start).min(room);
            // What leaves the pending range: the skipped dead bytes and the bytes taken.
            self.retx_bytes -= start - segment.start + take;
            if take > 0 {
                payload.push(Segment { start, end: start + take, rlc_retx: segment.rlc_retx });
                self.counters.retx_pdus += 1;
                room -= take;
            }
            if start + take == segment.end {
                self.retx.pop_front();
            } else if let Some(front) = self.retx.front_mut() {
                front.segment.start = start + take;
            }
        }
        if room > 0 && new_waiting && !payload.is_full() {
            let take = (self.buffer.end() - self.next_new).min(room);
            payload.push(Segment { start: self.next_new, end: self.next_new + take, rlc_retx: 0 });
            self.next_new += take;
        }
        payload
    }

    /// A transport block carrying `payload` passed its CRC: its bytes are received, and
    /// packets now complete are handed over in order.
    pub fn decoded(&mut self, payload: &TbPayload, out: &mut Resolved<'_, H>) {
        for segment in payload.segments() {
            let mut offset = segment.start.max(self.buffer.head());
            while offset < segment.end {
                let Some(i) = self.buffer.index_of(offset) else { break };
                let Some(sdu) = self.buffer.get_mut(i) else { break };
                let upto = sdu.end().min(segment.end);
                // At most the packet's length, so it fits in u32.
                let bytes = (upto - offset) as u32;
                debug_assert!(bytes <= sdu.undecoded_bytes, "a byte was received twice");
                sdu.undecoded_bytes = sdu.undecoded_bytes.saturating_sub(bytes);
                offset = upto;
            }
        }
        self.resolve(out);
    }

    /// HARQ gave up on a transport block carrying `payload` at `t_ms`: its ranges are
    /// negatively acknowledged and either retransmitted from `t_ms + retx_delay_ms` on or,
    /// after `max_retx` retransmissions, given up with their packets.
    pub fn nacked(
        &mut self,
        t_ms: u64,
        payload: &TbPayload,
        retx_delay_ms: u64,
        max_retx: u8,
        out: &mut Resolved<'_, H>,
    ) {
        for segment in payload.segments() {
            self.counters.nacked_pdus += 1;
            if segment.rlc_retx >= max_retx {
                self.lose(segment.start, segment.end);
            } else {
                let retry = Segment { rlc_retx: segment.rlc_retx + 1, ..*segment };
                self.retx.push_back(PendingRetx { segment: retry, ready_ms: t_ms + retx_delay_ms });
                self.retx_bytes += segment.len_bytes();
            }
        }
        self.resolve(out);
    }

    /// Marks every held packet with a byte in `start..end` lost.
    fn lose(&mut self, start: u64, end: u64) {
        let mut offset = start.max(self.buffer.head());
        while offset < end {
            let Some(i) = self.buffer.index_of(offset) else { break };
            let Some(sdu) = self.buffer.get_mut(i) else { break };
            sdu.lost = true;
            offset = sdu.end();
        }
    }

    /// Hands over, oldest first, every packet that is complete or lost and has no
    /// unresolved packet before it.
    fn resolve(&mut self, out: &mut Resolved<'_, H>) {
        while let Some(front) = self.buffer.front() {
            if !front.lost && front.undecoded_bytes > 0 {
                break;
            }
            let Some(sdu) = self.buffer.pop_front() else { break };
            // Never-sent bytes of a lost packet must not be sent any more.
            self.next_new = self.next_new.max(sdu.end());
            if sdu.lost {
                self.counters.lost_packets += 1;
                out.lost_packets += 1;
                out.lost_bytes += u64::from(sdu.len_bytes);
                out.lost.push((out.ue, sdu.handle, DropCause::RlcLoss));
            } else {
                out.delivered_packets += 1;
                out.delivered_bytes += u64::from(sdu.len_bytes);
                out.delivered.push((out.ue, sdu.handle));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sink {
        delivered: Vec<(UeId, u32)>,
        lost: Vec<(UeId, u32, DropCause)>,
    }

    impl Sink {
        fn new() -> Sink {
            Sink { delivered: Vec::new(), lost: Vec::new() }
        }

        fn resolved(&mut self) -> Resolved<'_, u32> {
            Resolved {
                ue: UeId(0),
                delivered: &mut self.delivered,
                lost: &mut self.lost,
                delivered_packets: 0,
                delivered_bytes: 0,
                lost_packets: 0,
                lost_bytes: 0,
            }
        }
    }

    #[test]
    fn segmentation_is_byte_accurate() {
        let mut rlc = RlcEntity::new();
        let mut sink = Sink::new();
        for id in 0..3 {
            rlc.enqueue(1000, id);
        }
        let tb = rlc.fill(0, 1500);
        assert_eq!(tb.segments(), [Segment { start: 0, end: 1500, rlc_retx: 0 }]);
        rlc.decoded(&tb, &mut sink.resolved());
        // Packet 0 complete, packet 1 half carried.
        assert_eq!(sink.delivered, [(UeId(0), 0)]);
        assert_eq!(rlc.waiting_bytes(), 1500);
        let tb = rlc.fill(1, 499);
        rlc.decoded(&tb, &mut sink.resolved());
        assert_eq!(sink.delivered.len(), 1);
        let tb = rlc.fill(2, 1);
        rlc.decoded(&tb, &mut sink.resolved());
        assert_eq!(sink.delivered, [(UeId(0), 0), (UeId(0), 1)]);
    }

    #[test]
    fn in_order_delivery_and_retransmission() {
        let mut rlc = RlcEntity::new();
        let mut sink = Sink::new();
        rlc.enqueue(100, 7);
        rlc.enqueue(100, 8);
        let first = rlc.fill(0, 100);
        let second = rlc.fill(1, 100);
        rlc.decoded(&second, &mut sink.resolved());
        // Packet 8 is complete but waits for packet 7.
        assert!(sink.delivered.is_empty());
        rlc.nacked(5, &first, 40, 1, &mut sink.resolved());
        assert_eq!(rlc.waiting_bytes(), 100);
        assert_eq!(rlc.sendable_bytes(44), 0);
        assert_eq!(rlc.sendable_bytes(45), 100);
        assert_eq!(rlc.fill(44, 1000).len_bytes(), 0);
        let retx = rlc.fill(45, 1000);
        assert!(retx.carries_rlc_retx());
        assert_eq!(rlc.counters.retx_pdus, 1);
        rlc.decoded(&retx, &mut sink.resolved());
        assert_eq!(sink.delivered, [(UeId(0), 7), (UeId(0), 8)]);
        assert!(!rlc.holds_packets());
    }

    #[test]
    fn loss_after_the_limit_skips_the_rest_of_the_packet() {
        let mut rlc = RlcEntity::new();
        let mut sink = Sink::new();
        rlc.enqueue(300, 1);
        rlc.enqueue(100, 2);
        let head = rlc.fill(0, 100);
        let middle = rlc.fill(1, 100);
        // The first 100 bytes fail for good (no RLC retransmission allowed)...
        rlc.nacked(2, &head, 40, 0, &mut sink.resolved());
        assert_eq!(sink.lost, [(UeId(0), 1, DropCause::RlcLoss)]);
        assert_eq!(rlc.counters.lost_packets, 1);
        // ...the rest of packet 1 is not sent; packet 2 is.
        let next = rlc.fill(3, 1000);
        assert_eq!(next.segments(), [Segment { start: 300, end: 400, rlc_retx: 0 }]);
        rlc.nacked(4, &middle, 40, 1, &mut sink.resolved());
        assert_eq!(rlc.waiting_bytes(), 100);
        // The pending retransmission belongs to the lost packet: skipped, not sent.
        let retx = rlc.fill(50, 1000);
        assert_eq!(retx.len_bytes(), 0);
        assert_eq!(rlc.waiting_bytes(), 0);
        rlc.decoded(&next, &mut sink.resolved());
        assert_eq!(sink.delivered, [(UeId(0), 2)]);
    }
}

//! The uplink MAC of one UE: scheduling request, grant, and the uplink capacity per
//! subframe. Pure logic in emulated time; the data plane's cell thread drives it.
//!
//! A UE with nothing to send has no grant. When a packet arrives at an empty uplink buffer
//! the UE waits for its next scheduling-request (SR) opportunity (every `sr_period`), and
//! the grant arrives `grant_delay` later; packets that arrive while data is queued ride on
//! the grants already flowing (their buffer status goes with the data). From its grant on,
//! the queue drains by the subframe's uplink capacity, byte-accurately: a packet leaves when
//! its last byte has been carried.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::conditions::{Capacity, Conditions, MahimahiConditions};
use crate::delay::{Nanos, NANOS_PER_MS};

/// Uplink capacity per subframe.
#[derive(Debug, Clone)]
pub enum UplinkCapacity {
    /// The uplink is not the bottleneck.
    Unlimited,
    /// Bits per subframe, one value per ms (the trace's `ul_capacity_bits`), played from
    /// row `offset_ms` on, repeating with its length.
    PerSubframe {
        /// Bits per subframe.
        bits: Arc<[u32]>,
        /// Row played at time zero.
        offset_ms: u64,
    },
    /// A Mahimahi uplink trace (open-loop byte budget per subframe).
    Mahimahi(MahimahiConditions),
    /// A constant rate, bits per second.
    Rate(u64),
}

impl UplinkCapacity {
    /// Bits the uplink carries in subframe `t_ms`; `None` for unlimited.
    fn bits(&self, t_ms: u64) -> Option<u64> {
        match self {
            UplinkCapacity::Unlimited => None,
            UplinkCapacity::PerSubframe { bits, offset_ms } => {
                // An empty series carries nothing (a trace always has rows; the enum is public).
                let n = bits.len() as u64;
                let row = t_ms.saturating_add(*offset_ms).checked_rem(n)?;
                Some(bits.get(row as usize).map_or(0, |&b| u64::from(b)))
            }
            // After a trace that does not loop has ended, nothing more is carried.
            UplinkCapacity::Mahimahi(trace) => Some(match trace.at(t_ms).map(|c| c.capacity) {
                Some(Capacity::OpenLoop { bytes }) => u64::from(bytes) * 8,
                _ => 0,
            }),
            // Integer arithmetic without drift: the bits of subframe k are the increase of
            // floor(rate × t) over that millisecond.
            // floor(rate × t) is computed in 128 bits: a 1 Tbit/s rate would overflow 64 bits
            // after five hours.
            UplinkCapacity::Rate(bps) => {
                let floor_bits = |t: u64| u128::from(*bps) * u128::from(t) / 1000;
                Some(u64::try_from(floor_bits(t_ms.saturating_add(1)) - floor_bits(t_ms)).unwrap_or(u64::MAX))
            }
        }
    }
}

/// SR period and grant delay.
#[derive(Debug, Clone, Copy)]
pub struct UplinkTiming {
    /// Scheduling-request period, ns (0: a request can go at once).
    pub sr_period_ns: Nanos,
    /// This UE's SR opportunities are at `offset + n × period`, ns; spreading UEs' offsets
    /// keeps them from all asking in the same subframe.
    pub sr_offset_ns: Nanos,
    /// From the SR to the first subframe the grant allows sending in, ns.
    pub grant_delay_ns: Nanos,
}

struct Queued<T> {
    item: T,
    ready_ns: Nanos,
    bits_left: u64,
    len_bytes: u32,
}

/// One UE's uplink buffer, drop-tail at a byte limit.
pub struct Uplink<T> {
    queue: VecDeque<Queued<T>>,
    timing: UplinkTiming,
    capacity: UplinkCapacity,
    queued_bytes: u64,
    limit_bytes: u64,
}

impl<T> Uplink<T> {
    /// An empty uplink holding at most `limit_bytes`.
    pub fn new(timing: UplinkTiming, capacity: UplinkCapacity, limit_bytes: u64) -> Uplink<T> {
        Uplink { queue: VecDeque::new(), timing, capacity, queued_bytes: 0, limit_bytes }
    }

    /// A packet of `len_bytes` reached the UE's uplink buffer at `t_ns`. Gives the packet
    /// back if the buffer is full (drop-tail).
    pub fn arrive(&mut self, t_ns: Nanos, len_bytes: u32, item: T) -> Result<(), T> {
        if self.queued_bytes + u64::from(len_bytes) > self.limit_bytes {
            return Err(item);
        }
        let ready_ns = match self.queue.back() {
            // Data is flowing: the grant for this packet comes with the ones already given.
            Some(last) => last.ready_ns.max(t_ns),
            None => self.next_sr_ns(t_ns) + self.timing.grant_delay_ns,
        };
        self.queued_bytes += u64::from(len_bytes);
        self.queue.push_back(Queued { item, ready_ns, bits_left: u64::from(len_bytes) * 8, len_bytes });
        Ok(())
    }

    /// The first SR opportunity at or after `t_ns`.
    fn next_sr_ns(&self, t_ns: Nanos) -> Nanos {
        let UplinkTiming { sr_period_ns: period, sr_offset_ns: offset, .. } = self.timing;
        if period <= 0 {
            return t_ns;
        }
        let since = t_ns - offset;
        offset + since.div_euclid(period) * period + if since.rem_euclid(period) == 0 { 0 } else { period }
    }

    /// Transmits in subframe `t_ms` (which starts at `t_ms` ms), whose capacity is the
    /// trace's at trace time `trace_ms` (`t_ms` unless the traces were moved, see
    /// `Cell::seek_trace`): packets granted by then drain by that capacity; each packet
    /// whose last byte went is passed to `sent`. `limit_bits`: at most this many bits in
    /// the subframe whatever the capacity (a 3G common channel's budget).
    pub fn transmit(&mut self, t_ms: u64, trace_ms: u64, limit_bits: Option<u64>, mut sent: impl FnMut(T)) {
        let start_ns = t_ms as Nanos * NANOS_PER_MS;
        let mut budget = match (self.capacity.bits(trace_ms), limit_bits) {
            (Some(capacity), Some(limit)) => Some(capacity.min(limit)),
            (capacity, limit) => capacity.or(limit),
        };
        while let Some(head) = self.queue.front_mut() {
            if head.ready_ns > start_ns || budget == Some(0) {
                break;
            }
            let carried = budget.map_or(head.bits_left, |b| b.min(head.bits_left));
            head.bits_left -= carried;
            if let Some(b) = budget.as_mut() {
                *b -= carried;
            }
            if head.bits_left > 0 {
                break;
            }
            if let Some(done) = self.queue.pop_front() {
                self.queued_bytes -= u64::from(done.len_bytes);
                sent(done.item);
            }
        }
    }

    /// Bytes waiting in the buffer.
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Removes every waiting packet (at shutdown).
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.queued_bytes = 0;
        self.queue.drain(..).map(|q| q.item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = NANOS_PER_MS;

    fn timing() -> UplinkTiming {
        UplinkTiming { sr_period_ns: 10 * MS, sr_offset_ns: 0, grant_delay_ns: 8 * MS }
    }

    fn run(up: &mut Uplink<u32>, from_ms: u64, to_ms: u64) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        for t in from_ms..to_ms {
            up.transmit(t, t, None, |id| out.push((t, id)));
        }
        out
    }

    #[test]
    fn idle_uplink_waits_for_sr_and_grant() {
        let mut up = Uplink::new(timing(), UplinkCapacity::Unlimited, u64::MAX);
        up.arrive(3 * MS + 200, 100, 1).expect("room");
        // SR at 10 ms, grant usable from 18 ms.
        assert_eq!(run(&mut up, 0, 30), vec![(18, 1)]);
        // Queue empty again: the next packet asks anew.
        up.arrive(30 * MS, 100, 2).expect("room");
        assert_eq!(run(&mut up, 30, 50), vec![(38, 2)]);
    }

    #[test]
    fn backlogged_packets_ride_the_grant_and_capacity_is_byte_accurate() {
        // 1200 bits per subframe: a 300-byte packet takes two subframes.
        let mut up = Uplink::new(timing(), UplinkCapacity::PerSubframe { bits: vec![1200].into(), offset_ms: 0 }, 1000);
        up.arrive(0, 300, 1).expect("room");
        up.arrive(MS, 100, 2).expect("room");
        assert_eq!(run(&mut up, 0, 30), vec![(9, 1), (10, 2)]);
    }

    #[test]
    fn a_full_buffer_drops_the_arrival() {
        let mut up = Uplink::new(timing(), UplinkCapacity::Unlimited, 1000);
        up.arrive(0, 600, 1).expect("room");
        assert_eq!(up.arrive(0, 600, 2), Err(2));
        up.arrive(0, 400, 3).expect("room");
        assert_eq!(up.queued_bytes(), 1000);
    }

    #[test]
    fn mahimahi_uplink_gives_1500_bytes_per_opportunity() {
        let trace = MahimahiConditions::parse("1\n1\n3\n").expect("valid");
        let cap = UplinkCapacity::Mahimahi(trace);
        assert_eq!((0..4).map(|t| cap.bits(t)).collect::<Vec<_>>(), [Some(0), Some(24_000), Some(0), Some(12_000)]);
    }

    #[test]
    fn rate_capacity_has_no_drift() {
        let cap = UplinkCapacity::Rate(1_500);
        let total: u64 = (0..1000).map(|t| cap.bits(t).unwrap_or(0)).sum();
        assert_eq!(total, 1_500);
    }
}

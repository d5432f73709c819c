//! The feed's delivery timing: as a phone's diag port delivers (`phone`, the default) or
//! one subframe at a time as it happens (`ideal`).
//!
//! A phone's modem puts the records of several subframes in one log packet and sends it
//! when it is full or at its flush tick, whichever comes first: a full packet goes at once,
//! a flushed one is as late as its last record is old. Measured on the real diag logs
//! (`traces/diaglog/feedtiming.py`, result in `traces/diaglog/phone-feed-timing.json`):
//! 0xB173 packets hold at most 21 records, one per subframe in which the UE received a
//! transport block, and are flushed every 300 ms; full packets go 0–1 ms after their last
//! record, flushed ones 0.8–305 ms after it (median 49 ms). Replayed over a log's own records,
//! this rule gives its packets: the 2017 log's sizes exactly and its delays within 0.5 ms
//! (`packing_rule_check` in the result).
//!
//! Here every subframe's messages (PDSCH, measurement, MAC, statistics) are held together
//! and go out in one delivery when the UE has been scheduled in `records_per_packet`
//! subframes since the last delivery, or after the subframe before each flush tick
//! (subframes `k × flush_period_ms − 1`). Subframes without a transport block ride along
//! without counting, as a phone logs no PDSCH record for them. The messages themselves are
//! unchanged (one per subframe, stamped with their subframe), so both decoders read them
//! as before. The packing is decided in the diag thread; the cell thread hands each
//! subframe over as it happens, whatever the timing.

use serde::{Deserialize, Serialize};

/// How the diag feed delivers (`diag.feed_timing`).
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum FeedTiming {
    /// In packets as a phone's diag port sends them (`diag.phone`).
    #[default]
    Phone,
    /// Each subframe's messages as the subframe happens.
    Ideal,
}

/// The phone's packing (`diag.phone`), defaults measured on the real logs.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PhoneTiming {
    /// Subframes with a PDSCH transport block that fill a packet (0xB173 records): it goes
    /// at once. Default 21, the most any 0xB173 packet of the real logs held (both logs
    /// that have 0xB173 in numbers).
    pub records_per_packet: u32,
    /// The modem's flush tick, ms: what is held goes after subframe `k × flush_period_ms − 1`.
    /// Default 300, the commonest spacing of the logs' 0xB173 packets that were not full.
    pub flush_period_ms: u32,
}

impl Default for PhoneTiming {
    fn default() -> PhoneTiming {
        PhoneTiming { records_per_packet: 21, flush_period_ms: 300 }
    }
}

/// Largest `records_per_packet`: a 0xB173 packet counts its records in one byte.
pub const MAX_RECORDS_PER_PACKET: u32 = 255;
/// Largest `flush_period_ms` (the feed would be older than any use of it).
pub const MAX_FLUSH_PERIOD_MS: u32 = 10_000;

impl PhoneTiming {
    /// Checks the values: `Err((field, problem))`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(1..=MAX_RECORDS_PER_PACKET).contains(&self.records_per_packet) {
            return Err((
                "records_per_packet",
                format!("must be 1..={MAX_RECORDS_PER_PACKET}, got {}", self.records_per_packet),
            ));
        }
        if !(1..=MAX_FLUSH_PERIOD_MS).contains(&self.flush_period_ms) {
            return Err((
                "flush_period_ms",
                format!("must be 1..={MAX_FLUSH_PERIOD_MS}, got {}", self.flush_period_ms),
            ));
        }
        Ok(())
    }
}

/// One UE's packing: told of each subframe in order, says when what is held goes out.
#[derive(Debug, Clone)]
pub struct Packer {
    timing: PhoneTiming,
    /// Scheduled subframes held since the last delivery.
    records: u32,
}

impl Packer {
    /// A packer with nothing held.
    pub fn new(timing: PhoneTiming) -> Packer {
        Packer { timing, records: 0 }
    }

    /// Subframe `t_ms` (ms since time zero) has just been held; `scheduled`: it carries a
    /// PDSCH transport block. True when everything held is to be delivered now.
    pub fn after_subframe(&mut self, t_ms: u64, scheduled: bool) -> bool {
        self.records += u32::from(scheduled);
        let full = self.records >= self.timing.records_per_packet;
        let tick = (t_ms + 1) % u64::from(self.timing.flush_period_ms) == 0;
        if full || tick {
            self.records = 0;
        }
        full || tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (subframe delivered after, last scheduled subframe in it, scheduled subframes in it)
    /// of a run over `n` subframes where `scheduled(t)` says which carry a block.
    fn deliveries(timing: PhoneTiming, n: u64, scheduled: impl Fn(u64) -> bool) -> Vec<(u64, Option<u64>, u32)> {
        let mut p = Packer::new(timing);
        let mut out = Vec::new();
        let (mut last, mut count) = (None, 0);
        for t in 0..n {
            if scheduled(t) {
                last = Some(t);
                count += 1;
            }
            if p.after_subframe(t, scheduled(t)) {
                out.push((t, last, count));
                (last, count) = (None, 0);
            }
        }
        out
    }

    #[test]
    fn an_idle_ue_gets_one_delivery_per_flush_period() {
        let d = deliveries(PhoneTiming::default(), 3_000, |_| false);
        assert_eq!(d.len(), 10);
        assert!(d.iter().enumerate().all(|(k, &(t, _, _))| t == 300 * (k as u64 + 1) - 1));
    }

    #[test]
    fn a_busy_ue_gets_full_packets_at_once() {
        // Scheduled in every subframe: a delivery every 21 subframes, each right after its
        // last record (delay 0), and the tick's partial packets in between.
        let d = deliveries(PhoneTiming::default(), 3_000, |_| true);
        let full: Vec<_> = d.iter().filter(|&&(_, _, c)| c == 21).collect();
        assert!(full.iter().all(|&&(t, last, _)| last == Some(t)));
        assert!(full.len() >= 3_000 / 21 - 10);
        assert!(d.iter().all(|&(_, _, c)| c <= 21));
    }

    #[test]
    fn sparse_records_are_as_late_as_the_flush_tick_makes_them() {
        // One scheduled subframe in 37: packets never fill, every delivery is a tick, and a
        // packet's last record is 0..300 ms old when it goes (a phone's flushed packets).
        let d = deliveries(PhoneTiming::default(), 30_000, |t| t % 37 == 0);
        let delays: Vec<u64> = d.iter().filter_map(|&(t, last, _)| last.map(|l| t - l)).collect();
        assert!(d.iter().all(|&(t, _, c)| (t + 1) % 300 == 0 && c <= 9));
        assert!(delays.iter().all(|&x| x < 37));
        assert!(delays.iter().any(|&x| x > 20));
        // A longer gap between records, longer delays, up to the period.
        let d = deliveries(PhoneTiming::default(), 30_000, |t| t % 470 == 0);
        let max = d.iter().filter_map(|&(t, last, _)| last.map(|l| t - l)).max().unwrap();
        assert!((200..300).contains(&max), "{max}");
    }

    #[test]
    fn every_subframe_is_delivered_once_and_in_order() {
        let timing = PhoneTiming { records_per_packet: 5, flush_period_ms: 40 };
        let mut p = Packer::new(timing);
        let mut held = Vec::new();
        let mut delivered = Vec::new();
        for t in 0..1_000u64 {
            held.push(t);
            if p.after_subframe(t, t % 3 == 0 || (200..260).contains(&t)) {
                delivered.append(&mut held);
            }
        }
        assert_eq!(delivered, (0..delivered.len() as u64).collect::<Vec<_>>());
        assert!(held.len() < 40);
    }

    #[test]
    fn limits_are_checked_with_the_field_named() {
        assert!(PhoneTiming::default().validate().is_ok());
        let bad = PhoneTiming { records_per_packet: 0, ..Default::default() };
        assert_eq!(bad.validate().unwrap_err().0, "records_per_packet");
        let bad = PhoneTiming { flush_period_ms: 0, ..Default::default() };
        assert_eq!(bad.validate().unwrap_err().0, "flush_period_ms");
        let bad = PhoneTiming { records_per_packet: 256, ..Default::default() };
        assert!(bad.validate().unwrap_err().1.contains("256"));
    }
}

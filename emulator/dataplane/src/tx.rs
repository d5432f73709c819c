//! The writer thread: writes every packet to its TUN device at its due time.
//!
//! The cell thread hands over each packet with the time it is due (the end of the subframe
//! that carried it plus the air delay, and for the uplink the core delay too) at least a
//! subframe ahead. This thread keeps one FIFO per UE and direction ("lane"), sleeps until
//! the earliest head is due (a futex wait with an absolute deadline, which a hand-over of
//! an earlier packet interrupts), spins the last few microseconds ([`SpinMargin`], learnt
//! from how late the kernel wakes it) and writes. Delivery timing error = the time the
//! write is issued − the due time; the kernel runs the receiving stack inside the write,
//! which is the receiver's time, not the emulator's.
//!
//! With segmentation offload, consecutive segments of one super-packet, or datagrams of one
//! UDP flow, due at the same instant on the same lane go out as one merged write
//! (`crate::offload::Merge`).
//! Each written packet (each segment of a merged write) is counted, timed and logged
//! (packet log, in batches to the recorder).

use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use cell::TruthRecord;
use crossbeam_queue::ArrayQueue;
use serde::Serialize;

use crate::clock::{
    monotonic_now_ns, spin_until, Histogram, Nanos, SpinMargin, Summary, TimeBase, NANOS_PER_MS, NANOS_PER_US,
};
use crate::doorbell::Doorbell;
use crate::engine::{InFlight, Tally};
use crate::offload::Merge;
use crate::reader::{Devices, Direction};
use crate::records::{PacketEvent, PacketRecord, RecordQueues, PACKET_BATCH_ROWS};
use crate::tun::Tun;
use cell::delay::DelayLine;

/// How long after its last write the writer keeps waking on the flow's 1 ms rhythm by
/// itself (so the cell thread need not wake it for every subframe's packets), ns.
const RHYTHM_WINDOW_NS: Nanos = 50 * NANOS_PER_MS;

/// Most packets one merged write carries: a merged packet is at most 64 KB, so with the
/// smallest MSS an MTU allows (536 bytes) 123 TCP segments; UDP merges stop at the kernel's
/// 64 datagrams.
const MAX_MERGE_SEGMENTS: usize = 128;

/// One UE's direction: the writer's FIFO of packets for one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane(u32);

impl Lane {
    /// The lane of UE `ue`'s `direction`.
    pub fn of(ue: usize, direction: Direction) -> Lane {
        Lane(ue as u32 * 2 + direction as u32)
    }

    /// The UE and direction of the lane.
    pub fn ue_and_direction(self) -> (usize, Direction) {
        let direction = if self.0 % 2 == 0 { Direction::Downlink } else { Direction::Uplink };
        ((self.0 / 2) as usize, direction)
    }

    /// The lane at `index` of the per-lane counters.
    pub fn of_index(index: usize) -> Lane {
        Lane(index as u32)
    }

    fn index(self) -> usize {
        self.0 as usize
    }
}

/// A packet for the writer: its lane and due time (emulated ns).
#[derive(Debug)]
pub struct TxItem {
    /// Where it goes.
    pub lane: Lane,
    /// When it is due, emulated ns.
    pub due_ns: Nanos,
    /// The packet.
    pub item: InFlight,
}

/// The cell thread → writer hand-over: a bounded lock-free queue and a doorbell.
///
/// The writer publishes the due time it will be awake for (`ready_for_ns`) before it looks
/// at the queue and sleeps, so the cell thread rings only when it hands over a packet due
/// sooner: while a flow runs, the writer wakes once per subframe, on its own timer.
#[derive(Debug)]
pub struct TxQueue {
    items: ArrayQueue<TxItem>,
    bell: Doorbell,
    /// The writer will look at the queue in time for anything due at or after this,
    /// emulated ns (`Nanos::MAX`: it sleeps until rung).
    ready_for_ns: AtomicI64,
    closed: AtomicBool,
}

impl TxQueue {
    /// A queue of `capacity` packets (the buffer pool's size: every packet fits).
    pub fn new(capacity: usize) -> TxQueue {
        TxQueue {
            items: ArrayQueue::new(capacity.max(1)),
            bell: Doorbell::new(),
            ready_for_ns: AtomicI64::new(Nanos::MAX),
            closed: AtomicBool::new(false),
        }
    }

    /// Hands over a packet (without waking the writer: [`TxQueue::wake_for`] after a batch).
    pub fn push(&self, item: TxItem) -> Result<(), TxItem> {
        self.items.push(item)
    }

    /// Wakes the writer if it would not otherwise look at the queue before `due_ns`
    /// (emulated), the earliest due time just handed over.
    pub fn wake_for(&self, due_ns: Nanos) {
        if self.ready_for_ns.load(Ordering::SeqCst) > due_ns {
            self.bell.ring();
        }
    }

    /// Wakes the writer to look at the queue and the clock (after a pause).
    pub fn ring(&self) {
        self.bell.ring();
    }

    /// No more packets will come: the writer ends.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.bell.ring();
    }
}

/// Per UE and direction, what the writer counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct LaneCounters {
    /// Written to the destination TUN.
    pub delivered: Tally,
    /// Refused by the destination TUN's write.
    pub write_errors: Tally,
    /// Not yet due at shutdown.
    pub in_flight_at_shutdown: Tally,
}

/// What the writer thread counted.
#[derive(Debug, Clone)]
pub struct WriterReport {
    /// Per lane (`Lane::of(ue, direction)`).
    pub lanes: Vec<LaneCounters>,
    /// Delivery timing error of downlink packets, µs.
    pub downlink_delivery_error: Summary,
    /// Delivery timing error of uplink packets, µs.
    pub uplink_delivery_error: Summary,
    /// Packet-log rows dropped because the recorder fell behind.
    pub packet_events_dropped: u64,
    /// The writer's own figures.
    pub counters: TxCounters,
}

/// The writer's own figures, reported in `counters.json` as `tx`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TxCounters {
    /// `writev` calls.
    pub writes: u64,
    /// Writes that merged several packets (a super-packet's segments, a UDP flow's
    /// datagrams).
    pub merged_writes: u64,
    /// Packets written in merged writes.
    pub merged_segments: u64,
    /// The spin margin at the end, µs.
    pub spin_margin_us: f64,
    /// How late the kernel woke the writer for a deadline (before spinning the rest), µs:
    /// the machine's timer precision.
    pub timer_wake_lateness: Option<Summary>,
}

/// The writer thread's state.
pub struct Writer {
    queue: Arc<TxQueue>,
    devices: Arc<Devices>,
    time: Arc<TimeBase>,
    records: Arc<RecordQueues<TruthRecord>>,
    lanes: Vec<DelayLine<InFlight>>,
    lane_counters: Vec<LaneCounters>,
    dl_error: Histogram,
    ul_error: Histogram,
    events: Vec<PacketRecord>,
    /// Packets of the merged write being built (reused).
    group: Vec<InFlight>,
    margin: SpinMargin,
    wake_lateness: Histogram,
    /// Due time of the last write, emulated ns: the flow's rhythm.
    last_due_ns: Option<Nanos>,
    events_dropped: u64,
    counters: TxCounters,
}

impl Writer {
    /// A writer for `devices` (one downlink and one uplink lane per UE).
    pub fn new(
        queue: Arc<TxQueue>,
        devices: Arc<Devices>,
        time: Arc<TimeBase>,
        records: Arc<RecordQueues<TruthRecord>>,
    ) -> Writer {
        let n_lanes = 2 * devices.ues.len();
        Writer {
            queue,
            devices,
            time,
            records,
            lanes: (0..n_lanes).map(|_| DelayLine::new()).collect(),
            lane_counters: vec![LaneCounters::default(); n_lanes],
            dl_error: Histogram::new(),
            ul_error: Histogram::new(),
            events: Vec::new(),
            group: Vec::new(),
            margin: SpinMargin::new(),
            wake_lateness: Histogram::new(),
            last_due_ns: None,
            events_dropped: 0,
            counters: TxCounters::default(),
        }
    }

    /// Writes packets as they fall due until the queue is closed; returns the counters.
    pub fn run(mut self) -> WriterReport {
        // The due time this thread last said it will be awake for (see `TxQueue`).
        let mut ready_for = Nanos::MIN;
        loop {
            // Publish first, then take the ticket, then look at the queue: a packet handed
            // over after the look is either due after `ready_for` or rings the bell, which
            // makes the wait below return at once.
            self.queue.ready_for_ns.store(ready_for, Ordering::SeqCst);
            let ticket = self.queue.bell.ticket();
            self.take_items();
            if self.queue.closed.load(Ordering::SeqCst) {
                // Everything pushed before the close is in the queue now.
                self.take_items();
                break;
            }
            let target = if self.time.is_paused() { None } else { self.next_due().or_else(|| self.rhythm()) };
            let Some(due) = target else {
                if ready_for != Nanos::MAX {
                    ready_for = Nanos::MAX;
                    continue;
                }
                self.flush_events();
                self.queue.bell.wait(ticket, None);
                ready_for = Nanos::MIN;
                continue;
            };
            if due > ready_for {
                // Say so before sleeping on it, and look at the queue once more.
                ready_for = due;
                continue;
            }
            let due_mono = self.time.monotonic(due);
            let now = monotonic_now_ns();
            let wake_at = due_mono - self.margin.ns();
            if now < wake_at {
                self.flush_events();
                self.queue.bell.wait(ticket, Some(wake_at));
                let woke = monotonic_now_ns();
                // A ring wakes it before the time (a packet due sooner): nothing to learn.
                if woke >= wake_at {
                    self.margin.learn(woke - wake_at, woke);
                    self.wake_lateness.record(woke - wake_at);
                }
                // Awake: look again (a packet handed over meanwhile may be due sooner).
                ready_for = Nanos::MIN;
                continue;
            }
            ready_for = Nanos::MIN;
            spin_until(due_mono, now);
            self.write_due();
        }
        self.shut_down()
    }

    /// While a flow runs, the next time on its rhythm (the last write's due time plus whole
    /// subframes) after now: packets handed over for it need no wake-up call.
    fn rhythm(&self) -> Option<Nanos> {
        let last = self.last_due_ns?;
        let now = self.time.now();
        if now - last > RHYTHM_WINDOW_NS {
            return None;
        }
        let periods = (now - last) / NANOS_PER_MS + 1;
        Some(last + periods * NANOS_PER_MS)
    }

    /// Moves handed-over packets into their lanes.
    fn take_items(&mut self) {
        while let Some(TxItem { lane, due_ns, item }) = self.queue.items.pop() {
            if let Some(line) = self.lanes.get_mut(lane.index()) {
                line.push(due_ns, item);
            }
        }
    }

    /// The earliest due time of any lane's head.
    fn next_due(&self) -> Option<Nanos> {
        self.lanes.iter().filter_map(DelayLine::next_due_ns).min()
    }

    /// Writes every packet due by now, lane by lane.
    fn write_due(&mut self) {
        let now = self.time.now();
        let devices = Arc::clone(&self.devices);
        for index in 0..self.lanes.len() {
            let lane = Lane(index as u32);
            let (ue, direction) = lane.ue_and_direction();
            let tun = match direction {
                Direction::Downlink => &devices.ues[ue],
                Direction::Uplink => &devices.core,
            };
            while let Some((due, mut item)) = self.lanes[index].pop_due(now) {
                self.last_due_ns = Some(due);
                if tun.offload() {
                    if let Some(merge) = Merge::start(item.packet.bytes(), &item.offload) {
                        self.write_merged(tun, lane, due, item, merge);
                        continue;
                    }
                }
                self.write_single(tun, lane, due, &mut item);
            }
        }
    }

    /// Writes one packet alone, its checksum completed.
    fn write_single(&mut self, tun: &Tun, lane: Lane, due: Nanos, item: &mut InFlight) {
        let hdr = item.offload.complete_checksum(item.packet.bytes_mut()).to_bytes();
        let actual = self.time.now();
        let bytes = item.packet.bytes();
        let with_hdr = [IoSlice::new(&hdr), IoSlice::new(bytes)];
        let parts = if tun.offload() { &with_hdr[..] } else { &with_hdr[1..] };
        let ok = tun.write_parts(parts).is_ok();
        self.counters.writes += 1;
        self.account(lane, due, actual, item, ok);
    }

    /// Writes `first` and the segments after it in lane `lane` that are due at the same
    /// instant and continue its super-packet, as one packet (with a partial checksum, as a
    /// receiver's GRO leaves one); `first` alone if none follows.
    fn write_merged(&mut self, tun: &Tun, lane: Lane, due: Nanos, mut first: InFlight, mut merge: Merge) {
        let line = &mut self.lanes[lane.index()];
        let followed = line
            .front()
            .is_some_and(|(next_due, next)| next_due == due && merge.follows(next.packet.bytes(), &next.offload));
        if !followed {
            self.write_single(tun, lane, due, &mut first);
            return;
        }
        self.group.clear();
        self.group.push(first);
        while self.group.len() < MAX_MERGE_SEGMENTS {
            let Some((next_due, next)) = line.front() else { break };
            if next_due != due || merge.extend(next.packet.bytes(), &next.offload).is_none() {
                break;
            }
            if let Some((_, next)) = line.pop_due(due) {
                self.group.push(next);
            }
        }
        let header_len = merge.header_len();
        let (vnet, headers) = merge.finish();
        // On the stack: this thread allocates nothing per write.
        let mut parts = [IoSlice::new(&[]); 2 + MAX_MERGE_SEGMENTS];
        parts[0] = IoSlice::new(&vnet);
        parts[1] = IoSlice::new(headers);
        for (part, item) in parts[2..].iter_mut().zip(&self.group) {
            *part = IoSlice::new(&item.packet.bytes()[header_len..]);
        }
        let actual = self.time.now();
        let ok = tun.write_parts(&parts[..2 + self.group.len()]).is_ok();
        self.counters.writes += 1;
        self.counters.merged_writes += 1;
        self.counters.merged_segments += self.group.len() as u64;
        let group = std::mem::take(&mut self.group);
        for item in &group {
            self.account(lane, due, actual, item, ok);
        }
        self.group = group;
        // The buffers go back to the pool now, not at the next merge.
        self.group.clear();
    }

    /// Counts, times and logs one packet written (or refused) at `actual`.
    fn account(&mut self, lane: Lane, due: Nanos, actual: Nanos, item: &InFlight, ok: bool) {
        let (ue, direction) = lane.ue_and_direction();
        let len = item.packet.len_bytes();
        let c = &mut self.lane_counters[lane.index()];
        if !ok {
            c.write_errors.add(len);
            return;
        }
        c.delivered.add(len);
        match direction {
            Direction::Downlink => self.dl_error.record(actual - due),
            Direction::Uplink => self.ul_error.record(actual - due),
        }
        if self.events.len() >= PACKET_BATCH_ROWS {
            self.flush_events();
        }
        if self.events.capacity() == 0 {
            self.events = self.records.batch();
        }
        self.events.push(PacketRecord {
            actual_ns: actual,
            scheduled_ns: due,
            arrival_ns: item.arrival_ns,
            ue: ue as u16,
            bytes: len as u32,
            event: PacketEvent::Deliver,
            direction,
        });
    }

    /// Hands the packet-log rows collected so far to the recorder.
    fn flush_events(&mut self) {
        if self.events.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.events);
        if let Err(batch) = self.records.deliveries.push(batch) {
            self.events_dropped += batch.len() as u64;
        }
    }

    /// Counts the packets not yet due and returns the report.
    fn shut_down(mut self) -> WriterReport {
        for (index, line) in self.lanes.iter_mut().enumerate() {
            for (_, item) in line.drain() {
                self.lane_counters[index].in_flight_at_shutdown.add(item.packet.len_bytes());
            }
        }
        self.flush_events();
        self.counters.spin_margin_us = self.margin.ns() as f64 / NANOS_PER_US as f64;
        self.counters.timer_wake_lateness = Some(self.wake_lateness.summary());
        WriterReport {
            lanes: self.lane_counters,
            downlink_delivery_error: self.dl_error.summary(),
            uplink_delivery_error: self.ul_error.summary(),
            packet_events_dropped: self.events_dropped,
            counters: self.counters,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_name_ue_and_direction() {
        for ue in [0, 1, 44] {
            for direction in [Direction::Downlink, Direction::Uplink] {
                assert_eq!(Lane::of(ue, direction).ue_and_direction(), (ue, direction));
            }
        }
        assert_eq!(Lane::of(3, Direction::Uplink).index(), 7);
    }
}

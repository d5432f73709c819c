//! The cell thread: the real-time subframe loop and every delay line.
//!
//! ```text
//! downlink: core TUN ─▶ core delay ─▶ Cell::enqueue … run_subframe(k) ─▶ delivered at end of k + air ─▶ UE TUN
//! uplink:   UE TUN ─▶ SR + grant, UL capacity per subframe k ─▶ end of k + air + core delay ─▶ core TUN
//! ```
//!
//! The thread sleeps until the next deadline, the earlier of the next subframe boundary and
//! the next packet due at a TUN, so writes happen at their due time and not only at
//! subframe boundaries. Subframe k runs at k ms: packets whose core delay ended by then are
//! enqueued, the cell runs, delivered packets are due at (k + 1) ms + air delay. A late
//! wake-up runs the missed subframes back to back (the emulated timeline has no holes).
//! Everything that leaves this thread (diag, truth, packet log) goes through bounded
//! channels with `try_send`: this thread never waits for another.

use cell::{Cell, DiagRecord, DropCause, Enqueued, RrcState, SubframeOutput, TruthRecord, UeId};
use crossbeam_channel::{Receiver, Sender};
use serde::Serialize;
use std::sync::Arc;

use crate::clock::{monotonic_now_ns, sleep_until, Histogram, Nanos, Summary, TimeBase, NANOS_PER_MS};
use crate::delay::DelayLine;
use crate::diag::DiagBatch;
use crate::model::UeLinks;
use crate::pool::Packet;
use crate::reader::{Arrival, Devices, Direction};
use crate::records::{PacketEvent, PacketRecord, Record, TruthRow};
use crate::signals::Signals;
use crate::tun::Tun;
use crate::uplink::{Uplink, UplinkTiming};

/// How long the paused loop sleeps between looks at the signal flags, ns.
const PAUSE_POLL_NS: Nanos = 5 * NANOS_PER_MS;

/// A packet inside the emulator, the cell's handle.
#[derive(Debug)]
pub struct InFlight {
    packet: Packet,
    /// When it was read from its TUN, emulated ns.
    arrival_ns: Nanos,
}

/// Packets and bytes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Tally {
    /// Packets.
    pub packets: u64,
    /// Bytes (IP packet lengths).
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, bytes: usize) {
        self.packets += 1;
        self.bytes += bytes as u64;
    }
}

/// One direction of one UE.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DirectionCounters {
    /// Read from the source TUN and accepted.
    pub received: Tally,
    /// Written to the destination TUN.
    pub delivered: Tally,
    /// Dropped by a full queue: the base station's (downlink) or the UE's uplink buffer.
    pub dropped_overflow: Tally,
    /// Lost by RLC (downlink only).
    pub dropped_rlc: Tally,
    /// Refused by the destination TUN's write.
    pub write_errors: Tally,
    /// Still inside the emulator at shutdown (delay lines, queues).
    pub in_flight_at_shutdown: Tally,
}

/// Per-UE counters.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct UeCounters {
    /// Core → UE.
    pub downlink: DirectionCounters,
    /// UE → core.
    pub uplink: DirectionCounters,
}

/// What the cell thread counted.
#[derive(Debug, Clone, Serialize)]
pub struct EngineCounters {
    /// Per UE.
    pub ues: Vec<UeCounters>,
    /// Subframes run.
    pub subframes: u64,
    /// Time spent paused, ms.
    pub paused_ms: f64,
    /// Lateness of the cell thread's wake-up for each subframe, µs.
    pub subframe_lateness: Summary,
    /// Delivery timing error (actual write − scheduled time) of downlink packets, µs.
    pub downlink_delivery_error: Summary,
    /// Delivery timing error of uplink packets, µs.
    pub uplink_delivery_error: Summary,
    /// Subframes whose diag records were dropped because the diag thread fell behind.
    pub diag_batches_dropped: u64,
    /// Ground-truth rows dropped because the recorder fell behind.
    pub truth_rows_dropped: u64,
    /// Packet-log events dropped because the recorder fell behind.
    pub packet_events_dropped: u64,
    /// Packets the cell refused (zero length).
    pub rejected_by_cell: u64,
    /// Whether the run ended because a trace that does not loop ran out.
    pub trace_ended: bool,
}

/// One UE's lines.
struct Lane {
    links: UeLinks,
    /// Downlink packets in the core network.
    to_bs: DelayLine<InFlight>,
    /// Downlink packets carried by the air, waiting for their delivery time.
    to_ue: DelayLine<InFlight>,
    /// The UE's uplink buffer.
    uplink: Uplink<InFlight>,
    /// Uplink packets past the air, in the core network.
    to_core: DelayLine<InFlight>,
}

/// Channels to the other threads.
pub struct Outputs {
    /// Diag batches, one per subframe.
    pub diag: Sender<DiagBatch<DiagRecord>>,
    /// Ground truth and packet events.
    pub records: Sender<Record<TruthRecord>>,
}

/// The timing parameters of the engine.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Air delay, ns.
    pub air_ns: Nanos,
    /// SR period, ns.
    pub sr_period_ns: Nanos,
    /// Grant delay, ns.
    pub grant_delay_ns: Nanos,
    /// Stop after this subframe count, if set.
    pub duration_ms: Option<u64>,
}

/// The cell thread's state.
pub struct Engine {
    cell: Cell<InFlight>,
    out: SubframeOutput<InFlight>,
    lanes: Vec<Lane>,
    devices: Arc<Devices>,
    arrivals: Receiver<Arrival>,
    outputs: Outputs,
    timing: Timing,
    time: TimeBase,
    next_subframe: u64,
    /// The last pause, monotonic ns (empty before the first).
    last_pause_mono_ns: std::ops::Range<Nanos>,
    lateness: Histogram,
    dl_error: Histogram,
    ul_error: Histogram,
    counters: EngineCounters,
}

impl Engine {
    /// An engine whose time zero is `time`'s.
    pub fn new(
        cell: Cell<InFlight>,
        links: Vec<UeLinks>,
        devices: Arc<Devices>,
        arrivals: Receiver<Arrival>,
        outputs: Outputs,
        timing: Timing,
        time: TimeBase,
    ) -> Engine {
        let n = links.len();
        let lanes = links
            .into_iter()
            .enumerate()
            .map(|(i, links)| {
                let ul_timing = UplinkTiming {
                    sr_period_ns: timing.sr_period_ns,
                    // Spread the UEs' SR opportunities over the period, 1 ms apart.
                    sr_offset_ns: if timing.sr_period_ns > 0 {
                        (i as Nanos * NANOS_PER_MS) % timing.sr_period_ns
                    } else {
                        0
                    },
                    grant_delay_ns: timing.grant_delay_ns,
                };
                Lane {
                    uplink: Uplink::new(ul_timing, links.uplink.clone(), links.uplink_queue_limit_bytes),
                    links,
                    to_bs: DelayLine::new(),
                    to_ue: DelayLine::new(),
                    to_core: DelayLine::new(),
                }
            })
            .collect();
        Engine {
            cell,
            out: SubframeOutput::new(),
            lanes,
            devices,
            arrivals,
            outputs,
            timing,
            time,
            next_subframe: 0,
            last_pause_mono_ns: 0..0,
            lateness: Histogram::new(),
            dl_error: Histogram::new(),
            ul_error: Histogram::new(),
            counters: EngineCounters {
                ues: vec![UeCounters::default(); n],
                subframes: 0,
                paused_ms: 0.0,
                subframe_lateness: Histogram::new().summary(),
                downlink_delivery_error: Histogram::new().summary(),
                uplink_delivery_error: Histogram::new().summary(),
                diag_batches_dropped: 0,
                truth_rows_dropped: 0,
                packet_events_dropped: 0,
                rejected_by_cell: 0,
                trace_ended: false,
            },
        }
    }

    /// Runs until a stop signal, the configured duration, or the end of a trace that does
    /// not loop; returns the counters. Packets still inside are counted and dropped.
    pub fn run(mut self, signals: &Signals) -> EngineCounters {
        loop {
            if signals.stop_requested() {
                break;
            }
            if signals.take_pause() {
                self.pause(signals);
                continue;
            }
            // A resume without a pause means nothing; clear it so it cannot end the next
            // pause early.
            signals.take_resume();
            let deadline = self.next_deadline();
            let now = self.time.emulated(sleep_until(self.time.monotonic(deadline)));
            // Packets due now go out before the subframe runs: with an integer air delay
            // their time coincides with a boundary, and running the cell first would make
            // them late by the subframe's processing time.
            self.write_due();
            self.take_arrivals();
            let boundary = self.next_subframe as Nanos * NANOS_PER_MS;
            if now >= boundary {
                self.lateness.record(now - boundary);
                self.run_subframe(now - boundary);
                if self.finished() {
                    break;
                }
                self.write_due();
            }
        }
        self.shut_down()
    }

    /// Stays paused until resumed or stopped; the time spent does not count as emulated time.
    fn pause(&mut self, signals: &Signals) {
        let start = monotonic_now_ns();
        while !signals.take_resume() && !signals.stop_requested() {
            sleep_until(monotonic_now_ns() + PAUSE_POLL_NS);
            // Pauses asked for while paused change nothing.
            signals.take_pause();
        }
        let end = monotonic_now_ns();
        let paused_ns = end - start;
        self.last_pause_mono_ns = start..end;
        self.time.pause_for(paused_ns);
        self.counters.paused_ms += paused_ns as f64 / NANOS_PER_MS as f64;
    }

    /// Whether the duration is over or every trace ended.
    fn finished(&mut self) -> bool {
        if self.timing.duration_ms.is_some_and(|d| self.next_subframe >= d) {
            return true;
        }
        if self.cell.end_ms().is_some_and(|end| self.next_subframe >= end) {
            self.counters.trace_ended = true;
            return true;
        }
        false
    }

    /// The next subframe boundary or packet write, whichever is first (emulated ns).
    fn next_deadline(&self) -> Nanos {
        let boundary = self.next_subframe as Nanos * NANOS_PER_MS;
        self.lanes
            .iter()
            .flat_map(|l| [l.to_ue.next_due_ns(), l.to_core.next_due_ns()])
            .flatten()
            .fold(boundary, Nanos::min)
    }

    /// Moves packets read by the I/O thread into the core delay (downlink) or the UE's
    /// uplink buffer.
    fn take_arrivals(&mut self) {
        while let Ok(a) = self.arrivals.try_recv() {
            // A packet read while paused arrived, in emulated time, at the resume: the
            // clock stood still.
            let read_at = if self.last_pause_mono_ns.contains(&a.read_at_mono_ns) {
                self.last_pause_mono_ns.end
            } else {
                a.read_at_mono_ns
            };
            let arrival_ns = self.time.emulated(read_at);
            let ue = usize::from(a.ue);
            let Some(lane) = self.lanes.get_mut(ue) else { continue };
            let len = a.packet.len_bytes();
            let item = InFlight { packet: a.packet, arrival_ns };
            match a.direction {
                Direction::Downlink => {
                    self.counters.ues[ue].downlink.received.add(len);
                    lane.to_bs.push(arrival_ns + lane.links.core_down.at(arrival_ns), item);
                }
                Direction::Uplink => {
                    self.counters.ues[ue].uplink.received.add(len);
                    self.cell.uplink_activity(UeId(a.ue));
                    if let Err(item) = lane.uplink.arrive(arrival_ns, len as u32, item) {
                        self.counters.ues[ue].uplink.dropped_overflow.add(len);
                        let event = PacketEvent::DropOverflow;
                        log_drop(
                            &self.outputs,
                            &mut self.counters.packet_events_dropped,
                            arrival_ns,
                            ue,
                            &item,
                            event,
                            Direction::Uplink,
                        );
                    }
                }
            }
        }
    }

    /// Runs subframe `next_subframe`, woken `lateness_ns` after its boundary.
    fn run_subframe(&mut self, lateness_ns: Nanos) {
        let k = self.next_subframe;
        let start_ns = k as Nanos * NANOS_PER_MS;
        let end_ns = start_ns + NANOS_PER_MS;
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            while let Some((_, item)) = lane.to_bs.pop_due(start_ns) {
                let len = item.packet.len_bytes();
                match self.cell.enqueue(UeId(i as u16), len as u32, item) {
                    Enqueued::Queued => {}
                    Enqueued::Dropped(item, _) => {
                        self.counters.ues[i].downlink.dropped_overflow.add(len);
                        log_drop(
                            &self.outputs,
                            &mut self.counters.packet_events_dropped,
                            start_ns,
                            i,
                            &item,
                            PacketEvent::DropOverflow,
                            Direction::Downlink,
                        );
                    }
                    Enqueued::Rejected(_) => self.counters.rejected_by_cell += 1,
                }
            }
        }

        self.cell.run_subframe(k, &mut self.out);
        let deliver_at = end_ns + self.timing.air_ns;
        for (ue, item) in self.out.delivered.drain(..) {
            if let Some(lane) = self.lanes.get_mut(ue.index()) {
                lane.to_ue.push(deliver_at, item);
            }
        }
        for (ue, item, cause) in self.out.lost.drain(..) {
            let i = ue.index();
            if let Some(c) = self.counters.ues.get_mut(i) {
                c.downlink.dropped_rlc.add(item.packet.len_bytes());
            }
            let event = match cause {
                DropCause::Overflow => PacketEvent::DropOverflow,
                DropCause::RlcLoss => PacketEvent::DropRlc,
            };
            log_drop(
                &self.outputs,
                &mut self.counters.packet_events_dropped,
                start_ns,
                i,
                &item,
                event,
                Direction::Downlink,
            );
        }
        let batch = DiagBatch {
            timestamp_s: (self.time.origin_unix_ns() + start_ns) as f64 / 1e9,
            t_ms: k,
            records: std::mem::take(&mut self.out.diag),
        };
        if self.outputs.diag.try_send(batch).is_err() {
            self.counters.diag_batches_dropped += 1;
        }
        let row = TruthRow { t_ms: k, wake_lateness_ns: lateness_ns, truth: std::mem::take(&mut self.out.truth) };
        if self.outputs.records.try_send(Record::Truth(row)).is_err() {
            self.counters.truth_rows_dropped += 1;
        }

        for (i, lane) in self.lanes.iter_mut().enumerate() {
            // While the UE's radio connection is being set up its uplink waits too.
            if self.cell.rrc_state(UeId(i as u16)) != Some(RrcState::Connected) {
                continue;
            }
            let due = end_ns + self.timing.air_ns + lane.links.core_up.at(end_ns);
            let to_core = &mut lane.to_core;
            lane.uplink.transmit(k, |item| {
                to_core.push(due, item);
            });
        }
        self.next_subframe += 1;
        self.counters.subframes += 1;
    }

    /// Writes every packet whose delivery time has come.
    fn write_due(&mut self) {
        let devices = Arc::clone(&self.devices);
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            let c = &mut self.counters.ues[i];
            drain_line(
                &mut lane.to_ue,
                &devices.ues[i],
                &self.time,
                &mut c.downlink,
                &mut self.dl_error,
                i,
                Direction::Downlink,
                &self.outputs,
                &mut self.counters.packet_events_dropped,
            );
            drain_line(
                &mut lane.to_core,
                &devices.core,
                &self.time,
                &mut c.uplink,
                &mut self.ul_error,
                i,
                Direction::Uplink,
                &self.outputs,
                &mut self.counters.packet_events_dropped,
            );
        }
    }

    /// Counts what is still inside, drops it, and returns the counters.
    fn shut_down(mut self) -> EngineCounters {
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            let c = &mut self.counters.ues[i];
            for (_, item) in lane.to_bs.drain().chain(lane.to_ue.drain()) {
                c.downlink.in_flight_at_shutdown.add(item.packet.len_bytes());
            }
            for item in lane.uplink.drain().chain(lane.to_core.drain().map(|(_, item)| item)) {
                c.uplink.in_flight_at_shutdown.add(item.packet.len_bytes());
            }
            // Packets in the cell's queue: their bytes only (the cell does not give them back).
            if let Some(bytes) = self.cell.waiting_bytes(UeId(i as u16)) {
                c.downlink.in_flight_at_shutdown.bytes += bytes;
            }
        }
        self.counters.subframe_lateness = self.lateness.summary();
        self.counters.downlink_delivery_error = self.dl_error.summary();
        self.counters.uplink_delivery_error = self.ul_error.summary();
        self.counters
    }
}

/// Writes the due packets of `line` to `tun`, timing and logging each.
#[allow(clippy::too_many_arguments)] // the one place these meet; a struct would only rename them
fn drain_line(
    line: &mut DelayLine<InFlight>,
    tun: &Tun,
    time: &TimeBase,
    c: &mut DirectionCounters,
    error: &mut Histogram,
    ue: usize,
    direction: Direction,
    outputs: &Outputs,
    events_dropped: &mut u64,
) {
    while let Some((due, item)) = line.pop_due(time.now()) {
        let bytes = item.packet.bytes();
        // The packet is delivered when the kernel takes it: the write runs the receiving
        // namespace's stack inline, which is the receiver's time, not the emulator's.
        let actual = time.now();
        let result = tun.write(bytes);
        match result {
            Ok(_) => {
                c.delivered.add(bytes.len());
                error.record(actual - due);
                let record = PacketRecord {
                    actual_ns: actual,
                    scheduled_ns: due,
                    arrival_ns: item.arrival_ns,
                    ue: ue as u16,
                    bytes: bytes.len() as u32,
                    event: PacketEvent::Deliver,
                    direction,
                };
                if outputs.records.try_send(Record::Packet(record)).is_err() {
                    *events_dropped += 1;
                }
            }
            Err(_) => c.write_errors.add(bytes.len()),
        }
    }
}

/// Logs a drop at `t_ns`.
fn log_drop(
    outputs: &Outputs,
    events_dropped: &mut u64,
    t_ns: Nanos,
    ue: usize,
    item: &InFlight,
    event: PacketEvent,
    direction: Direction,
) {
    let record = PacketRecord {
        actual_ns: t_ns,
        scheduled_ns: t_ns,
        arrival_ns: item.arrival_ns,
        ue: ue as u16,
        bytes: item.packet.len_bytes() as u32,
        event,
        direction,
    };
    if outputs.records.try_send(Record::Packet(record)).is_err() {
        *events_dropped += 1;
    }
}

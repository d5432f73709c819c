//! The cell thread: the real-time subframe loop, the core delay and the uplink buffers.
//!
//! ```text
//! downlink: core TUN ─▶ core delay ─▶ Cell::enqueue … run_subframe(k) ─▶ due at end of k + air ─▶ writer
//! uplink:   UE TUN ─▶ SR + grant, UL capacity per subframe k ─▶ due at end of k + air + core delay ─▶ writer
//! ```
//!
//! The thread sleeps until each subframe boundary. Subframe k runs at k ms: packets read
//! before k ms are taken in, those whose core delay ended by then are enqueued, the cell
//! runs, delivered packets are handed to the writer thread (`crate::tx`) due at (k + 1) ms +
//! air delay, which is always ahead of now, so the writer has them before they are due and
//! this thread never writes to a TUN (a write runs the receiving namespace's stack inline,
//! tens of microseconds that would otherwise delay the clock). A late wake-up runs the
//! missed subframes back to back (the emulated timeline has no holes).
//!
//! An idle cell (nothing queued anywhere, no diag subscriber) gives the same outputs
//! whenever its subframes run, so once it has been idle for [`IDLE_HOLD_SUBFRAMES`] the
//! thread sleeps up to [`IDLE_BATCH_NS`] and runs them in a batch; the reader rings its
//! doorbell when a packet arrives, and the batch runs at once, each subframe seeing only
//! the packets read before its start. An idle emulator thus wakes 100 times a second, not
//! 1000; a paced flow whose packets leave the cell between arrivals (each would otherwise
//! cost a doorbell wake-up on top of the subframe's) keeps the 1 ms rhythm.
//!
//! Everything that leaves this thread (packets, diag, truth, packet-log drops) goes through
//! bounded lock-free queues: this thread never waits for another.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cell::events::{DownlinkPacket, EventTally};
use cell::{Cell, DropCause, Enqueued, SubframeOutput, TruthRecord, UeId, UplinkAllowance};
use serde::Serialize;

use crate::clock::{monotonic_now_ns, sleep_until, Histogram, Nanos, Summary, TimeBase, NANOS_PER_MS};
use crate::diag::{DiagBatch, DiagQueue};
use crate::doorbell::Doorbell;
use crate::flows::Flows;
use crate::handover::Handover;
use crate::model::UeLinks;
use crate::offload::Offload;
use crate::pool::Packet;
use crate::reader::{Arrival, Direction};
use crate::records::{PacketEvent, PacketRecord, RecordQueues, SubframeRecord};
use crate::signals::Signals;
use crate::tx::{Lane, TxItem, TxQueue};
use cell::delay::DelayLine;
use cell::uplink::{Uplink, UplinkTiming};

/// How long the paused loop sleeps between looks at the signal flags, ns.
const PAUSE_POLL_NS: Nanos = 5 * NANOS_PER_MS;

/// Longest an idle cell's subframes wait to be run in a batch, ns: a stop or pause signal
/// is seen within this, and the diag files get the idle subframes this late.
pub const IDLE_BATCH_NS: Nanos = 10 * NANOS_PER_MS;

/// Subframes a cell must have been idle in a row before its subframes are batched: short
/// gaps between a flow's packets keep the plain 1 ms rhythm, which costs one wake-up per
/// subframe instead of one per packet plus one per subframe.
pub const IDLE_HOLD_SUBFRAMES: u64 = 20;

/// The seek file's name in the output directory: SIGHUP reads a trace time, ms, from it.
pub const SEEK_FILE: &str = "seek";

/// The trace time a seek file asks for, ms; `None` when there is no file.
fn read_seek_file(path: &Path) -> Result<Option<u64>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("reading it: {e}")),
    };
    text.trim().parse::<u64>().map(Some).map_err(|_| format!("{:?} is not a trace time in ms", text.trim()))
}

/// A packet inside the emulator, the cell's handle.
#[derive(Debug)]
pub struct InFlight {
    /// The packet.
    pub packet: Packet,
    /// How it goes back to a TUN.
    pub offload: Offload,
    /// When it was read from its TUN, emulated ns.
    pub arrival_ns: Nanos,
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
    /// Counts one packet of `bytes`.
    pub fn add(&mut self, bytes: usize) {
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
    /// Dropped by a scripted drop event (downlink only).
    pub dropped_event: Tally,
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
    /// Lateness of the cell thread's wake-up for each subframe it ran on time (subframes of
    /// an idle cell, run in batches on purpose, are not counted), µs.
    pub subframe_lateness: Summary,
    /// Subframes run in idle batches.
    pub idle_subframes: u64,
    /// Delivery timing error (actual write − scheduled time) of downlink packets, µs (from
    /// the writer thread).
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
    /// Packets dropped because the writer's queue was full (it holds as many packets as
    /// the buffer pool, so never in practice).
    pub tx_queue_full: u64,
    /// Whether the run ended because a trace that does not loop ran out.
    pub trace_ended: bool,
    /// Seeks applied (SIGHUP with a valid `seek` file).
    pub seeks: u64,
    /// Seek files refused (not a trace time), renamed `seek.rejected`.
    pub seeks_rejected: u64,
    /// What each scripted event did (`events`, in config order); each seek re-armed them.
    pub events: Vec<EventTally>,
}

/// One UE's lines on the cell thread.
struct UeLane {
    links: UeLinks,
    /// Downlink packets in the core network.
    to_bs: DelayLine<InFlight>,
    /// The UE's uplink buffer.
    uplink: Uplink<InFlight>,
}

/// The queues to the other threads.
pub struct Outputs {
    /// Packets to write, to the writer thread.
    pub tx: Arc<TxQueue>,
    /// Diag records, to the diag thread.
    pub diag: Arc<DiagQueue>,
    /// Ground truth and packet-log drops, to the recorder.
    pub records: Arc<RecordQueues<TruthRecord>>,
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
    lanes: Vec<UeLane>,
    arrivals: Arc<Handover<Arrival>>,
    /// Rung by the reader when it hands over packets (it wakes an idle wait).
    arrival_bell: Arc<Doorbell>,
    /// Packets taken from `arrivals` whose subframe has not come yet, in read order.
    staged: VecDeque<Arrival>,
    outputs: Outputs,
    timing: Timing,
    time: Arc<TimeBase>,
    next_subframe: u64,
    /// The last subframe run with something queued in the cell or on its way to it.
    last_busy_subframe: u64,
    /// The last pause, monotonic ns (empty before the first).
    last_pause_mono_ns: std::ops::Range<Nanos>,
    lateness: Histogram,
    /// Drops decided since the last subframe record.
    drops: Vec<PacketRecord>,
    counters: EngineCounters,
    /// Where SIGHUP finds the trace time to seek to (see [`Engine::with_seek_file`]).
    seek_file: Option<PathBuf>,
    /// TCP flows toward the UEs, followed while a scripted drop exists.
    flows: Flows,
}

impl Engine {
    /// An engine whose time zero is `time`'s, reading packets from `arrivals` (the reader
    /// rings `arrival_bell` when it adds some).
    pub fn new(
        cell: Cell<InFlight>,
        links: Vec<UeLinks>,
        arrivals: Arc<Handover<Arrival>>,
        arrival_bell: Arc<Doorbell>,
        outputs: Outputs,
        timing: Timing,
        time: Arc<TimeBase>,
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
                UeLane {
                    uplink: Uplink::new(ul_timing, links.uplink.clone(), links.uplink_queue_limit_bytes),
                    links,
                    to_bs: DelayLine::new(),
                }
            })
            .collect();
        Engine {
            cell,
            out: SubframeOutput::new(),
            lanes,
            arrivals,
            arrival_bell,
            staged: VecDeque::new(),
            outputs,
            timing,
            time,
            next_subframe: 0,
            last_busy_subframe: 0,
            last_pause_mono_ns: 0..0,
            lateness: Histogram::new(),
            drops: Vec::new(),
            counters: EngineCounters {
                ues: vec![UeCounters::default(); n],
                subframes: 0,
                paused_ms: 0.0,
                subframe_lateness: Histogram::new().summary(),
                idle_subframes: 0,
                downlink_delivery_error: Histogram::new().summary(),
                uplink_delivery_error: Histogram::new().summary(),
                diag_batches_dropped: 0,
                truth_rows_dropped: 0,
                packet_events_dropped: 0,
                rejected_by_cell: 0,
                tx_queue_full: 0,
                trace_ended: false,
                seeks: 0,
                seeks_rejected: 0,
                events: Vec::new(),
            },
            seek_file: None,
            flows: Flows::new(),
        }
    }

    /// Runs until a stop signal, the configured duration, or the end of a trace that does
    /// not loop; returns the counters. Packets still inside are counted and dropped; the
    /// queues to the writer, the diag thread and the recorder are closed.
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
            if signals.take_seek() {
                self.seek();
            }
            let boundary = self.next_subframe as Nanos * NANOS_PER_MS;
            let ticket = self.arrival_bell.ticket();
            let idle = if self.idle() {
                self.next_subframe >= self.last_busy_subframe + IDLE_HOLD_SUBFRAMES
            } else {
                self.last_busy_subframe = self.next_subframe;
                false
            };
            let now = if idle {
                self.arrival_bell.wait(ticket, Some(self.time.monotonic(boundary + IDLE_BATCH_NS)));
                self.time.now()
            } else {
                // No spinning: the subframe's decisions depend on the packets' own
                // timestamps, not on when this thread wakes, and its outputs are due a
                // subframe later.
                self.time.emulated(sleep_until(self.time.monotonic(boundary)))
            };
            while let Some(a) = self.arrivals.pop() {
                self.staged.push_back(a);
            }
            // Every subframe whose boundary has passed (one, unless late or idle).
            while self.next_subframe as Nanos * NANOS_PER_MS <= now {
                let start = self.next_subframe as Nanos * NANOS_PER_MS;
                self.take_arrivals(start);
                if idle {
                    self.counters.idle_subframes += 1;
                } else {
                    self.lateness.record(now - start);
                }
                self.run_subframe(now - start);
                if self.finished() {
                    return self.shut_down();
                }
            }
        }
        self.shut_down()
    }

    /// Lets SIGHUP move the traces: the signal reads a trace time, ms (decimal, one line),
    /// from `path`, and the traces play from there from the next subframe on
    /// (`Cell::seek_trace`).
    pub fn with_seek_file(mut self, path: PathBuf) -> Engine {
        self.seek_file = Some(path);
        self
    }

    /// Applies the seek file, then removes it: its absence tells the sender the seek took
    /// effect. A file without a trace time is renamed `<file>.rejected` and the traces play
    /// on where they were; no seek file (a stray SIGHUP) changes nothing.
    fn seek(&mut self) {
        let Some(path) = self.seek_file.clone() else { return };
        match read_seek_file(&path) {
            Ok(None) => {}
            Ok(Some(trace_ms)) => {
                self.cell.seek_trace(self.next_subframe, trace_ms);
                // The scripted events count from each seek: in a replay, from each load's start.
                self.cell.arm_events(self.next_subframe);
                self.counters.seeks += 1;
                if let Err(e) = std::fs::remove_file(&path) {
                    crate::report!("clawbed-emu: warning: removing {} after the seek: {e}", path.display());
                }
            }
            Err(why) => {
                self.counters.seeks_rejected += 1;
                crate::report!("clawbed-emu: {}: {why}; the traces play on where they were", path.display());
                let mut rejected = path.clone().into_os_string();
                rejected.push(".rejected");
                if let Err(e) = std::fs::rename(&path, &rejected) {
                    crate::report!("clawbed-emu: warning: renaming {} to {:?}: {e}", path.display(), rejected);
                }
            }
        }
    }

    /// Whether nothing is queued anywhere and nobody watches the diag feed live: then the
    /// subframes may run late, in a batch.
    fn idle(&self) -> bool {
        self.staged.is_empty()
            && self.arrivals.is_empty()
            && !self.outputs.diag.has_subscribers()
            && self.cell.is_idle()
            && self.lanes.iter().all(|l| l.to_bs.is_empty() && l.uplink.queued_bytes() == 0)
    }

    /// Stays paused until resumed or stopped; the time spent does not count as emulated time.
    fn pause(&mut self, signals: &Signals) {
        let start = monotonic_now_ns();
        self.time.set_paused(true);
        while !signals.take_resume() && !signals.stop_requested() {
            sleep_until(monotonic_now_ns() + PAUSE_POLL_NS);
            // Pauses asked for while paused change nothing.
            signals.take_pause();
        }
        let end = monotonic_now_ns();
        let paused_ns = end - start;
        self.last_pause_mono_ns = start..end;
        self.time.pause_for(paused_ns);
        self.time.set_paused(false);
        // The writer sleeps while paused; its due times are now further away in
        // monotonic time.
        self.outputs.tx.ring();
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

    /// Moves the staged packets read by `start_ns` (emulated) into the core delay
    /// (downlink) or the UE's uplink buffer.
    fn take_arrivals(&mut self, start_ns: Nanos) {
        while let Some(a) = self.staged.front() {
            // A packet read while paused arrived, in emulated time, at the resume: the
            // clock stood still.
            let read_at = if self.last_pause_mono_ns.contains(&a.read_at_mono_ns) {
                self.last_pause_mono_ns.end
            } else {
                a.read_at_mono_ns
            };
            let arrival_ns = self.time.emulated(read_at);
            if arrival_ns > start_ns {
                break;
            }
            let Some(a) = self.staged.pop_front() else { break };
            let ue = usize::from(a.ue);
            let Some(lane) = self.lanes.get_mut(ue) else { continue };
            let len = a.packet.len_bytes();
            let item = InFlight { packet: a.packet, offload: a.offload, arrival_ns };
            match a.direction {
                Direction::Downlink => {
                    self.counters.ues[ue].downlink.received.add(len);
                    if self.cell.has_drop_events() {
                        let packet = DownlinkPacket {
                            len_bytes: len as u32,
                            tcp: self.flows.downlink(a.ue, item.packet.bytes()),
                        };
                        if self.cell.scripted_drop(UeId(a.ue), self.next_subframe, &packet) {
                            self.counters.ues[ue].downlink.dropped_event.add(len);
                            let event = PacketEvent::DropEvent;
                            self.drops.push(drop_record(start_ns, ue, &item, event, Direction::Downlink));
                            continue;
                        }
                    }
                    let core_ns = lane.links.core_down.at(arrival_ns, self.cell.trace_shift_ms());
                    lane.to_bs.push(arrival_ns + core_ns, item);
                }
                Direction::Uplink => {
                    self.counters.ues[ue].uplink.received.add(len);
                    if self.cell.has_drop_events() {
                        self.flows.uplink(a.ue, item.packet.bytes());
                    }
                    let arrived = lane.uplink.arrive(arrival_ns, len as u32, item);
                    self.cell.uplink_activity(UeId(a.ue), lane.uplink.queued_bytes());
                    if let Err(item) = arrived {
                        self.counters.ues[ue].uplink.dropped_overflow.add(len);
                        self.drops.push(drop_record(
                            arrival_ns,
                            ue,
                            &item,
                            PacketEvent::DropOverflow,
                            Direction::Uplink,
                        ));
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
                        let event = PacketEvent::DropOverflow;
                        self.drops.push(drop_record(start_ns, i, &item, event, Direction::Downlink));
                    }
                    Enqueued::Rejected(_) => self.counters.rejected_by_cell += 1,
                }
            }
        }

        self.cell.run_subframe(k, &mut self.out);
        let tx = Arc::clone(&self.outputs.tx);
        // The earliest due time handed over, for waking the writer.
        let mut earliest = Nanos::MAX;
        let deliver_at = end_ns + self.timing.air_ns;
        for (ue, item) in self.out.delivered.drain(..) {
            let lane = Lane::of(ue.index(), Direction::Downlink);
            if hand_over(&tx, TxItem { lane, due_ns: deliver_at, item }, &mut self.counters) {
                earliest = earliest.min(deliver_at);
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
            self.drops.push(drop_record(start_ns, i, &item, event, Direction::Downlink));
        }

        let (trace_k, trace_shift_ms) = (self.cell.trace_ms(k), self.cell.trace_shift_ms());
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            // While the UE's radio connection is being set up, or its link is stalled, its
            // uplink waits too; in 3G FACH it trickles on the common channel.
            let limit_bits = match self.cell.uplink_allowance(UeId(i as u16)) {
                Some(UplinkAllowance::Scheduled) => None,
                Some(UplinkAllowance::CommonChannel { bits }) => Some(bits),
                Some(UplinkAllowance::Held) | None => continue,
            };
            let due_ns = end_ns + self.timing.air_ns + lane.links.core_up.at(end_ns, trace_shift_ms);
            let lane_id = Lane::of(i, Direction::Uplink);
            let counters = &mut self.counters;
            lane.uplink.transmit(k, trace_k, limit_bits, |item| {
                if hand_over(&tx, TxItem { lane: lane_id, due_ns, item }, counters) {
                    earliest = earliest.min(due_ns);
                }
            });
        }
        if earliest != Nanos::MAX {
            tx.wake_for(earliest);
        }

        // The vectors handed over come back emptied from their consumers, so this thread
        // allocates nothing in steady state.
        let n_ues = self.lanes.len();
        if self.outputs.diag.wanted() {
            let spare = self.outputs.diag.spare_records().unwrap_or_else(|| Vec::with_capacity(n_ues));
            let batch = DiagBatch {
                timestamp_s: (self.time.origin_unix_ns() + start_ns) as f64 / 1e9,
                t_ms: k,
                records: std::mem::replace(&mut self.out.diag, spare),
            };
            if !self.outputs.diag.publish(batch) {
                self.counters.diag_batches_dropped += 1;
            }
        }
        let records = &self.outputs.records;
        let spare = records
            .truth_record()
            .unwrap_or_else(|| TruthRecord { ues: Vec::with_capacity(n_ues), ..TruthRecord::default() });
        let truth = std::mem::replace(&mut self.out.truth, spare);
        let drops =
            if self.drops.is_empty() { Vec::new() } else { std::mem::replace(&mut self.drops, records.batch()) };
        let record = SubframeRecord { t_ms: k, wake_lateness_ns: lateness_ns, truth, drops };
        if let Err(record) = self.outputs.records.subframes.push(record) {
            self.counters.truth_rows_dropped += 1;
            self.counters.packet_events_dropped += record.drops.len() as u64;
        }
        self.next_subframe += 1;
        self.counters.subframes += 1;
    }

    /// Counts what is still inside, drops it, closes the queues to the other threads and
    /// returns the counters.
    fn shut_down(mut self) -> EngineCounters {
        for a in self.staged.drain(..) {
            let Some(c) = self.counters.ues.get_mut(usize::from(a.ue)) else { continue };
            let c = match a.direction {
                Direction::Downlink => &mut c.downlink,
                Direction::Uplink => &mut c.uplink,
            };
            c.received.add(a.packet.len_bytes());
            c.in_flight_at_shutdown.add(a.packet.len_bytes());
        }
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            let c = &mut self.counters.ues[i];
            for (_, item) in lane.to_bs.drain() {
                c.downlink.in_flight_at_shutdown.add(item.packet.len_bytes());
            }
            for item in lane.uplink.drain() {
                c.uplink.in_flight_at_shutdown.add(item.packet.len_bytes());
            }
            // Packets in the cell's queue: their bytes only (the cell does not give them back).
            if let Some(bytes) = self.cell.waiting_bytes(UeId(i as u16)) {
                c.downlink.in_flight_at_shutdown.bytes += bytes;
            }
        }
        self.outputs.tx.close();
        self.outputs.diag.close();
        self.counters.subframe_lateness = self.lateness.summary();
        self.counters.events = self.cell.event_tallies();
        self.counters
    }
}

/// Hands `item` to the writer; returns whether it went (else it is dropped and counted).
fn hand_over(tx: &TxQueue, item: TxItem, counters: &mut EngineCounters) -> bool {
    match tx.push(item) {
        Ok(()) => true,
        Err(item) => {
            counters.tx_queue_full += 1;
            let (ue, direction) = item.lane.ue_and_direction();
            if let Some(c) = counters.ues.get_mut(ue) {
                let c = match direction {
                    Direction::Downlink => &mut c.downlink,
                    Direction::Uplink => &mut c.uplink,
                };
                c.write_errors.add(item.item.packet.len_bytes());
            }
            false
        }
    }
}

/// The packet-log row of a drop at `t_ns`.
fn drop_record(t_ns: Nanos, ue: usize, item: &InFlight, event: PacketEvent, direction: Direction) -> PacketRecord {
    PacketRecord {
        actual_ns: t_ns,
        scheduled_ns: t_ns,
        arrival_ns: item.arrival_ns,
        ue: ue as u16,
        bytes: item.packet.len_bytes() as u32,
        event,
        direction,
    }
}

//! The cell: several emulated UEs, each with its own conditions, BS buffer, RLC and HARQ
//! entities, sharing one cell's resource blocks with the trace's other users.

use crate::conditions::{Capacity, Conditions, FirstTx, SubframeConditions};
use crate::config::{CellConfig, ConfigError, UeConfig};
use crate::demand::demand_rbs;
use crate::diag::{
    DiagRecord, MacDlTransportBlock, MacSample, PdcpDlStats, PdschStat, RlcDlStats, ServCellMeasurement, TransportBlock,
};
use crate::events::{DownlinkPacket, Effects, EventTally, Script, ScriptedEvent};
use crate::harq::{HarqEntity, LossModel, PendingTb, Transmission};
use crate::queue::QueuePolicy;
use crate::rlc::{Resolved, RlcEntity, TbPayload};
use crate::rng::Rng;
use crate::rrc::{RrcInput, RrcModel, RrcState, RrcStep};
use crate::rsrq::{rsrq_db, RsrqMeter, MIN_REPORTED_RSRQ_DB};
use crate::scheduler::{Request, Scheduler};
use crate::stall::StallProcess;
use crate::truth::{TruthRecord, UeTruth};
use crate::{DropCause, Enqueued, UeId};

/// N_rb when neither the configuration nor any trace gives it: a 10 MHz cell.
pub const DEFAULT_N_RB: u8 = 50;
/// Transmit antenna ports when neither the configuration nor any trace gives them.
pub const DEFAULT_N_ANTENNAS: u8 = 2;
/// Most UEs one cell holds.
pub const MAX_UES: usize = 1024;
/// Subframes per radio frame.
const SUBFRAMES_PER_FRAME: u64 = 10;
/// System frame numbers wrap after this many frames.
const SFN_CYCLE: u64 = 1024;
/// SNR reported for an MCS: MCS − this, dB (see [`ServCellMeasurement::snr_db`]).
const SNR_BELOW_MCS_DB: f64 = 6.0;

/// One emulated UE to put in a cell: its configuration (which names its queue policy,
/// [`UeConfig::queue`]) and its conditions.
pub struct UeSetup {
    /// The UE's configuration.
    pub config: UeConfig,
    /// Its channel (and, for UE 0 of a cell without a background source, the other users).
    pub conditions: Box<dyn Conditions + Send>,
}

impl UeSetup {
    /// A UE with `config` under `conditions`.
    pub fn new(config: UeConfig, conditions: impl Conditions + Send + 'static) -> UeSetup {
        UeSetup { config, conditions: Box::new(conditions) }
    }
}

/// What one subframe produced; reuse one value across subframes so that its vectors keep
/// their capacity (`run_subframe` clears them).
#[derive(Debug)]
pub struct SubframeOutput<H> {
    /// Packets whose last byte was received in this subframe (and every older packet of the
    /// same UE too): hand them to the UE, after the air delay.
    pub delivered: Vec<(UeId, H)>,
    /// Packets RLC gave up on in this subframe ([`DropCause::RlcLoss`]).
    pub lost: Vec<(UeId, H, DropCause)>,
    /// One diag record per UE, in UE order.
    pub diag: Vec<DiagRecord>,
    /// The cell's ground truth.
    pub truth: TruthRecord,
}

impl<H> SubframeOutput<H> {
    /// An empty output.
    pub fn new() -> SubframeOutput<H> {
        SubframeOutput { delivered: Vec::new(), lost: Vec::new(), diag: Vec::new(), truth: TruthRecord::default() }
    }
}

impl<H> Default for SubframeOutput<H> {
    fn default() -> Self {
        SubframeOutput::new()
    }
}

/// What a UE's uplink buffer may send in a subframe (the data plane owns the buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UplinkAllowance {
    /// Nothing: the radio connection is being set up, the UE is idle, or its link stalled.
    Held,
    /// Scheduled on the uplink's own capacity (connected).
    Scheduled,
    /// 3G FACH: at most this many bits, on the common channel.
    CommonChannel {
        /// Bits the UE may send in the subframe.
        bits: u64,
    },
}

/// The transport block a UE received in a subframe.
struct Sent {
    block: TransportBlock,
    payload: TbPayload,
    /// Spatial layers of the block (a retransmission keeps its first transmission's).
    layers: u8,
    harq_retx: bool,
    /// Carried by a 3G common channel (FACH), not by the shared channel a phone's diag
    /// log reports.
    common: bool,
}

/// One UE inside the cell.
struct Ue<H> {
    id: UeId,
    config: UeConfig,
    conditions: Box<dyn Conditions + Send>,
    policy: Box<dyn QueuePolicy + Send>,
    rlc: RlcEntity<H>,
    harq: HarqEntity,
    rsrq: RsrqMeter,
    rrc: Box<dyn RrcModel + Send>,
    stall: Box<dyn StallProcess + Send>,
    /// Promotion-delay draws.
    rrc_rng: Rng,
    /// Stall draws.
    stall_rng: Rng,
    /// HARQ outcome draws.
    rng: Rng,
    /// Overflow drops since the start, packets.
    overflow_drops: u64,
    /// Overflow drops not yet reported in a truth record, packets and bytes.
    unreported_overflow: (u32, u64),
    /// The data plane reported uplink traffic since the last subframe.
    uplink_active: bool,
    /// The UE's uplink buffer after the last of those packets arrived, bytes.
    uplink_queued_bytes: u64,
    /// Open loop under a scaled capacity: the fraction of a byte the last subframes' budgets
    /// left, carried to the next.
    open_loop_carry: f64,
    /// Scripted drops not yet reported in a truth record, packets and bytes.
    unreported_event_drops: (u32, u64),
}

/// Random streams of a UE: HARQ draws and RSRQ noise, apart so that one does not shift
/// the other.
const STREAMS_PER_UE: u64 = 2;
/// The RRC and stall streams (two per UE) come from the seed mixed with this, so that they
/// leave the HARQ and RSRQ streams of every UE as they were before those models existed.
const RADIO_SEED_SALT: u64 = 0x5241_4449_4f5f_5354;

/// The LTE cell: call [`Cell::enqueue`] for each downlink packet reaching the base station
/// and [`Cell::run_subframe`] once per 1 ms subframe with increasing `t_ms`.
///
/// The other users' demand B_k (and their number) comes from the background source given
/// to [`Cell::with_background`], else from UE 0's conditions (the primary trace); other
/// UEs' `other_rbs` columns are ignored. N_rb, the antenna ports and the starting SFN come
/// from the configuration, else from that same primary source, else the defaults.
pub struct Cell<H> {
    config: CellConfig,
    n_rb: u8,
    n_antennas: u8,
    start_sfn: u16,
    scheduler: Box<dyn Scheduler + Send>,
    loss: Box<dyn LossModel + Send>,
    background: Option<Box<dyn Conditions + Send>>,
    ues: Vec<Ue<H>>,
    /// Per subframe, per UE: conditions, due HARQ retransmission, RRC state, demand, grant.
    now: Vec<Option<SubframeConditions>>,
    due: Vec<Option<PendingTb>>,
    rrc_now: Vec<RrcStep>,
    stalled_now: Vec<bool>,
    demand: Vec<u8>,
    grants: Vec<u8>,
    last_t_ms: Option<u64>,
    /// Trace time minus run time, ms: 0 until [`Cell::seek_trace`] moves the traces.
    trace_shift_ms: i64,
    /// Scripted events ([`crate::events`]).
    script: Script,
    /// The timed events' effects in the subframe being run.
    effects_now: Effects,
}

/// Checks that `source` (named `field`) agrees with the cell's N_rb and antenna ports.
fn check_source(field: &str, source: &dyn Conditions, n_rb: u8, n_antennas: u8) -> Result<(), ConfigError> {
    if let Some(source_n_rb) = source.n_rb().filter(|&n| n != n_rb) {
        return Err(ConfigError::new(field, format!("has N_rb {source_n_rb}, the cell {n_rb}")));
    }
    if let Some(ports) = source.n_antennas().filter(|&n| n != n_antennas) {
        return Err(ConfigError::new(field, format!("has {ports} antenna ports, the cell {n_antennas}")));
    }
    Ok(())
}

impl<H> Cell<H> {
    /// A cell running `config` with `ues` (UE i gets `UeId(i)`), whose other users come
    /// from UE 0's conditions; all randomness derives from `seed`. Fails, naming the field,
    /// on any configuration value out of range, no UE or more than [`MAX_UES`], or a trace
    /// whose N_rb or antenna ports disagree with the cell's.
    pub fn new(config: CellConfig, ues: Vec<UeSetup>, seed: u64) -> Result<Cell<H>, ConfigError> {
        Cell::build(config, None, ues, seed)
    }

    /// As [`Cell::new`], but the other users' demand B_k and number come from `background`
    /// (a cell-level trace) instead of UE 0's conditions.
    pub fn with_background(
        config: CellConfig,
        background: impl Conditions + Send + 'static,
        ues: Vec<UeSetup>,
        seed: u64,
    ) -> Result<Cell<H>, ConfigError> {
        Cell::build(config, Some(Box::new(background)), ues, seed)
    }

    fn build(
        config: CellConfig,
        background: Option<Box<dyn Conditions + Send>>,
        setups: Vec<UeSetup>,
        seed: u64,
    ) -> Result<Cell<H>, ConfigError> {
        config.validate()?;
        if setups.is_empty() || setups.len() > MAX_UES {
            return Err(ConfigError::new("ues", format!("must hold 1..={MAX_UES} UEs, got {}", setups.len())));
        }
        for (i, setup) in setups.iter().enumerate() {
            setup.config.validate_as(i)?;
        }
        let primary: &dyn Conditions = match &background {
            Some(source) => source.as_ref(),
            None => setups[0].conditions.as_ref(),
        };
        // Validated: 6..=100 and 1..=2, so the conversions cannot fail.
        let n_rb = config.n_rb.and_then(|n| u8::try_from(n).ok()).or(primary.n_rb()).unwrap_or(DEFAULT_N_RB);
        let n_antennas =
            config.n_antennas.and_then(|n| u8::try_from(n).ok()).or(primary.n_antennas()).unwrap_or(DEFAULT_N_ANTENNAS);
        let start_sfn = primary.start_sfn().unwrap_or(0);
        if let Some(source) = &background {
            check_source("background", source.as_ref(), n_rb, n_antennas)?;
        }
        for (i, setup) in setups.iter().enumerate() {
            check_source(&format!("ues[{i}].conditions"), setup.conditions.as_ref(), n_rb, n_antennas)?;
        }
        // The policies the configuration names (validated above, so the builds succeed).
        let scheduler =
            crate::scheduler::POLICIES.build(&config.scheduler, &config).map_err(|e| e.within("scheduler"))?;
        let loss = crate::harq::POLICIES.build(&config.loss, &config.harq).map_err(|e| e.within("loss"))?;
        let rrc_models = (0..setups.len())
            .map(|_| crate::rrc::POLICIES.build(&config.rrc, &()).map_err(|e| e.within("rrc")))
            .collect::<Result<Vec<_>, _>>()?;
        let stall_models = (0..setups.len())
            .map(|_| crate::stall::POLICIES.build(&config.stall, &()).map_err(|e| e.within("stall")))
            .collect::<Result<Vec<_>, _>>()?;
        let policies = setups
            .iter()
            .enumerate()
            .map(|(i, setup)| {
                crate::queue::POLICIES
                    .build(&setup.config.queue, &setup.config)
                    .map_err(|e| e.within("queue").within(&format!("ues[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Validated 1..=16.
        let rtt_ms = config.harq.rtt_ms as u8;
        let ues: Vec<Ue<H>> = setups
            .into_iter()
            .zip(policies)
            .zip(rrc_models.into_iter().zip(stall_models))
            .enumerate()
            .map(|(i, ((setup, policy), (rrc, stall)))| {
                let stream = i as u64 * STREAMS_PER_UE;
                Ue {
                    // i < MAX_UES ≤ u16::MAX.
                    id: UeId(i as u16),
                    policy,
                    config: setup.config,
                    conditions: setup.conditions,
                    rlc: RlcEntity::new(),
                    harq: HarqEntity::new(rtt_ms),
                    rsrq: RsrqMeter::new(config.rsrq.clone(), Rng::new(seed, stream + 1)),
                    rrc,
                    stall,
                    rrc_rng: Rng::new(seed ^ RADIO_SEED_SALT, 2 * i as u64),
                    stall_rng: Rng::new(seed ^ RADIO_SEED_SALT, 2 * i as u64 + 1),
                    rng: Rng::new(seed, stream),
                    overflow_drops: 0,
                    unreported_overflow: (0, 0),
                    uplink_active: false,
                    uplink_queued_bytes: 0,
                    open_loop_carry: 0.0,
                    unreported_event_drops: (0, 0),
                }
            })
            .collect();
        let n = ues.len();
        Ok(Cell {
            config,
            n_rb,
            n_antennas,
            start_sfn,
            scheduler,
            loss,
            background,
            ues,
            now: vec![None; n],
            due: vec![None; n],
            rrc_now: vec![RrcStep::CONNECTED; n],
            stalled_now: vec![false; n],
            demand: vec![0; n],
            grants: vec![0; n],
            last_t_ms: None,
            trace_shift_ms: 0,
            script: Script::new(Vec::new(), n),
            effects_now: Effects::default(),
        })
    }

    /// The cell with scripted `events` (kind name, event; [`crate::events`]), armed at
    /// subframe 0. Fails, naming `events[i].ue`, on an event of a UE the cell does not have.
    pub fn with_events(
        mut self,
        events: Vec<(&'static str, Box<dyn ScriptedEvent + Send>)>,
    ) -> Result<Cell<H>, ConfigError> {
        for (i, (_, event)) in events.iter().enumerate() {
            if let Some(ue) = event.ue().filter(|ue| ue.index() >= self.ues.len()) {
                return Err(ConfigError::new(
                    format!("events[{i}].ue"),
                    format!("UE {} is not in the cell of {} UEs", ue.0, self.ues.len()),
                ));
            }
        }
        self.script = Script::new(events, self.ues.len());
        Ok(self)
    }

    /// Arms the scripted events at subframe `t_ms` (the next one to run): their `at_ms`
    /// count from there and each drop fires anew. A caller that seeks the traces for each
    /// of several runs over the same stretch re-arms with the seek.
    pub fn arm_events(&mut self, t_ms: u64) {
        self.script.arm(t_ms);
    }

    /// Whether a scripted event drops packets: the caller must then pass every downlink
    /// packet to [`Cell::scripted_drop`], with its TCP facts.
    pub fn has_drop_events(&self) -> bool {
        self.script.has_drops()
    }

    /// Whether a scripted drop takes UE `ue`'s downlink `packet`, taken in for subframe
    /// `t_ms` (before [`Cell::enqueue`]; a packet dropped here is not enqueued). Counted in
    /// the next truth record's `event_drops`.
    pub fn scripted_drop(&mut self, ue: UeId, t_ms: u64, packet: &DownlinkPacket) -> bool {
        let dropped = self.script.drops(ue, t_ms, packet);
        if let (true, Some(u)) = (dropped, self.ues.get_mut(ue.index())) {
            u.unreported_event_drops.0 += 1;
            u.unreported_event_drops.1 += u64::from(packet.len_bytes);
        }
        dropped
    }

    /// What each scripted event did so far, in config order.
    pub fn event_tallies(&self) -> Vec<EventTally> {
        self.script.tallies()
    }

    /// Resource blocks of the cell, N_rb.
    pub fn n_rb(&self) -> u8 {
        self.n_rb
    }

    /// Transmit antenna ports of the cell.
    pub fn n_antennas(&self) -> u8 {
        self.n_antennas
    }

    /// System frame number of subframe 0 (the primary trace's `start_sfn`, else 0).
    pub fn start_sfn(&self) -> u16 {
        self.start_sfn
    }

    /// Bytes waiting for transmission at UE `ue`'s BS buffer; `None` for an unknown UE.
    pub fn waiting_bytes(&self, ue: UeId) -> Option<u64> {
        self.ues.get(ue.index()).map(|u| u.rlc.waiting_bytes())
    }

    /// UE `ue`'s RRC state after the last subframe; `None` for an unknown UE. While it is
    /// not connected the data plane should hold the UE's uplink packets too.
    pub fn rrc_state(&self, ue: UeId) -> Option<RrcState> {
        self.ues.get(ue.index()).map(|u| u.rrc.state())
    }

    /// Whether UE `ue`'s link was stalled in the last subframe (the stall process or the
    /// trace's `outage` column); `None` for an unknown UE. The data plane holds the UE's
    /// uplink meanwhile too.
    pub fn stalled(&self, ue: UeId) -> Option<bool> {
        self.stalled_now.get(ue.index()).copied()
    }

    /// Reports uplink traffic from UE `ue` since the last subframe, with the UE's uplink
    /// buffer once it arrived (`queued_bytes`): it keeps the UE connected, or starts its
    /// promotion when idle (RRC model on); in 3G FACH a buffer above the threshold asks for
    /// DCH. Returns false for an unknown UE.
    pub fn uplink_activity(&mut self, ue: UeId, queued_bytes: u64) -> bool {
        match self.ues.get_mut(ue.index()) {
            Some(u) => {
                u.uplink_active = true;
                u.uplink_queued_bytes = u.uplink_queued_bytes.max(queued_bytes);
                true
            }
            None => false,
        }
    }

    /// What UE `ue`'s uplink may send in the last subframe run; `None` for an unknown UE.
    /// Held while its radio connection is being set up, in IDLE, or while its link is
    /// stalled; on the common channel's budget in 3G FACH.
    pub fn uplink_allowance(&self, ue: UeId) -> Option<UplinkAllowance> {
        let (rrc, stalled) = (self.rrc_now.get(ue.index())?, self.stalled_now.get(ue.index())?);
        Some(match (rrc.state, rrc.common) {
            _ if *stalled => UplinkAllowance::Held,
            (RrcState::Connected, _) => UplinkAllowance::Scheduled,
            (_, Some(common)) => UplinkAllowance::CommonChannel { bits: common.uplink_bits },
            _ => UplinkAllowance::Held,
        })
    }

    /// Whether nothing is in flight: no UE holds a packet or a pending HARQ
    /// retransmission, and no uplink activity waits to be seen. Subframes of an idle cell
    /// only advance conditions, timers and random draws, so a caller may run them late, in
    /// batches, without changing any output (as long as it enqueues nothing meanwhile).
    pub fn is_idle(&self) -> bool {
        self.ues.iter().all(|u| !u.rlc.holds_packets() && !u.harq.busy() && !u.uplink_active)
    }

    /// The first `t_ms` from which no UE has conditions any more (every UE's trace ended);
    /// `None` while some UE's conditions never end (looping).
    pub fn end_ms(&self) -> Option<u64> {
        let trace_end_ms =
            self.ues.iter().map(|u| u.conditions.end_ms()).try_fold(0, |end, ue_end| ue_end.map(|e| e.max(end)))?;
        Some(trace_end_ms.saturating_add_signed(-self.trace_shift_ms))
    }

    /// The trace time, ms, that run time `t_ms` plays: every UE's conditions (from its own
    /// offset) and the background are looked up there. `t_ms` itself until
    /// [`Cell::seek_trace`].
    pub fn trace_ms(&self, t_ms: u64) -> u64 {
        t_ms.saturating_add_signed(self.trace_shift_ms)
    }

    /// Trace time minus run time, ms (see [`Cell::trace_ms`]).
    pub fn trace_shift_ms(&self) -> i64 {
        self.trace_shift_ms
    }

    /// From subframe `next_t_ms` on, plays the traces from trace time `trace_ms`: the
    /// channel and the other users jump there; queues, HARQ, RLC and RRC timers run on in
    /// run time. Lets a caller give several page loads the same stretch of the trace.
    pub fn seek_trace(&mut self, next_t_ms: u64, trace_ms: u64) {
        // Both are ms counts below 2^63 in any run (2^63 ms is 292 million years).
        self.trace_shift_ms = trace_ms as i64 - next_t_ms as i64;
    }

    /// A downlink packet of `len_bytes` for UE `ue` arrived at the base station (after the
    /// core delay). It is queued, dropped because the UE's buffer is full (an overflow,
    /// counted in the diag feed and the next truth record), or rejected (unknown UE, or
    /// an empty packet: a caller error, counted nowhere).
    pub fn enqueue(&mut self, ue: UeId, len_bytes: u32, handle: H) -> Enqueued<H> {
        let Some(u) = self.ues.get_mut(ue.index()) else { return Enqueued::Rejected(handle) };
        if len_bytes == 0 {
            return Enqueued::Rejected(handle);
        }
        if !u.policy.admits(u.rlc.waiting_bytes(), len_bytes) {
            u.overflow_drops += 1;
            u.unreported_overflow.0 += 1;
            u.unreported_overflow.1 += u64::from(len_bytes);
            return Enqueued::Dropped(handle, DropCause::Overflow);
        }
        u.rlc.enqueue(len_bytes, handle);
        Enqueued::Queued
    }

    /// Runs subframe `t_ms` (ms since the start of the run): schedules, transmits,
    /// decodes, measures, and fills `out` (cleared first). `t_ms` must increase from call
    /// to call; a call with a `t_ms` not above the previous one does nothing and leaves
    /// `out` empty. Skipping subframes is allowed: nothing is sent in them, and a HARQ
    /// retransmission due in a skipped subframe goes one round trip later.
    pub fn run_subframe(&mut self, t_ms: u64, out: &mut SubframeOutput<H>) {
        out.delivered.clear();
        out.lost.clear();
        out.diag.clear();
        out.truth.ues.clear();
        if self.last_t_ms.is_some_and(|last| t_ms <= last) {
            return;
        }
        self.last_t_ms = Some(t_ms);
        let n_rb = self.n_rb;

        // Conditions, due retransmissions, RRC and demands.
        let mut reserved_rbs = 0u8;
        let trace_t_ms = self.trace_ms(t_ms);
        if !self.script.is_empty() {
            self.effects_now.clone_from(self.script.effects(t_ms));
        }
        for (i, u) in self.ues.iter_mut().enumerate() {
            let now = u.conditions.at(trace_t_ms);
            let mut due = u.harq.take_due(t_ms);
            let input = RrcInput {
                downlink_waiting: u.rlc.holds_packets(),
                harq_busy: due.is_some() || u.harq.busy(),
                uplink: std::mem::take(&mut u.uplink_active),
                downlink_bytes: u.rlc.waiting_bytes(),
                uplink_bytes: std::mem::take(&mut u.uplink_queued_bytes),
            };
            let rrc = u.rrc.step(t_ms, input, &mut u.rrc_rng);
            let effect = self.effects_now.ues.get(i).copied().unwrap_or_default();
            let stalled = u.stall.stalled(t_ms, &mut u.stall_rng) | now.is_some_and(|c| c.outage) | effect.outage;
            let served = rrc.reachable && !stalled;
            if !served {
                // Held, not failed: a due retransmission waits one more HARQ round trip in
                // its process, its transmission count unchanged.
                if let Some(tb) = due.take() {
                    u.harq.park(t_ms, tb);
                }
            }
            self.demand[i] = match (due, now.map(|c| c.capacity)) {
                (None, Some(Capacity::Channel { mcs, layers })) if served => {
                    demand_rbs(mcs, layers, unscaled_bytes(u.rlc.sendable_bytes(t_ms), effect.capacity_factor), n_rb)
                }
                _ => 0,
            };
            reserved_rbs = reserved_rbs.saturating_add(due.map_or(0, |tb| tb.n_rbs));
            self.now[i] = now;
            self.due[i] = due;
            self.rrc_now[i] = rrc;
            self.stalled_now[i] = stalled;
        }
        let background = match &self.background {
            Some(source) => source.at(trace_t_ms),
            None => self.now[0],
        };
        let other_demand_rbs = background.map_or(0, |c| c.other_rbs.min(n_rb));
        let other_users = match other_demand_rbs {
            0 => 0,
            // Validated 1..=255.
            _ => background
                .and_then(|c| c.other_users)
                .filter(|&n| n > 0)
                .unwrap_or(self.config.default_other_users as u8),
        };

        // Scheduling: HARQ retransmissions first, then a scripted burst of other users,
        // then the scheduler shares the rest.
        let free_rbs = n_rb.saturating_sub(reserved_rbs);
        let burst_rbs = burst_rbs(self.effects_now.burst_share, n_rb).min(free_rbs);
        let free_rbs = free_rbs - burst_rbs;
        let request = Request { free_rbs, other_demand_rbs, other_users, demand_rbs: &self.demand };
        let other_alloc_rbs = self.scheduler.allocate(&request, &mut self.grants).min(other_demand_rbs);

        // Transmission and decoding.
        let max_tx = self.config.harq.max_tx as u8;
        let rlc_delay_ms = u64::from(self.config.rlc.retx_delay_ms);
        let rlc_max_retx = self.config.rlc.max_retx as u8;
        let mut total_alloc = u32::from(other_alloc_rbs) + u32::from(burst_rbs);
        let (frame_num, subframe_num) = self.sfn(t_ms);
        for (i, u) in self.ues.iter_mut().enumerate() {
            let mut resolved = Resolved {
                ue: u.id,
                delivered: &mut out.delivered,
                lost: &mut out.lost,
                delivered_packets: 0,
                delivered_bytes: 0,
                lost_packets: 0,
                lost_bytes: 0,
            };
            let now = self.now[i];
            let first_tx = now.map_or(FirstTx::Unspecified, |c| c.first_tx);
            let grant = self.grants[i].min(self.demand[i]);
            let effect = self.effects_now.ues.get(i).copied().unwrap_or_default();
            let mut sent: Option<Sent> = None;
            if let Some(tb) = self.due[i].take() {
                // A HARQ retransmission on the RBs reserved for it.
                let fails = u.rng.bernoulli(self.loss.failure_probability(Transmission::HarqRetx, first_tx));
                let block = TransportBlock {
                    harq_id: u.harq.process_id(t_ms),
                    rv: tb.next_rv(),
                    ndi: u8::from(tb.ndi),
                    crc_pass: !fails,
                    tb_size_bytes: tb.tbs_bits / 8,
                    mcs: tb.mcs,
                    num_rbs: tb.n_rbs,
                };
                let tx_count = tb.tx_count + 1;
                if fails && tx_count < max_tx {
                    u.harq.park(t_ms, PendingTb { tx_count, ..tb });
                } else if fails {
                    u.rlc.nacked(t_ms, &tb.payload, rlc_delay_ms, rlc_max_retx, &mut resolved);
                }
                sent = Some(Sent { block, payload: tb.payload, layers: tb.layers, harq_retx: true, common: false });
            } else if let Some(Capacity::Channel { mcs, layers }) = now.map(|c| c.capacity).filter(|_| grant > 0) {
                // A new transport block on the granted RBs.
                let tbs_bits = scaled_bits(lte::tbs::tbs_bits(mcs, grant, layers).unwrap_or(0), effect.capacity_factor);
                let payload = u.rlc.fill(t_ms, u64::from(tbs_bits / 8));
                let transmission = if payload.carries_rlc_retx() { Transmission::RlcRetx } else { Transmission::New };
                let fails = u.rng.bernoulli(self.loss.failure_probability(transmission, first_tx));
                let ndi = u.harq.next_ndi(t_ms);
                let block = TransportBlock {
                    harq_id: u.harq.process_id(t_ms),
                    rv: 0,
                    ndi: u8::from(ndi),
                    crc_pass: !fails,
                    tb_size_bytes: tbs_bits / 8,
                    mcs,
                    num_rbs: grant,
                };
                if fails && max_tx > 1 {
                    u.harq.park(
                        t_ms,
                        PendingTb { due_ms: 0, tx_count: 1, n_rbs: grant, tbs_bits, mcs, layers, ndi, payload },
                    );
                } else if fails {
                    u.rlc.nacked(t_ms, &payload, rlc_delay_ms, rlc_max_retx, &mut resolved);
                }
                sent = Some(Sent { block, payload, layers, harq_retx: false, common: false });
            } else if let Some(Capacity::OpenLoop { bytes }) =
                now.map(|c| c.capacity).filter(|_| self.rrc_now[i].reachable && !self.stalled_now[i])
            {
                // Open loop: the subframe's bytes, no scheduler, no HARQ. A subframe that
                // carried nothing had no transport block: a budget nobody used is not a
                // transmission (a phone reports no PDSCH for it either).
                let bytes = if effect.capacity_factor == 1.0 {
                    u.open_loop_carry = 0.0;
                    bytes
                } else {
                    let budget = f64::from(bytes) * effect.capacity_factor + u.open_loop_carry;
                    u.open_loop_carry = budget.fract();
                    budget.trunc() as u32
                };
                let payload = u.rlc.fill(t_ms, u64::from(bytes));
                if payload.len_bytes() > 0 {
                    let block = TransportBlock {
                        harq_id: 0,
                        rv: 0,
                        ndi: 0,
                        crc_pass: true,
                        tb_size_bytes: bytes,
                        mcs: 0,
                        num_rbs: 0,
                    };
                    sent = Some(Sent { block, payload, layers: 1, harq_retx: false, common: false });
                }
            } else if let Some(common) = self.rrc_now[i].common.filter(|c| c.downlink_bytes > 0 && !self.stalled_now[i])
            {
                // 3G FACH: the common channel's bytes, no scheduler, no HARQ.
                let payload = u.rlc.fill(t_ms, u64::from(common.downlink_bytes));
                let carried = u32::try_from(payload.len_bytes()).unwrap_or(u32::MAX);
                if carried > 0 {
                    let block = TransportBlock {
                        harq_id: 0,
                        rv: 0,
                        ndi: 0,
                        crc_pass: true,
                        tb_size_bytes: carried,
                        mcs: 0,
                        num_rbs: 0,
                    };
                    sent = Some(Sent { block, payload, layers: 1, harq_retx: false, common: true });
                }
            }
            let carried_bytes = match &sent {
                Some(sent) if sent.block.crc_pass => {
                    u.rlc.decoded(&sent.payload, &mut resolved);
                    sent.payload.len_bytes()
                }
                _ => 0,
            };
            let (delivered_packets, delivered_bytes, lost_packets, lost_bytes) =
                (resolved.delivered_packets, resolved.delivered_bytes, resolved.lost_packets, resolved.lost_bytes);
            let alloc_rbs = sent.as_ref().map_or(0, |sent| sent.block.num_rbs);
            total_alloc += u32::from(alloc_rbs);
            let (channel_mcs, layers) = match now.map(|c| c.capacity) {
                Some(Capacity::Channel { mcs, layers }) => (Some(mcs), layers),
                _ => (None, 1),
            };
            let overflow = std::mem::take(&mut u.unreported_overflow);
            let event_drops = std::mem::take(&mut u.unreported_event_drops);
            out.truth.ues.push(UeTruth {
                ue: u.id,
                mcs: channel_mcs,
                layers,
                demand_rbs: self.demand[i],
                alloc_rbs,
                tbs_bits: sent.as_ref().map_or(0, |sent| sent.block.tb_size_bytes.saturating_mul(8)),
                harq_retx: sent.as_ref().is_some_and(|sent| sent.harq_retx),
                crc_pass: sent.as_ref().map(|sent| sent.block.crc_pass),
                queue_bytes: u.rlc.waiting_bytes(),
                carried_bytes,
                delivered_packets,
                delivered_bytes,
                overflow_drops: overflow.0,
                overflow_drop_bytes: overflow.1,
                rlc_loss_drops: lost_packets,
                rlc_loss_drop_bytes: lost_bytes,
                rrc: self.rrc_now[i].state,
                drx: self.rrc_now[i].drx,
                stalled: self.stalled_now[i],
                scripted_outage: effect.outage,
                capacity_factor: effect.capacity_factor,
                event_drops: event_drops.0,
                event_drop_bytes: event_drops.1,
            });
            let payload_bytes = |payload: &TbPayload| u32::try_from(payload.len_bytes()).unwrap_or(u32::MAX);
            // The diag log shows the shared channel only; FACH's bytes are in the truth.
            let pdsch = sent.as_ref().filter(|sent| !sent.common);
            out.diag.push(DiagRecord {
                ue: u.id,
                t_ms,
                channel_mcs,
                measurement_updated: false,
                pdsch: PdschStat {
                    frame_num,
                    subframe_num,
                    num_rbs: alloc_rbs,
                    num_layers: pdsch.map_or(layers, |sent| sent.layers),
                    transport_block: pdsch.map(|sent| sent.block),
                },
                // Filled below, once A_k is known.
                serv_cell: ServCellMeasurement {
                    current_sfn: frame_num,
                    current_subframe: subframe_num,
                    rsrp_dbm: 0.0,
                    rsrq_db: 0.0,
                    rssi_dbm: 0.0,
                    snr_db: None,
                    channel_mcs,
                },
                mac: MacDlTransportBlock {
                    sfn: frame_num,
                    sub_fn: subframe_num,
                    sample: pdsch.map(|Sent { block, payload, .. }| MacSample {
                        harq_id: block.harq_id,
                        dl_tbs_bytes: block.tb_size_bytes,
                        rlc_pdus: payload.rlc_pdus(),
                        padding_bytes: block.tb_size_bytes.saturating_sub(payload_bytes(payload)),
                    }),
                },
                rlc: RlcDlStats {
                    num_retx_pdu: u.rlc.counters.retx_pdus,
                    num_dropped_pdu: u.rlc.counters.lost_packets,
                    pdcp_q_full_count: u.overflow_drops,
                    num_complete_nack: u.rlc.counters.nacked_pdus,
                },
                pdcp: PdcpDlStats { offload_q_full_count: u.overflow_drops },
            });
        }

        // The measurement of the total allocation A_k.
        let total_alloc_rbs = u8::try_from(total_alloc).unwrap_or(n_rb).min(n_rb);
        let true_rsrq_db = rsrq_db(total_alloc_rbs, n_rb, self.n_antennas).unwrap_or(MIN_REPORTED_RSRQ_DB);
        let n_rb_db = 10.0 * f64::from(n_rb).log10();
        for ((u, record), now) in self.ues.iter_mut().zip(out.diag.iter_mut()).zip(&self.now) {
            let (rsrq_db, updated) = u.rsrq.measure(t_ms, true_rsrq_db);
            let rsrp_dbm = now.and_then(|c| c.rsrp_dbm).map_or(u.config.rsrp_dbm, f64::from);
            record.measurement_updated = updated;
            record.serv_cell.rsrp_dbm = rsrp_dbm;
            record.serv_cell.rsrq_db = rsrq_db;
            // Eq. 1: RSRQ = N_rb·RSRP/RSSI.
            record.serv_cell.rssi_dbm = n_rb_db + rsrp_dbm - rsrq_db;
            record.serv_cell.snr_db = record.channel_mcs.map(|mcs| f64::from(mcs) - SNR_BELOW_MCS_DB);
        }
        let truth = &mut out.truth;
        truth.t_ms = t_ms;
        truth.n_rb = n_rb;
        truth.other_demand_rbs = other_demand_rbs;
        truth.other_users = other_users;
        truth.other_alloc_rbs = other_alloc_rbs + burst_rbs;
        truth.burst_rbs = burst_rbs;
        truth.total_alloc_rbs = total_alloc_rbs;
        truth.rsrq_db = true_rsrq_db;
    }

    /// (SFN, subframe number) of `t_ms`.
    fn sfn(&self, t_ms: u64) -> (u16, u8) {
        let frame = (u64::from(self.start_sfn) + t_ms / SUBFRAMES_PER_FRAME) % SFN_CYCLE;
        // Both below 1024 and 10.
        (frame as u16, (t_ms % SUBFRAMES_PER_FRAME) as u8)
    }
}

/// RBs a burst taking `share` of a cell of `n_rb` RBs takes (whole RBs, rounded).
fn burst_rbs(share: f64, n_rb: u8) -> u8 {
    // share is checked 0..=1, so the product is within 0..=n_rb.
    (share * f64::from(n_rb)).round().clamp(0.0, f64::from(n_rb)) as u8
}

/// The bytes a full-capacity transport block must carry for a UE whose capacity is scaled by
/// `factor` to carry `bytes` (its demand in RBs grows as its capacity shrinks).
fn unscaled_bytes(bytes: u64, factor: f64) -> u64 {
    if factor == 1.0 {
        bytes
    } else {
        (bytes as f64 / factor).ceil() as u64
    }
}

/// A transport block's bits under a capacity scaled by `factor`, whole bytes.
fn scaled_bits(bits: u32, factor: f64) -> u32 {
    if factor == 1.0 {
        bits
    } else {
        ((f64::from(bits) * factor / 8.0).floor() * 8.0).min(f64::from(u32::MAX)) as u32
    }
}

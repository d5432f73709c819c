//! The RRC (radio resource control) and DRX model of each UE: whether the UE can be
//! scheduled in a subframe, and what state its radio is in. A pluggable policy
//! (`cell.rrc`, [`POLICIES`]): `lte` (the default), `umts` (3G) or `off`.
//!
//! - `lte`: continuous reception → short DRX → long DRX → RRC_IDLE after the tail timer;
//!   in DRX the UE is reachable only in its on-durations, so a downlink packet waits for
//!   the next one; from idle a promotion whose delay is drawn (seeded) from the measured
//!   distribution. Downlink data reaching an idle UE is paged first (it waits for the next
//!   paging occasion), then promoted.
//! - `umts`: CELL_DCH → CELL_FACH after the DCH tail → IDLE after the FACH tail. In FACH
//!   the UE shares a low-rate common channel: small packets (a request, ACKs) pass at the
//!   FACH rate, and once the data waiting in either direction exceeds the buffer threshold
//!   (3GPP 25.331 traffic-volume event 4a) a promotion to DCH (1.5 s) starts and holds
//!   everything; any data in IDLE starts a promotion (2 s).
//! - `off`: always connected, always reachable.
//!
//! A promotion holds every downlink packet of the UE: those that were already in flight
//! when the UE was demoted and those that arrive during the promotion (what the SPDY
//! paper's spurious timeouts after idle need); the data plane holds the UE's uplink too
//! while [`RrcState`] is not `Connected`.
//!
//! Sources (`docs/fidelity-table.md` §7A; the choices where the papers are silent are in
//! `docs/emulator-model.md`, "Calibration"):
//!
//! | parameter | default | source |
//! |---|---|---|
//! | LTE tail (inactivity → IDLE) | 10 000 ms | LTE13 §4.1 (measured; SPDY App. A says ~11.5 s, table §8) |
//! | LTE promotion p25/p50/p75 | 319/435/558 ms | LTE13 §4.2, Fig 9 |
//! | DRX inactivity timer | 100 ms | SPDY App. A ("after ~100 ms of inactivity") |
//! | short DRX cycle / its duration | 20 ms / 20 ms | not in the five papers: chosen (3GPP 36.331 range), see Calibration |
//! | long DRX cycle, on-duration | 40 ms, 1 ms | not in the five papers: chosen, see Calibration |
//! | paging cycle | 1280 ms | not in the five papers: chosen (3GPP default paging cycle 128 frames) |
//! | 3G DCH → FACH | 5 000 ms | SPDY App. A |
//! | 3G FACH → IDLE | 12 000 ms | SPDY App. A |
//! | 3G IDLE → DCH | 2 000 ms | SPDY §5.5.1, App. A; LTE13 §4.2 (cited) |
//! | 3G FACH → DCH | 1 500 ms | LTE13 §4.2 (cited) |
//! | 3G FACH rate, each direction | 32 kbit/s | SPDY App. A says only "a low rate": chosen, see Calibration |
//! | 3G FACH → DCH buffer threshold, each direction | 512 B | not in the five papers: chosen, see Calibration |

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::policy::{Param, ParamDefault, ParamType, ParamValue, Params, Policy, Registry};
use crate::rng::Rng;

/// A UE's radio resource control state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RrcState {
    /// RRC_IDLE (LTE) or IDLE/PCH (3G): nothing can be scheduled; data waits for a
    /// promotion (downlink data first waits for the UE's paging occasion).
    Idle,
    /// 3G CELL_FACH: low-power common channel; small amounts of data pass at a low rate,
    /// more start a promotion to DCH and wait for it.
    Fach,
    /// Being promoted: nothing is scheduled yet.
    Promoting,
    /// RRC_CONNECTED (LTE) or CELL_DCH (3G): scheduled normally (in LTE, within the DRX
    /// on-durations when in DRX).
    Connected,
}

/// The DRX state of a UE: whether it watches every subframe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrxState {
    /// Connected and watching every subframe (also the only state of `umts` DCH and `off`).
    Continuous,
    /// Short DRX: reachable only in the on-durations of the short cycle.
    ShortDrx,
    /// Long DRX: reachable only in the on-durations of the long cycle.
    LongDrx,
    /// Not connected (idle, FACH or promoting).
    NotConnected,
}

/// What the cell tells the model about a UE in a subframe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RrcInput {
    /// Downlink data waits at the base station for the UE (or is in flight).
    pub downlink_waiting: bool,
    /// A HARQ retransmission is pending or due: the UE is being served.
    pub harq_busy: bool,
    /// The data plane reported uplink traffic since the last subframe.
    pub uplink: bool,
    /// Bytes waiting at the base station for the UE (the RLC buffer), bytes.
    pub downlink_bytes: u64,
    /// The UE's uplink buffer when its last packet arrived since the last subframe, bytes
    /// (0 when none arrived).
    pub uplink_bytes: u64,
}

/// What a UE on a common channel (3G CELL_FACH) may carry in one subframe, without a
/// dedicated channel: a byte budget per direction, no scheduler, no HARQ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommonChannel {
    /// Downlink bytes the UE may receive in this subframe.
    pub downlink_bytes: u32,
    /// Uplink bits the UE may send in this subframe.
    pub uplink_bits: u64,
}

/// The model's answer for a subframe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RrcStep {
    /// The RRC state in force.
    pub state: RrcState,
    /// The DRX state in force.
    pub drx: DrxState,
    /// Whether the UE can be scheduled in this subframe (connected, and in continuous
    /// reception or a DRX on-duration).
    pub reachable: bool,
    /// In CELL_FACH: what the common channel carries for the UE in this subframe (the UE
    /// is not `reachable` by the scheduler meanwhile).
    pub common: Option<CommonChannel>,
}

impl RrcStep {
    /// Connected in continuous reception.
    pub const CONNECTED: RrcStep =
        RrcStep { state: RrcState::Connected, drx: DrxState::Continuous, reachable: true, common: None };

    fn not_connected(state: RrcState) -> RrcStep {
        RrcStep { state, drx: DrxState::NotConnected, reachable: false, common: None }
    }
}

/// One UE's RRC/DRX state machine. `step` is called once per subframe with increasing
/// `t_ms` (subframes may be skipped); random draws (promotion delays) come from `rng`, the
/// UE's own stream.
pub trait RrcModel: fmt::Debug {
    /// Advances to subframe `t_ms` and returns the state in force in it.
    fn step(&mut self, t_ms: u64, input: RrcInput, rng: &mut Rng) -> RrcStep;
    /// The state after the last step (`Connected` before the first).
    fn state(&self) -> RrcState;
}

/// No RRC model: always connected, always reachable.
#[derive(Clone, Copy, Debug, Default)]
pub struct AlwaysConnected;

impl RrcModel for AlwaysConnected {
    fn step(&mut self, _: u64, _: RrcInput, _: &mut Rng) -> RrcStep {
        RrcStep::CONNECTED
    }

    fn state(&self) -> RrcState {
        RrcState::Connected
    }
}

/// z of the standard normal distribution's 75th percentile.
const Z75: f64 = 0.674_489_750_196_081_7;

/// A delay distribution given by its quartiles: a two-piece lognormal, ln(delay) normal
/// with the median's logarithm as its mode and one standard deviation below the median
/// (from p25) and another above (from p75), so that p25, p50 and p75 are exactly the
/// measured ones (a single lognormal cannot match LTE13's 319/435/558 ms: their ratios to
/// the median, 0.733 and 1.283, are not reciprocal). Equal quartiles give a fixed delay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuartileDelay {
    median_ms: f64,
    sigma_lo: f64,
    sigma_hi: f64,
}

impl QuartileDelay {
    /// Longest delay drawn, ms (a clamp far in the tail).
    const MAX_MS: f64 = 60_000.0;

    /// The distribution with quartiles `p25_ms`, `p50_ms`, `p75_ms` (sorted first, so an
    /// inconsistent triple still gives a distribution; each ≥ 1 ms once sorted, 0 is a
    /// fixed zero delay).
    pub fn new(p25_ms: f64, p50_ms: f64, p75_ms: f64) -> QuartileDelay {
        let mut q = [p25_ms, p50_ms, p75_ms];
        q.sort_by(f64::total_cmp);
        let [p25, p50, p75] = q;
        if p25 <= 0.0 {
            // A zero quartile: no spread in log space; a plain fixed delay at the median.
            return QuartileDelay { median_ms: p50, sigma_lo: 0.0, sigma_hi: 0.0 };
        }
        QuartileDelay { median_ms: p50, sigma_lo: (p50 / p25).ln() / Z75, sigma_hi: (p75 / p50).ln() / Z75 }
    }

    /// The quantile function: the delay, ms, below which a fraction `p` (0 < p < 1) of the
    /// draws fall, given the standard normal quantile `z` of `p`.
    pub fn at_z(&self, z: f64) -> f64 {
        let sigma = if z < 0.0 { self.sigma_lo } else { self.sigma_hi };
        (self.median_ms * (z * sigma).exp()).clamp(0.0, Self::MAX_MS)
    }

    /// A seeded draw, ms (one standard normal draw from `rng`).
    pub fn draw(&self, rng: &mut Rng) -> f64 {
        self.at_z(rng.gaussian())
    }
}

/// The LTE RRC/DRX machine (36.321 §5.7 DRX, simplified to one on-duration subframe
/// pattern per cycle, offset 0).
#[derive(Clone, Debug)]
pub struct LteRrc {
    /// Inactivity after which the UE goes idle, ms.
    pub tail_ms: u64,
    /// Promotion delay distribution.
    pub promotion: QuartileDelay,
    /// DRX inactivity timer: continuous reception lasts this long after the last
    /// activity, ms.
    pub inactivity_ms: u64,
    /// Short DRX cycle, ms (0: no short DRX).
    pub short_cycle_ms: u64,
    /// How long short DRX lasts before long DRX, ms.
    pub short_drx_ms: u64,
    /// Long DRX cycle, ms.
    pub long_cycle_ms: u64,
    /// On-duration at the start of each cycle, ms.
    pub on_duration_ms: u64,
    /// Paging cycle in idle, ms (0: downlink data is paged at once).
    pub paging_cycle_ms: u64,
    state: RrcState,
    /// Last subframe with activity (connected).
    last_activity_ms: u64,
    /// Idle: the paging occasion at which a downlink-triggered promotion starts.
    page_at_ms: Option<u64>,
    /// Promoting: the subframe the UE becomes connected in.
    connected_at_ms: u64,
    /// Whether a subframe has been run (the first one counts as activity).
    started: bool,
}

impl LteRrc {
    /// The machine with the given timers, starting connected in continuous reception, as
    /// if it had been active in the first subframe it runs (so a run starts with no
    /// promotion; a UE left quiet goes through DRX to idle like any other).
    pub fn new(tail_ms: u64, promotion: QuartileDelay) -> LteRrc {
        LteRrc {
            tail_ms,
            promotion,
            inactivity_ms: 100,
            short_cycle_ms: 20,
            short_drx_ms: 20,
            long_cycle_ms: 40,
            on_duration_ms: 1,
            paging_cycle_ms: 1280,
            state: RrcState::Connected,
            last_activity_ms: 0,
            page_at_ms: None,
            connected_at_ms: 0,
            started: false,
        }
    }

    fn promote(&mut self, t_ms: u64, rng: &mut Rng) {
        self.state = RrcState::Promoting;
        self.page_at_ms = None;
        // Rounded to whole subframes; ≥ 0 by construction.
        self.connected_at_ms = t_ms + self.promotion.draw(rng).round() as u64;
    }

    /// The DRX state `since_ms` after the last activity.
    fn drx_phase(&self, since_ms: u64) -> DrxState {
        if since_ms < self.inactivity_ms {
            DrxState::Continuous
        } else if self.short_cycle_ms > 0 && since_ms < self.inactivity_ms + self.short_drx_ms {
            DrxState::ShortDrx
        } else {
            DrxState::LongDrx
        }
    }

    fn on_duration(&self, t_ms: u64, drx: DrxState) -> bool {
        let cycle = match drx {
            DrxState::Continuous => return true,
            DrxState::ShortDrx => self.short_cycle_ms,
            DrxState::LongDrx => self.long_cycle_ms,
            DrxState::NotConnected => return false,
        };
        cycle == 0 || t_ms % cycle < self.on_duration_ms
    }
}

impl RrcModel for LteRrc {
    fn step(&mut self, t_ms: u64, input: RrcInput, rng: &mut Rng) -> RrcStep {
        if !std::mem::replace(&mut self.started, true) {
            self.last_activity_ms = t_ms;
        }
        if self.state == RrcState::Idle {
            if input.uplink {
                // UE-initiated: the random access starts at once.
                self.promote(t_ms, rng);
            } else if input.downlink_waiting {
                // Network-initiated: the UE hears the page at its next paging occasion.
                let page = *self.page_at_ms.get_or_insert(match self.paging_cycle_ms {
                    0 => t_ms,
                    cycle => t_ms.div_ceil(cycle) * cycle,
                });
                if t_ms >= page {
                    self.promote(t_ms, rng);
                }
            }
        }
        if self.state == RrcState::Promoting && t_ms >= self.connected_at_ms {
            self.state = RrcState::Connected;
            self.last_activity_ms = t_ms;
        }
        if self.state != RrcState::Connected {
            return RrcStep::not_connected(self.state);
        }
        // An uplink transmission (its scheduling request) brings the UE back to
        // continuous reception; so does being served.
        if input.uplink || input.harq_busy {
            self.last_activity_ms = t_ms;
        }
        let since = t_ms.saturating_sub(self.last_activity_ms);
        let drx = self.drx_phase(since);
        if drx == DrxState::Continuous && input.downlink_waiting {
            self.last_activity_ms = t_ms;
            return RrcStep::CONNECTED;
        }
        if since >= self.tail_ms {
            self.state = RrcState::Idle;
            self.page_at_ms = None;
            // Data that arrived just now is paged from this subframe on.
            return RrcStep::not_connected(RrcState::Idle);
        }
        let reachable = self.on_duration(t_ms, drx);
        if reachable && input.downlink_waiting {
            // Scheduled in the on-duration: the inactivity timer restarts.
            self.last_activity_ms = t_ms;
            return RrcStep::CONNECTED;
        }
        RrcStep { state: RrcState::Connected, drx, reachable, common: None }
    }

    fn state(&self) -> RrcState {
        self.state
    }
}

/// The 3G (UMTS) RRC machine: DCH, FACH, IDLE with fixed promotion delays (the papers give
/// single values, no distribution), and the FACH common channel.
#[derive(Clone, Debug)]
pub struct UmtsRrc {
    /// Inactivity in DCH before FACH, ms.
    pub dch_tail_ms: u64,
    /// Inactivity in FACH before IDLE, ms.
    pub fach_tail_ms: u64,
    /// IDLE → DCH promotion, ms.
    pub idle_promotion_ms: u64,
    /// FACH → DCH promotion, ms.
    pub fach_promotion_ms: u64,
    /// The FACH common channel's rate to the UE, bit/s (0: no data in FACH, every packet
    /// promotes).
    pub fach_downlink_bps: u64,
    /// The FACH (RACH) rate from the UE, bit/s (0: as for the downlink).
    pub fach_uplink_bps: u64,
    /// Bytes waiting at the base station above which FACH → DCH starts.
    pub fach_downlink_threshold_bytes: u64,
    /// Bytes in the UE's uplink buffer above which FACH → DCH starts.
    pub fach_uplink_threshold_bytes: u64,
    state: RrcState,
    /// DCH: the last subframe with activity.
    last_activity_ms: u64,
    /// FACH: the last subframe with activity (or the one FACH began in).
    fach_activity_ms: u64,
    connected_at_ms: u64,
    /// FACH: the time up to which the channel's budget has been handed out.
    budget_from_ms: u64,
    /// FACH budgets' fractions carried to the next subframe, millibits.
    downlink_carry_mbit: u64,
    uplink_carry_mbit: u64,
    started: bool,
}

impl UmtsRrc {
    /// The machine with the given timers, starting in DCH as if its last activity had
    /// been at time 0, with no data path in FACH (set the `fach_*` fields for one).
    pub fn new(dch_tail_ms: u64, fach_tail_ms: u64, idle_promotion_ms: u64, fach_promotion_ms: u64) -> UmtsRrc {
        UmtsRrc {
            dch_tail_ms,
            fach_tail_ms,
            idle_promotion_ms,
            fach_promotion_ms,
            fach_downlink_bps: 0,
            fach_uplink_bps: 0,
            fach_downlink_threshold_bytes: 0,
            fach_uplink_threshold_bytes: 0,
            state: RrcState::Connected,
            last_activity_ms: 0,
            fach_activity_ms: 0,
            connected_at_ms: 0,
            budget_from_ms: 0,
            downlink_carry_mbit: 0,
            uplink_carry_mbit: 0,
            started: false,
        }
    }

    fn promote(&mut self, t_ms: u64, delay_ms: u64) {
        self.state = RrcState::Promoting;
        self.connected_at_ms = t_ms + delay_ms;
    }

    /// Whether what waits fits the common channel: a FACH rate, and both buffers at or
    /// below their thresholds (above one, 25.331's event 4a asks for DCH).
    fn fits_fach(&self, input: &RrcInput) -> bool {
        self.fach_downlink_bps > 0
            && input.downlink_bytes <= self.fach_downlink_threshold_bytes
            && input.uplink_bytes <= self.fach_uplink_threshold_bytes
    }

    /// This subframe's FACH budgets for `dt_ms` elapsed ms, the fractions carried on.
    fn fach_budget(&mut self, dt_ms: u64) -> CommonChannel {
        let up_bps = if self.fach_uplink_bps > 0 { self.fach_uplink_bps } else { self.fach_downlink_bps };
        // bit/s × ms = millibits.
        self.downlink_carry_mbit =
            self.downlink_carry_mbit.saturating_add(self.fach_downlink_bps.saturating_mul(dt_ms));
        self.uplink_carry_mbit = self.uplink_carry_mbit.saturating_add(up_bps.saturating_mul(dt_ms));
        let downlink_bytes = self.downlink_carry_mbit / 8_000;
        let uplink_bits = self.uplink_carry_mbit / 1_000;
        self.downlink_carry_mbit %= 8_000;
        self.uplink_carry_mbit %= 1_000;
        CommonChannel { downlink_bytes: u32::try_from(downlink_bytes).unwrap_or(u32::MAX), uplink_bits }
    }
}

impl RrcModel for UmtsRrc {
    fn step(&mut self, t_ms: u64, input: RrcInput, _: &mut Rng) -> RrcStep {
        if !std::mem::replace(&mut self.started, true) {
            self.last_activity_ms = t_ms;
        }
        let wants = input.uplink || input.downlink_waiting;
        // Timers: DCH → FACH after the DCH tail, FACH → IDLE after the FACH tail (from the
        // later of entering FACH and its last activity); a skip over both lands in IDLE.
        if self.state == RrcState::Connected && !wants && t_ms.saturating_sub(self.last_activity_ms) >= self.dch_tail_ms
        {
            self.state = RrcState::Fach;
            self.fach_activity_ms = self.last_activity_ms + self.dch_tail_ms;
            self.budget_from_ms = self.fach_activity_ms;
            self.downlink_carry_mbit = 0;
            self.uplink_carry_mbit = 0;
        }
        if self.state == RrcState::Fach
            && !(wants && self.fits_fach(&input))
            && t_ms.saturating_sub(self.fach_activity_ms) >= self.fach_tail_ms
        {
            self.state = RrcState::Idle;
        }
        match self.state {
            RrcState::Fach if wants && self.fits_fach(&input) => self.fach_activity_ms = t_ms,
            RrcState::Fach if wants => self.promote(t_ms, self.fach_promotion_ms),
            RrcState::Idle if wants => self.promote(t_ms, self.idle_promotion_ms),
            _ => {}
        }
        if self.state == RrcState::Promoting && t_ms >= self.connected_at_ms {
            // The promotion ends in DCH with its timer started: the data that asked for it
            // (an uplink packet is reported once, when it arrives) is still to be sent.
            self.state = RrcState::Connected;
            self.last_activity_ms = t_ms;
        }
        match self.state {
            RrcState::Connected => {
                if wants || input.harq_busy {
                    self.last_activity_ms = t_ms;
                }
                RrcStep::CONNECTED
            }
            RrcState::Fach => {
                let dt_ms = t_ms.saturating_sub(self.budget_from_ms);
                self.budget_from_ms = t_ms;
                let common = self.fach_budget(dt_ms);
                RrcStep { common: Some(common), ..RrcStep::not_connected(RrcState::Fach) }
            }
            state => RrcStep::not_connected(state),
        }
    }

    fn state(&self) -> RrcState {
        self.state
    }
}

const fn int_param(name: &'static str, min: i64, max: i64, default: i64, doc: &'static str) -> Param {
    Param { name, kind: ParamType::Integer { min, max }, default: ParamDefault::Integer(default), doc }
}

const fn ms_param(name: &'static str, min: i64, max: i64, default: i64, doc: &'static str) -> Param {
    int_param(name, min, max, default, doc)
}

/// A non-negative integer parameter (ms, bit/s, bytes).
fn uint(params: &Params, name: &str) -> u64 {
    // Declared with a non-negative range.
    params.integer(name).max(0) as u64
}

/// Every RRC model, by name: the `cell.rrc` choice (`crate::policy`). Built once per UE.
pub static POLICIES: Registry<dyn RrcModel + Send, ()> = Registry {
    category: "rrc",
    config_key: "cell.rrc",
    default: "lte",
    summary: "each UE's radio state (RRC and DRX): when it can be scheduled, and the promotion after idle",
    policies: &[
        Policy {
            name: "lte",
            summary: "LTE: continuous reception → short DRX → long DRX → idle after the tail; downlink data waits for \
                      the next on-duration; from idle (downlink: after the paging occasion) a promotion drawn from \
                      the quartiles (two-piece lognormal) that holds all the UE's data",
            params: &[
                ms_param("tail_ms", 1, 3_600_000, 10_000, "inactivity before RRC_IDLE, ms (LTE13 §4.1: 10 s)"),
                ms_param("promotion_p25_ms", 0, 10_000, 319, "promotion delay, 25th percentile, ms (LTE13 Fig 9)"),
                ms_param("promotion_ms", 0, 10_000, 435, "promotion delay, median, ms (LTE13 Fig 9)"),
                ms_param("promotion_p75_ms", 0, 10_000, 558, "promotion delay, 75th percentile, ms (LTE13 Fig 9)"),
                ms_param("inactivity_ms", 1, 2_560, 100, "DRX inactivity timer, ms (SPDY App. A: ~100 ms)"),
                ms_param(
                    "short_cycle_ms",
                    0,
                    640,
                    20,
                    "short DRX cycle, ms (0: no short DRX; chosen, see Calibration)",
                ),
                ms_param("short_drx_ms", 0, 10_240, 20, "time in short DRX before long DRX, ms (chosen)"),
                ms_param("long_cycle_ms", 10, 2_560, 40, "long DRX cycle, ms (chosen)"),
                ms_param("on_duration_ms", 1, 200, 1, "DRX on-duration at the start of each cycle, ms (chosen)"),
                ms_param("paging_cycle_ms", 0, 2_560, 1_280, "idle paging cycle, ms (0: page at once; chosen: 1.28 s)"),
            ],
            build: |p, _| {
                let promotion = QuartileDelay::new(
                    p.integer("promotion_p25_ms") as f64,
                    p.integer("promotion_ms") as f64,
                    p.integer("promotion_p75_ms") as f64,
                );
                let mut m = LteRrc::new(uint(p, "tail_ms"), promotion);
                m.inactivity_ms = uint(p, "inactivity_ms");
                m.short_cycle_ms = uint(p, "short_cycle_ms");
                m.short_drx_ms = uint(p, "short_drx_ms");
                m.long_cycle_ms = uint(p, "long_cycle_ms");
                m.on_duration_ms = uint(p, "on_duration_ms");
                m.paging_cycle_ms = uint(p, "paging_cycle_ms");
                Box::new(m)
            },
        },
        Policy {
            name: "umts",
            summary: "3G: DCH → FACH after dch_tail_ms → IDLE after fach_tail_ms of FACH inactivity; in FACH small \
                      packets pass at the FACH rate, and data above a buffer threshold waits for a promotion to DCH \
                      (fach_promotion_ms), as any data in IDLE does (idle_promotion_ms)",
            params: &[
                ms_param("dch_tail_ms", 1, 3_600_000, 5_000, "DCH → FACH after this inactivity, ms (SPDY App. A)"),
                ms_param(
                    "fach_tail_ms",
                    1,
                    3_600_000,
                    12_000,
                    "FACH → IDLE after this inactivity in FACH, ms (SPDY App. A)",
                ),
                ms_param("idle_promotion_ms", 0, 10_000, 2_000, "IDLE → DCH promotion, ms (SPDY §5.5.1; LTE13 §4.2)"),
                ms_param("fach_promotion_ms", 0, 10_000, 1_500, "FACH → DCH promotion, ms (LTE13 §4.2, cited)"),
                int_param(
                    "fach_downlink_bps",
                    0,
                    2_000_000,
                    32_000,
                    "FACH rate to the UE, bit/s (0: any data in FACH promotes; SPDY App. A: \"a low rate\", \
                     32 kbit/s chosen)",
                ),
                int_param("fach_uplink_bps", 0, 2_000_000, 32_000, "FACH (RACH) rate from the UE, bit/s (chosen)"),
                int_param(
                    "fach_downlink_threshold_bytes",
                    0,
                    1_000_000,
                    512,
                    "bytes waiting at the base station above which FACH → DCH starts (25.331 event 4a; chosen)",
                ),
                int_param(
                    "fach_uplink_threshold_bytes",
                    0,
                    1_000_000,
                    512,
                    "bytes in the UE's uplink buffer above which FACH → DCH starts (25.331 event 4a; chosen)",
                ),
            ],
            build: |p, _| {
                let mut m = UmtsRrc::new(
                    uint(p, "dch_tail_ms"),
                    uint(p, "fach_tail_ms"),
                    uint(p, "idle_promotion_ms"),
                    uint(p, "fach_promotion_ms"),
                );
                m.fach_downlink_bps = uint(p, "fach_downlink_bps");
                m.fach_uplink_bps = uint(p, "fach_uplink_bps");
                m.fach_downlink_threshold_bytes = uint(p, "fach_downlink_threshold_bytes");
                m.fach_uplink_threshold_bytes = uint(p, "fach_uplink_threshold_bytes");
                Box::new(m)
            },
        },
        Policy {
            name: "off",
            summary: "no RRC model: always connected, always reachable",
            params: &[],
            build: |_, _| Box::new(AlwaysConnected),
        },
    ],
    legacy: Some(legacy_table),
};

/// A `cell.rrc` table without `kind` (the former switch, and the fidelity suite's keys):
/// `enabled = false` → `off`; else the kind from `profile` (`lte`, default; `3g`/`umts`;
/// `off`); `hold_downlink = true` is the model's behaviour (false is refused); a
/// `promotion_ms` given without quartiles is a fixed delay, as the former model had.
fn legacy_table(params: &mut BTreeMap<String, ParamValue>) -> Result<String, String> {
    let enabled = match params.remove("enabled") {
        None => true,
        Some(ParamValue::Bool(b)) => b,
        Some(v) => return Err(format!("enabled: must be true or false, got {v}")),
    };
    let profile = params.remove("profile");
    match params.remove("hold_downlink") {
        None | Some(ParamValue::Bool(true)) => {}
        Some(v) => return Err(format!("hold_downlink: the RRC models always hold downlink data (true), got {v}")),
    }
    if !enabled {
        params.clear();
        return Ok("off".into());
    }
    let kind = match &profile {
        None => "lte",
        Some(ParamValue::Text(p)) if p == "lte" => "lte",
        Some(ParamValue::Text(p)) if p == "3g" || p == "umts" => "umts",
        Some(ParamValue::Text(p)) if p == "off" => "off",
        Some(v) => return Err(format!("profile: must be \"lte\", \"3g\"/\"umts\" or \"off\", got {v}")),
    };
    if kind == "lte" {
        if let Some(median) = params.get("promotion_ms").cloned() {
            if !params.contains_key("promotion_p25_ms") && !params.contains_key("promotion_p75_ms") {
                params.insert("promotion_p25_ms".into(), median.clone());
                params.insert("promotion_p75_ms".into(), median);
            }
        }
    }
    Ok(kind.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyChoice;

    fn lte() -> LteRrc {
        let mut m = LteRrc::new(10_000, QuartileDelay::new(435.0, 435.0, 435.0));
        m.paging_cycle_ms = 0;
        m.started = true;
        m
    }

    const QUIET: RrcInput =
        RrcInput { downlink_waiting: false, harq_busy: false, uplink: false, downlink_bytes: 0, uplink_bytes: 0 };
    /// A full packet waiting at the base station (above the FACH threshold).
    const DATA: RrcInput = RrcInput { downlink_waiting: true, downlink_bytes: 1_500, ..QUIET };
    /// A full packet in the uplink buffer.
    const UPLINK: RrcInput = RrcInput { uplink: true, uplink_bytes: 1_500, ..QUIET };

    /// The registry's `umts` with its defaults (the FACH channel on).
    fn umts_defaults() -> UmtsRrc {
        let params = POLICIES.check(&PolicyChoice::named("umts")).unwrap();
        let mut m = UmtsRrc::new(5_000, 12_000, 2_000, 1_500);
        m.fach_downlink_bps = params.integer("fach_downlink_bps") as u64;
        m.fach_uplink_bps = params.integer("fach_uplink_bps") as u64;
        m.fach_downlink_threshold_bytes = params.integer("fach_downlink_threshold_bytes") as u64;
        m.fach_uplink_threshold_bytes = params.integer("fach_uplink_threshold_bytes") as u64;
        m.started = true;
        m
    }

    #[test]
    fn lte_promotion_drx_and_tail() {
        let mut rng = Rng::new(1, 0);
        let mut m = lte();
        assert_eq!(m.step(0, QUIET, &mut rng).state, RrcState::Connected);
        assert_eq!(m.step(10_000, QUIET, &mut rng).state, RrcState::Idle);
        m.last_activity_ms = 0;
        assert_eq!(m.step(10, DATA, &mut rng).state, RrcState::Promoting);
        assert_eq!(m.step(444, DATA, &mut rng).state, RrcState::Promoting);
        let s = m.step(445, DATA, &mut rng);
        assert_eq!((s.state, s.drx, s.reachable), (RrcState::Connected, DrxState::Continuous, true));
        // Served until 500, then quiet: continuous for the 100 ms inactivity timer.
        assert!(m.step(500, DATA, &mut rng).reachable);
        assert_eq!(m.step(599, QUIET, &mut rng).drx, DrxState::Continuous);
        // Short DRX 600..620: on-durations at multiples of 20 ms only.
        let s = m.step(600, QUIET, &mut rng);
        assert_eq!((s.drx, s.reachable), (DrxState::ShortDrx, true));
        assert!(!m.step(601, QUIET, &mut rng).reachable);
        // Long DRX from 620: data arriving at 621 waits for 640, the next on-duration.
        for t in 621..640 {
            let s = m.step(t, DATA, &mut rng);
            assert_eq!((s.drx, s.reachable), (DrxState::LongDrx, false), "t {t}");
        }
        let s = m.step(640, DATA, &mut rng);
        assert_eq!((s.drx, s.reachable), (DrxState::Continuous, true));
        assert_eq!(m.step(641, DATA, &mut rng).drx, DrxState::Continuous);
        // Uplink in long DRX: continuous at once.
        assert_eq!(m.step(5_000, QUIET, &mut rng).drx, DrxState::LongDrx);
        assert_eq!(m.step(5_001, UPLINK, &mut rng).drx, DrxState::Continuous);
        // Tail: idle 10 s after the last activity.
        assert_eq!(m.step(15_000, QUIET, &mut rng).state, RrcState::Connected);
        assert_eq!(m.step(15_001, QUIET, &mut rng).state, RrcState::Idle);
        // Uplink-triggered promotion from idle.
        assert_eq!(m.step(16_000, UPLINK, &mut rng).state, RrcState::Promoting);
        assert_eq!(m.step(16_435, QUIET, &mut rng).state, RrcState::Connected);
    }

    #[test]
    fn downlink_waits_for_the_paging_occasion() {
        let mut rng = Rng::new(1, 0);
        let mut m = lte();
        m.paging_cycle_ms = 1280;
        m.state = RrcState::Idle;
        assert_eq!(m.step(100, DATA, &mut rng).state, RrcState::Idle);
        assert_eq!(m.step(1279, DATA, &mut rng).state, RrcState::Idle);
        assert_eq!(m.step(1280, DATA, &mut rng).state, RrcState::Promoting);
        assert_eq!(m.step(1714, DATA, &mut rng).state, RrcState::Promoting);
        assert_eq!(m.step(1715, DATA, &mut rng).state, RrcState::Connected);
    }

    /// The standard normal quantile function by bisection on the error function's
    /// series-free form (an oracle independent of the model's z-based quantile function).
    fn normal_cdf(x: f64) -> f64 {
        // Abramowitz–Stegun 7.1.26, |error| < 1.5e-7.
        let t = 1.0 / (1.0 + 0.327_591_1 * x.abs() / std::f64::consts::SQRT_2);
        let poly =
            t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
        let erf = 1.0 - poly * (-(x * x) / 2.0).exp();
        if x >= 0.0 {
            0.5 * (1.0 + erf)
        } else {
            0.5 * (1.0 - erf)
        }
    }

    #[test]
    fn promotion_draws_match_the_measured_quartiles() {
        // The table's numbers (docs/fidelity-table.md §7A, LTE13 Fig 9), not the defaults'.
        let (p25, p50, p75) = (319.0, 435.0, 558.0);
        let d = QuartileDelay::new(p25, p50, p75);
        assert!((d.at_z(-Z75) - p25).abs() < 1e-9 && (d.at_z(0.0) - p50).abs() < 1e-9);
        assert!((d.at_z(Z75) - p75).abs() < 1e-9);
        assert!((normal_cdf(Z75) - 0.75).abs() < 1e-6);
        let mut rng = Rng::new(7, 3);
        let mut draws: Vec<f64> = (0..40_000).map(|_| d.draw(&mut rng)).collect();
        draws.sort_by(f64::total_cmp);
        let q = |p: f64| draws[(p * draws.len() as f64) as usize];
        for (p, want) in [(0.25, p25), (0.5, p50), (0.75, p75)] {
            assert!((q(p) - want).abs() / want < 0.02, "p{}: {} vs {want}", p * 100.0, q(p));
        }
        assert!(draws[0] > 50.0 && *draws.last().unwrap() < 3_000.0);
        // The registry's defaults are the table's quartiles.
        let params = POLICIES.check(&PolicyChoice::named("lte")).unwrap();
        assert_eq!(
            (params.integer("promotion_p25_ms"), params.integer("promotion_ms"), params.integer("promotion_p75_ms")),
            (319, 435, 558)
        );
    }

    #[test]
    fn umts_dch_fach_idle() {
        let mut rng = Rng::new(1, 0);
        let mut m = UmtsRrc::new(5_000, 12_000, 2_000, 1_500);
        m.state = RrcState::Idle;
        m.started = true;
        assert_eq!(m.step(0, DATA, &mut rng).state, RrcState::Promoting);
        assert_eq!(m.step(1_999, DATA, &mut rng).state, RrcState::Promoting);
        assert!(m.step(2_000, DATA, &mut rng).reachable);
        assert_eq!(m.step(6_999, QUIET, &mut rng).state, RrcState::Connected);
        assert_eq!(m.step(7_000, QUIET, &mut rng).state, RrcState::Fach);
        // Data in FACH: a 1.5 s promotion.
        assert_eq!(m.step(8_000, DATA, &mut rng).state, RrcState::Promoting);
        assert_eq!(m.step(9_500, DATA, &mut rng).state, RrcState::Connected);
        assert_eq!(m.step(14_500, QUIET, &mut rng).state, RrcState::Fach);
        assert_eq!(m.step(26_499, QUIET, &mut rng).state, RrcState::Fach);
        assert_eq!(m.step(26_500, QUIET, &mut rng).state, RrcState::Idle);
    }

    #[test]
    fn a_umts_promotion_asked_by_one_uplink_packet_stays_in_dch() {
        // The data plane reports an uplink packet once; the promotion it asked for must end
        // in DCH for the whole DCH timer, not fall back to IDLE (and promote again) at once.
        let mut rng = Rng::new(1, 0);
        let mut m = UmtsRrc::new(5_000, 12_000, 2_000, 1_500);
        m.state = RrcState::Idle;
        m.started = true;
        assert_eq!(m.step(100_000, UPLINK, &mut rng).state, RrcState::Promoting);
        for t in 100_001..102_000 {
            assert_eq!(m.step(t, QUIET, &mut rng).state, RrcState::Promoting, "at {t}");
        }
        for t in 102_000..106_999 {
            assert_eq!(m.step(t, QUIET, &mut rng).state, RrcState::Connected, "at {t}");
        }
        assert_eq!(m.step(107_000, QUIET, &mut rng).state, RrcState::Fach);
    }

    #[test]
    fn small_packets_pass_in_fach_and_a_large_response_promotes() {
        let mut rng = Rng::new(1, 0);
        let mut m = umts_defaults();
        assert_eq!(m.step(0, QUIET, &mut rng).state, RrcState::Connected);
        let s = m.step(5_000, QUIET, &mut rng);
        assert_eq!((s.state, s.reachable), (RrcState::Fach, false));
        // A 300-byte request: FACH carries it, 32 kbit/s = 4 bytes per ms; no promotion.
        let request = RrcInput { uplink: true, uplink_bytes: 300, ..QUIET };
        let s = m.step(8_000, request, &mut rng);
        assert_eq!(s.state, RrcState::Fach);
        // 3 000 ms since the last subframe run: 12 000 bytes' worth of downlink, 96 000 bits up.
        assert_eq!(s.common, Some(CommonChannel { downlink_bytes: 12_000, uplink_bits: 96_000 }));
        let mut up_bits = 0;
        for t in 8_001..8_076 {
            let s = m.step(t, QUIET, &mut rng);
            assert_eq!(s.state, RrcState::Fach, "at {t}");
            up_bits += s.common.unwrap().uplink_bits;
        }
        assert_eq!(up_bits, 75 * 32);
        // The response's first flight reaches the base station: above 512 bytes, FACH → DCH,
        // and nothing is carried for the 1.5 s it takes.
        let flight = RrcInput { downlink_waiting: true, downlink_bytes: 14_480, ..QUIET };
        let s = m.step(8_100, flight, &mut rng);
        assert_eq!((s.state, s.common), (RrcState::Promoting, None));
        assert_eq!(m.step(9_599, flight, &mut rng).state, RrcState::Promoting);
        assert!(m.step(9_600, flight, &mut rng).reachable);
        // A small downlink packet in FACH (an ACK, a ping) restarts FACH's timer, no promotion.
        assert_eq!(m.step(14_600, QUIET, &mut rng).state, RrcState::Fach);
        let ping = RrcInput { downlink_waiting: true, downlink_bytes: 84, ..QUIET };
        assert_eq!(m.step(20_000, ping, &mut rng).state, RrcState::Fach);
        assert_eq!(m.step(31_999, QUIET, &mut rng).state, RrcState::Fach);
        assert_eq!(m.step(32_000, QUIET, &mut rng).state, RrcState::Idle);
        // In IDLE even a small packet waits for the 2 s promotion.
        assert_eq!(m.step(40_000, request, &mut rng).state, RrcState::Promoting);
        assert_eq!(m.step(42_000, QUIET, &mut rng).state, RrcState::Connected);
    }

    #[test]
    fn fach_budgets_keep_the_rate_over_odd_fractions() {
        let mut rng = Rng::new(1, 0);
        let mut m = umts_defaults();
        m.fach_downlink_bps = 12_345;
        m.fach_uplink_bps = 0;
        m.step(0, QUIET, &mut rng);
        assert_eq!(m.step(5_000, QUIET, &mut rng).state, RrcState::Fach);
        let (mut down, mut up) = (0u64, 0u64);
        for t in 5_001..=15_000 {
            let c =
                m.step(t, RrcInput { downlink_waiting: true, downlink_bytes: 10, ..QUIET }, &mut rng).common.unwrap();
            down += u64::from(c.downlink_bytes);
            up += c.uplink_bits;
        }
        // 10 s at 12 345 bit/s, within one byte; the uplink at the downlink's rate (0 = same).
        assert!((down as i64 - 12_345 * 10 / 8).abs() <= 1, "{down}");
        assert!((up as i64 - 123_450).abs() <= 1, "{up}");
    }

    #[test]
    fn a_zero_fach_rate_promotes_on_any_data() {
        let mut rng = Rng::new(1, 0);
        let mut m = umts_defaults();
        m.fach_downlink_bps = 0;
        m.step(0, QUIET, &mut rng);
        assert_eq!(m.step(5_000, QUIET, &mut rng).state, RrcState::Fach);
        let ack = RrcInput { uplink: true, uplink_bytes: 52, ..QUIET };
        assert_eq!(m.step(5_001, ack, &mut rng).state, RrcState::Promoting);
    }

    #[test]
    fn legacy_tables() {
        let parse = |json: &str| -> PolicyChoice { serde_json::from_str(json).unwrap() };
        let resolve = |json: &str| POLICIES.resolve(parse(json)).map(|c| (c.kind.clone(), c));
        assert_eq!(resolve(r#"{"enabled": false, "tail_ms": 5}"#).unwrap().0, "off");
        let (kind, c) = resolve(r#"{"enabled": true, "tail_ms": 5000, "promotion_ms": 300}"#).unwrap();
        assert_eq!(kind, "lte");
        assert_eq!(c.params["promotion_p25_ms"], ParamValue::Integer(300));
        let (kind, _) =
            resolve(r#"{"enabled": true, "profile": "3g", "dch_tail_ms": 5000, "hold_downlink": true}"#).unwrap();
        assert_eq!(kind, "umts");
        assert!(resolve(r#"{"hold_downlink": false}"#).is_err());
        assert!(resolve(r#"{"profile": "5g"}"#).is_err());
    }
}

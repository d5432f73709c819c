//! The clawbed LTE cell model, one 1 ms subframe at a time.
//!
//! Pure and deterministic: no I/O, no threads, no clocks. The same configuration, seed,
//! conditions and calls give the same outputs. The data plane (`emulator/dataplane`) owns
//! the packets, the clock and every delay line; this crate sees a packet only as a length
//! and an opaque handle `H` (see `emulator/ARCHITECTURE.md`).
//!
//! # A subframe (`docs/emulator-model.md`)
//!
//! 1. Each UE's [`Conditions`] give its channel-quality MCS and layers (closed loop) or a
//!    byte budget (open loop, Mahimahi or a constant rate); the primary source (a
//!    background trace, else UE 0's) gives the other users' demand B_k and number.
//! 2. HARQ retransmissions due in this subframe take their RBs first ([`harq`]).
//! 3. Each other UE's demand D_k is the fewest RBs whose TBS carries what it can send
//!    ([`demand`]); the [`Scheduler`] shares the free RBs between the UEs and the other
//!    users.
//! 4. Each scheduled UE's transport block carries the next TBS bytes of its stream,
//!    byte-accurate (module `rlc`); its CRC outcome is drawn ([`harq::LossModel`]); a packet is
//!    delivered in the subframe its last byte is received, in order.
//! 5. RSRQ follows from the total allocation A_k by Eq. 6, with noise, quantisation and
//!    hold ([`rsrq`]); each UE gets a [`DiagRecord`] in MobileInsight's names ([`diag`])
//!    and the cell a [`TruthRecord`] ([`truth`]).
//!
//! Units are in the names: `_ms` milliseconds, `_bytes`, `_bits`, `_rbs` resource blocks
//! (per 1 ms subframe), `_db`/`_dbm`, `_bps` bit/s. TB sizes on the diag feed are bytes.
//!
//! # Defaults and the residual-loss calibration
//!
//! | parameter | default | why |
//! |---|---|---|
//! | N_rb | the primary trace's, else 50 | the trace describes the cell |
//! | BS buffer | 3 MiB drop-tail per UE | seeds: hundreds of KB to a few MB |
//! | HARQ round trip | 8 ms | LTE FDD |
//! | HARQ transmissions | 4 | common eNB setting |
//! | first-transmission BLER | 0.1 (else the trace's) | LTE link adaptation target |
//! | BLER after a failure (`harq.retx_bler`) | 0.41 | calibration, below |
//! | RLC retransmission delay | 40 ms | reordering timer + status report |
//! | RLC retransmissions | 1 | calibration, below |
//! | RSRQ noise / quantum / hold | 0.5 dB / 0.0625 dB / 1 ms | phones quantise to 1/16 dB |
//! | RRC/DRX (`rrc`) | `lte`: tail 10 s, promotion quartiles 319/435/558 ms, DRX 100 ms / 20 ms / 40 ms | LTE13, SPDY App. A ([`rrc`]) |
//! | stalls (`stall`) | off (a trace's `outage` column stalls) | no measured rate ([`stall`]) |
//!
//! The seeds put the median TCP retransmission rate on LTE at 0.06% and the worst case
//! below 1%, so the cell should lose about 6·10⁻⁴ of the packets of a typical busy UE.
//! With independent failures at the 10% first-transmission BLER, four HARQ transmissions
//! and one RLC retransmission would lose about 10⁻⁸ of the blocks: real losses come from
//! fades that outlast the retransmissions. The loss model therefore draws every
//! transmission that follows a failure (HARQ retransmissions, and the first transmission
//! of RLC-retransmitted bytes) at `retx_bler` = r. A block's bytes are then lost with
//! probability p·r³ (first failure, three HARQ retransmissions fail) times r⁴ (the RLC
//! retransmission's four transmissions fail): 0.1 · 0.41⁷ ≈ 2·10⁻⁴. A lost range costs
//! every packet it touches, about 1 + 1500/TB bytes packets per block's worth of packets,
//! so with blocks of ~1100 bytes the packet loss is ~2.4 times the block loss, and a
//! retransmitted range split over two smaller blocks gets two chances to fail: measured,
//! 6.2·10⁻⁴ mean, 6.0·10⁻⁴ median over 12 two-minute runs of a saturated UE on a busy
//! synthetic 10 MHz trace (MCS 8–24, other users 0–50 RBs), 3.6–9.2·10⁻⁴ per run (the
//! `calibration` test repeats a shorter version). The loss goes as r⁷: r = 0.40 gives
//! 5.4·10⁻⁴, 0.42 gives 7.8·10⁻⁴. Small blocks raise it: a poor channel (MCS 2, 10 RBs,
//! ~140-byte blocks) loses 3.4·10⁻³, still below the seeds' worst case of 1%. A trace
//! with a `harq_fail` column decides first transmissions itself, its own correlation
//! included, so the calibration applies to BLER-drawn failures only.
//!
//! # Performance
//!
//! `run_subframe` allocates nothing once the output's vectors and the queues have grown:
//! packets sit in per-UE `VecDeque`s, transport blocks are byte ranges in fixed arrays.
//! `examples/cell_speed.rs` times it for 1 and 45 saturated UEs.
//!
//! # Policies
//!
//! The scheduler ([`scheduler`]), each UE's queue policy ([`queue`]), the HARQ loss
//! model ([`harq`]), the RRC/DRX model ([`rrc`]) and the stall process ([`stall`]) are
//! chosen by name in the configuration ([`CellConfig::scheduler`], [`CellConfig::loss`],
//! [`UeConfig::queue`], [`CellConfig::rrc`], [`CellConfig::stall`]); each module lists its policies in its
//! `POLICIES` registry, next to the types ([`policy`] has the machinery and the
//! catalogue the binary prints).
//!
//! # Scripted events
//!
//! A config's `events` ([`events`]): drops of chosen downlink packets, outages, capacity
//! steps and bursts of other users at chosen moments, relative to the last arming
//! ([`Cell::arm_events`]); recorded in the truth (`scripted_outage`, `capacity_factor`,
//! `event_drops`, `burst_rbs`).
//!
//! # Outside the cell
//!
//! The uplink MAC ([`uplink`]: SR period, grant delay, uplink capacity) and the core delay
//! with its FIFO delay lines ([`delay`]) are pure logic too; the data plane drives them from
//! its cell thread, in emulated nanoseconds.

#![forbid(unsafe_code)]

pub mod cell;
pub mod conditions;
pub mod config;
pub mod delay;
pub mod demand;
pub mod diag;
pub mod events;
pub mod harq;
pub mod policy;
pub mod queue;
mod rlc;
mod rng;
pub mod rrc;
pub mod rsrq;
pub mod scheduler;
pub mod stall;
pub mod truth;
pub mod uplink;

pub use crate::cell::{Cell, SubframeOutput, UeSetup, UplinkAllowance};
pub use crate::conditions::{
    Capacity, ConditionTrace, Conditions, ConditionsError, ConstantRate, MahimahiConditions, SubframeConditions,
    TraceColumns, TraceConditions,
};
pub use crate::config::{CellConfig, ConfigError, UeConfig};
pub use crate::diag::DiagRecord;
pub use crate::policy::PolicyChoice;
pub use crate::rrc::{CommonChannel, DrxState, RrcState};
pub use crate::scheduler::Scheduler;
pub use crate::truth::{TruthRecord, UeTruth};

use serde::Serialize;

/// An emulated UE of a cell: UE i of the list given to [`Cell::new`] is `UeId(i)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct UeId(pub u16);

impl UeId {
    /// The UE's position in the cell's list.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// Why the cell dropped a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropCause {
    /// The UE's BS buffer was full when it arrived (a congestion loss).
    Overflow,
    /// RLC gave up on it after its retransmission limit (a wireless loss).
    RlcLoss,
}

/// What [`Cell::enqueue`] did with a packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Enqueued<H> {
    /// Queued in the UE's BS buffer; the handle comes back in `delivered` or `lost`.
    Queued,
    /// Dropped on arrival ([`DropCause::Overflow`]); the handle is returned.
    Dropped(H, DropCause),
    /// Not accepted: the UE does not exist or the packet is empty. A caller error,
    /// counted nowhere; the handle is returned.
    Rejected(H),
}

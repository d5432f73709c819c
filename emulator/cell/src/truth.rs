//! Ground truth: what the cell really did in a subframe, for scoring the CLAW client's
//! estimates and the loss classification. Serialises (serde) with the field names below.

use crate::rrc::{DrxState, RrcState};
use crate::UeId;
use serde::Serialize;

/// One UE's part of a subframe's ground truth.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct UeTruth {
    /// The UE.
    pub ue: UeId,
    /// Channel-quality MCS of the subframe; `None` in open-loop mode or after the
    /// conditions ended.
    pub mcs: Option<u8>,
    /// Spatial layers of the subframe's channel (1 in open-loop mode).
    pub layers: u8,
    /// Demand D_k, RBs: the fewest RBs carrying what the UE could send (0 while a HARQ
    /// retransmission, RRC or open-loop mode keeps it out of scheduling).
    pub demand_rbs: u8,
    /// RBs the UE received, S_k (a HARQ retransmission's included).
    pub alloc_rbs: u8,
    /// Size of the UE's transport block, bits (0 if none; in open-loop mode, the subframe's
    /// byte budget × 8 when it carried data, else 0: no transport block).
    pub tbs_bits: u32,
    /// Whether the transport block was a HARQ retransmission.
    pub harq_retx: bool,
    /// CRC outcome of the transport block; `None` if there was none.
    pub crc_pass: Option<bool>,
    /// Bytes waiting for transmission after the subframe (never sent, or waiting for an
    /// RLC retransmission).
    pub queue_bytes: u64,
    /// Payload bytes received in this subframe (the TB's data bytes when its CRC passed).
    pub carried_bytes: u64,
    /// Packets handed to the UE in this subframe.
    pub delivered_packets: u32,
    /// Bytes of the packets handed to the UE in this subframe.
    pub delivered_bytes: u64,
    /// Packets dropped at the BS buffer (overflow) since the previous subframe.
    pub overflow_drops: u32,
    /// Bytes of those packets.
    pub overflow_drop_bytes: u64,
    /// Packets lost after the RLC retransmission limit in this subframe.
    pub rlc_loss_drops: u32,
    /// Bytes of those packets.
    pub rlc_loss_drop_bytes: u64,
    /// RRC state in force during the subframe (`idle`, `fach`, `promoting`, `connected`).
    pub rrc: RrcState,
    /// DRX state in force during the subframe (`continuous`, `short-drx`, `long-drx`,
    /// `not-connected`).
    pub drx: DrxState,
    /// The UE's link was stalled (stall process or the trace's `outage` column): nothing
    /// was sent to it.
    pub stalled: bool,
    /// A scripted outage (`events`, kind `outage`) was in force (`stalled` is set too).
    pub scripted_outage: bool,
    /// Scale of the UE's capacity by scripted capacity steps (1: none in force).
    pub capacity_factor: f64,
    /// Downlink packets scripted drops took in this subframe (`events`, kind `drop`).
    pub event_drops: u32,
    /// Bytes of those packets.
    pub event_drop_bytes: u64,
}

/// One subframe of the whole cell.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TruthRecord {
    /// Subframe time, ms since the start of the run.
    pub t_ms: u64,
    /// RBs of the cell, N_rb.
    pub n_rb: u8,
    /// RBs the other users demanded, B_k.
    pub other_demand_rbs: u8,
    /// Active other users counted for the fair share.
    pub other_users: u8,
    /// RBs the other users received (a scripted burst's included).
    pub other_alloc_rbs: u8,
    /// RBs a scripted burst of other users took (`events`, kind `burst`; 0: none).
    pub burst_rbs: u8,
    /// All RBs allocated, A_k = other users' + Σ S_k.
    pub total_alloc_rbs: u8,
    /// Noise-free RSRQ of A_k by Eq. 6, dB.
    pub rsrq_db: f64,
    /// Every UE, in UE order.
    pub ues: Vec<UeTruth>,
}

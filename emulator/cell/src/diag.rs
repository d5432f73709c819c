//! The diag feed: per UE and subframe, what the phone's diagnostic port would report,
//! shaped like MobileInsight's decoded messages (`docs/diag-feed.md`).
//!
//! A [`DiagRecord`] holds one subframe of one UE as five messages. Each message type
//! serialises (serde) to one JSON object with MobileInsight's `type_id` and exactly its
//! field names; the data plane adds MobileInsight's `timestamp` (the cell has no clock) and
//! chooses which messages to send how often (the RLC and PDCP statistics are cumulative,
//! so sending them less often loses nothing). A whole `DiagRecord` serialises to one
//! object keyed by message name, with a few clawbed fields in snake_case beside them.
//!
//! Units: **`TB Size`, `DL TBS (bytes)` and `Padding (bytes)` are bytes**; `RSRP` and
//! `RSSI` dBm; `RSRQ` and `FTL SNR Rx[0]` dB; `Num RBs` in the PHY and MAC messages counts
//! resource blocks, in `LTE_RLC_DL_Stats` radio bearers (MobileInsight's naming).
//!
//! ```json
//! {"type_id": "LTE_PHY_PDSCH_Stat_Indication",
//!  "Records": [{"Subframe Num": 3, "Frame Num": 12, "Num RBs": 25, "Num Layers": 1,
//!    "Serving Cell Index": "PCell",
//!    "Transport Blocks": [{"HARQ ID": 3, "RV": 0, "NDI": 1, "CRC Result": "Pass",
//!      "RNTI Type": "C-RNTI", "TB Index": 0, "TB Size": 2292, "MCS": 20, "Num RBs": 25,
//!      "Modulation Type": "64QAM"}]}]}
//! {"type_id": "LTE_PHY_Serv_Cell_Measurement",
//!  "Subpackets": [{"Current SFN": 12, "Current Subframe Number": 3, "RSRP": -90.0,
//!    "RSRQ": -11.5625, "RSSI": -61.4, "FTL SNR Rx[0]": 14.0}], "channel_mcs": 20}
//! {"type_id": "LTE_MAC_DL_Transport_Block",
//!  "Samples": [{"SFN": 12, "Sub-FN": 3, "HARQ ID": 3, "DL TBS (bytes)": 2292,
//!    "RLC PDUs": 1, "Padding (bytes)": 0}]}
//! {"type_id": "LTE_RLC_DL_Stats", "Num RBs": 1,
//!  "RB Stats": [{"Num Retx PDU": 2, "Num Dropped PDU": 0, "RLC PDCP Q Full Count": 0,
//!    "Num Complete NACK": 2, "Num Segments NACK": 0}]}
//! {"type_id": "LTE_PDCP_DL_Stats", "Num Offload Q Full Count": 0, "Num PDU Dups": 0,
//!  "Num PDU Out of Win": 0}
//! ```
//!
//! A subframe in which the UE is not scheduled still has a record: `Num RBs` 0 and no
//! transport block (`"Transport Blocks": []`, `"Samples": []`). In open-loop mode a
//! subframe reports a transport block (its byte budget as `TB Size`, on 0 RBs) only when it
//! carried data.

use crate::UeId;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// One transport block of `LTE_PHY_PDSCH_Stat_Indication`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportBlock {
    /// HARQ process (`HARQ ID`), 0..rtt_ms.
    pub harq_id: u8,
    /// Redundancy version (`RV`): 0, 2, 3, 1 for successive transmissions.
    pub rv: u8,
    /// New-data indicator (`NDI`), 0 or 1: unchanged on a retransmission.
    pub ndi: u8,
    /// Whether the block passed its CRC (`CRC Result` 'Pass' / 'Fail').
    pub crc_pass: bool,
    /// Transport block size (`TB Size`), **bytes**. In open-loop mode, the subframe's
    /// byte budget (a block is reported only when the subframe carried data).
    pub tb_size_bytes: u32,
    /// MCS of the block (`MCS`); a retransmission reports its first transmission's. 0 in
    /// open-loop mode.
    pub mcs: u8,
    /// RBs of the block (`Num RBs`). 0 in open-loop mode.
    pub num_rbs: u8,
}

impl TransportBlock {
    /// `Modulation Type` of the block's MCS: 'QPSK', '16QAM' or '64QAM'.
    pub fn modulation_type(&self) -> &'static str {
        match lte::mcs::modulation_order(self.mcs) {
            Some(2) => "QPSK",
            Some(4) => "16QAM",
            _ => "64QAM",
        }
    }
}

impl Serialize for TransportBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(10))?;
        map.serialize_entry("HARQ ID", &self.harq_id)?;
        map.serialize_entry("RV", &self.rv)?;
        map.serialize_entry("NDI", &self.ndi)?;
        map.serialize_entry("CRC Result", if self.crc_pass { "Pass" } else { "Fail" })?;
        map.serialize_entry("RNTI Type", "C-RNTI")?;
        // One codeword: the only block is block 0.
        map.serialize_entry("TB Index", &0u8)?;
        map.serialize_entry("TB Size", &self.tb_size_bytes)?;
        map.serialize_entry("MCS", &self.mcs)?;
        map.serialize_entry("Num RBs", &self.num_rbs)?;
        map.serialize_entry("Modulation Type", self.modulation_type())?;
        map.end()
    }
}

/// `LTE_PHY_PDSCH_Stat_Indication` (0xB173): the UE's PDSCH in one subframe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PdschStat {
    /// System frame number (`Frame Num`), 0..=1023.
    pub frame_num: u16,
    /// Subframe number (`Subframe Num`), 0..=9.
    pub subframe_num: u8,
    /// The UE's RBs in this subframe, S_k (`Num RBs`).
    pub num_rbs: u8,
    /// Spatial layers (`Num Layers`).
    pub num_layers: u8,
    /// The transport block, if the UE was scheduled.
    pub transport_block: Option<TransportBlock>,
}

/// The one record of a [`PdschStat`].
struct PdschRecord<'a>(&'a PdschStat);

impl Serialize for PdschRecord<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let stat = self.0;
        let mut map = serializer.serialize_map(Some(6))?;
        map.serialize_entry("Subframe Num", &stat.subframe_num)?;
        map.serialize_entry("Frame Num", &stat.frame_num)?;
        map.serialize_entry("Num RBs", &stat.num_rbs)?;
        map.serialize_entry("Num Layers", &stat.num_layers)?;
        map.serialize_entry("Serving Cell Index", "PCell")?;
        map.serialize_entry("Transport Blocks", stat.transport_block.as_slice())?;
        map.end()
    }
}

impl Serialize for PdschStat {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("type_id", "LTE_PHY_PDSCH_Stat_Indication")?;
        map.serialize_entry("Records", &[PdschRecord(self)])?;
        map.end()
    }
}

/// `LTE_PHY_Serv_Cell_Measurement` (0xB193): the serving cell's signal as measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServCellMeasurement {
    /// `Current SFN`, 0..=1023.
    pub current_sfn: u16,
    /// `Current Subframe Number`, 0..=9.
    pub current_subframe: u8,
    /// `RSRP`, dBm.
    pub rsrp_dbm: f64,
    /// `RSRQ`, dB: Eq. 6 of the true allocation plus noise, quantised, held.
    pub rsrq_db: f64,
    /// `RSSI`, dBm, consistent with RSRP and RSRQ by Eq. 1: RSSI = N_rb·RSRP / RSRQ.
    pub rssi_dbm: f64,
    /// `FTL SNR Rx[0]`, dB: a rough indication from the channel MCS (MCS − 6 dB, the
    /// inverse of a typical link-adaptation curve); `None` (JSON null) in open-loop mode.
    pub snr_db: Option<f64>,
    /// The channel-quality MCS at the measurement (the record's `channel_mcs`), sent as the
    /// message's extra field `channel_mcs` after `Subpackets` (not a MobileInsight field: a
    /// phone reports CQI instead); `None` (JSON null) in open-loop mode.
    pub channel_mcs: Option<u8>,
}

struct ServCellSubpacket<'a>(&'a ServCellMeasurement);

impl Serialize for ServCellSubpacket<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let m = self.0;
        let mut map = serializer.serialize_map(Some(6))?;
        map.serialize_entry("Current SFN", &m.current_sfn)?;
        map.serialize_entry("Current Subframe Number", &m.current_subframe)?;
        map.serialize_entry("RSRP", &m.rsrp_dbm)?;
        map.serialize_entry("RSRQ", &m.rsrq_db)?;
        map.serialize_entry("RSSI", &m.rssi_dbm)?;
        map.serialize_entry("FTL SNR Rx[0]", &m.snr_db)?;
        map.end()
    }
}

impl Serialize for ServCellMeasurement {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("type_id", "LTE_PHY_Serv_Cell_Measurement")?;
        map.serialize_entry("Subpackets", &[ServCellSubpacket(self)])?;
        map.serialize_entry("channel_mcs", &self.channel_mcs)?;
        map.end()
    }
}

/// One sample of `LTE_MAC_DL_Transport_Block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MacSample {
    /// `HARQ ID`.
    pub harq_id: u8,
    /// `DL TBS (bytes)`.
    pub dl_tbs_bytes: u32,
    /// `RLC PDUs`: contiguous RLC ranges (retransmissions, new data) in the block.
    pub rlc_pdus: u8,
    /// `Padding (bytes)`: TBS bytes not filled with data.
    pub padding_bytes: u32,
}

/// `LTE_MAC_DL_Transport_Block` (0xB063): the MAC view of the UE's transport block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MacDlTransportBlock {
    /// `SFN`, 0..=1023.
    pub sfn: u16,
    /// `Sub-FN`, 0..=9.
    pub sub_fn: u8,
    /// The sample, if the UE received a transport block.
    pub sample: Option<MacSample>,
}

struct MacSampleRow<'a>(&'a MacDlTransportBlock, &'a MacSample);

impl Serialize for MacSampleRow<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (block, sample) = (self.0, self.1);
        let mut map = serializer.serialize_map(Some(6))?;
        map.serialize_entry("SFN", &block.sfn)?;
        map.serialize_entry("Sub-FN", &block.sub_fn)?;
        map.serialize_entry("HARQ ID", &sample.harq_id)?;
        map.serialize_entry("DL TBS (bytes)", &sample.dl_tbs_bytes)?;
        map.serialize_entry("RLC PDUs", &sample.rlc_pdus)?;
        map.serialize_entry("Padding (bytes)", &sample.padding_bytes)?;
        map.end()
    }
}

impl Serialize for MacDlTransportBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("type_id", "LTE_MAC_DL_Transport_Block")?;
        match &self.sample {
            Some(sample) => map.serialize_entry("Samples", &[MacSampleRow(self, sample)])?,
            None => map.serialize_entry("Samples", &[(); 0])?,
        }
        map.end()
    }
}

/// `LTE_RLC_DL_Stats` (0xB087): cumulative RLC counters of the UE's one data radio bearer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RlcDlStats {
    /// `Num Retx PDU`: RLC PDUs retransmitted.
    pub num_retx_pdu: u64,
    /// `Num Dropped PDU`: packets lost after the RLC retransmission limit (RLC losses).
    pub num_dropped_pdu: u64,
    /// `RLC PDCP Q Full Count`: packets dropped because the BS buffer was full.
    pub pdcp_q_full_count: u64,
    /// `Num Complete NACK`: RLC PDUs negatively acknowledged after HARQ gave up.
    pub num_complete_nack: u64,
}

struct RlcBearerStats<'a>(&'a RlcDlStats);

impl Serialize for RlcBearerStats<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let s = self.0;
        let mut map = serializer.serialize_map(Some(5))?;
        map.serialize_entry("Num Retx PDU", &s.num_retx_pdu)?;
        map.serialize_entry("Num Dropped PDU", &s.num_dropped_pdu)?;
        map.serialize_entry("RLC PDCP Q Full Count", &s.pdcp_q_full_count)?;
        map.serialize_entry("Num Complete NACK", &s.num_complete_nack)?;
        // The model NACKs whole PDUs, never parts of one.
        map.serialize_entry("Num Segments NACK", &0u64)?;
        map.end()
    }
}

impl Serialize for RlcDlStats {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("type_id", "LTE_RLC_DL_Stats")?;
        // Radio bearers, not resource blocks: the UE has one data bearer.
        map.serialize_entry("Num RBs", &1u8)?;
        map.serialize_entry("RB Stats", &[RlcBearerStats(self)])?;
        map.end()
    }
}

/// `LTE_PDCP_DL_Stats` (0xB0A4): cumulative PDCP counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PdcpDlStats {
    /// `Num Offload Q Full Count`: packets dropped because the BS buffer was full.
    pub offload_q_full_count: u64,
}

impl Serialize for PdcpDlStats {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("type_id", "LTE_PDCP_DL_Stats")?;
        map.serialize_entry("Num Offload Q Full Count", &self.offload_q_full_count)?;
        // In-order delivery without duplicates: PDCP never sees a duplicate or a PDU
        // outside its window.
        map.serialize_entry("Num PDU Dups", &0u64)?;
        map.serialize_entry("Num PDU Out of Win", &0u64)?;
        map.end()
    }
}

/// Everything one UE's diag feed reports for one subframe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DiagRecord {
    /// The UE.
    pub ue: UeId,
    /// Subframe time, ms since the start of the run.
    pub t_ms: u64,
    /// The UE's channel-quality MCS in this subframe (what a new transmission would use),
    /// reported every subframe; `None` in open-loop mode or after the conditions ended.
    /// Not a MobileInsight field (phones report CQI instead); CLAW uses it before the UE
    /// has been scheduled.
    pub channel_mcs: Option<u8>,
    /// Whether `serv_cell` holds a new measurement (else the held one): a feed imitating a
    /// phone's measurement period sends the message only then.
    pub measurement_updated: bool,
    /// `LTE_PHY_PDSCH_Stat_Indication`.
    pub pdsch: PdschStat,
    /// `LTE_PHY_Serv_Cell_Measurement`.
    pub serv_cell: ServCellMeasurement,
    /// `LTE_MAC_DL_Transport_Block`.
    pub mac: MacDlTransportBlock,
    /// `LTE_RLC_DL_Stats`.
    pub rlc: RlcDlStats,
    /// `LTE_PDCP_DL_Stats`.
    pub pdcp: PdcpDlStats,
}

impl Serialize for DiagRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(9))?;
        map.serialize_entry("ue", &self.ue)?;
        map.serialize_entry("t_ms", &self.t_ms)?;
        map.serialize_entry("channel_mcs", &self.channel_mcs)?;
        map.serialize_entry("measurement_updated", &self.measurement_updated)?;
        map.serialize_entry("LTE_PHY_PDSCH_Stat_Indication", &self.pdsch)?;
        map.serialize_entry("LTE_PHY_Serv_Cell_Measurement", &self.serv_cell)?;
        map.serialize_entry("LTE_MAC_DL_Transport_Block", &self.mac)?;
        map.serialize_entry("LTE_RLC_DL_Stats", &self.rlc)?;
        map.serialize_entry("LTE_PDCP_DL_Stats", &self.pdcp)?;
        map.end()
    }
}

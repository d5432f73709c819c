//! The diag feed's JSON lines, written straight from the cell's typed records.
//!
//! Each message is written field by field into a byte buffer with its key text fixed at
//! compile time: no serde map, no escaping of keys, no JSON tree, no splicing. The bytes
//! are exactly what serialising the `cell` crate's message types with serde_json gives,
//! with MobileInsight's `timestamp` after `type_id` (the tests below hold the two to
//! that). Numbers are formatted by serde_json, so floats print as everywhere else in the
//! project; the timestamp, the same for every line of a subframe (every UE's), is
//! formatted once per subframe ([`Stamp`]).

use cell::diag::{MacDlTransportBlock, PdcpDlStats, PdschStat, RlcDlStats, ServCellMeasurement, TransportBlock};

/// A timestamp's JSON text, formatted once for all the lines that carry it.
#[derive(Debug, Default)]
pub struct Stamp {
    text: Vec<u8>,
}

impl Stamp {
    /// The text of `timestamp_s` (Unix time, s).
    pub fn new(timestamp_s: f64) -> Stamp {
        let mut stamp = Stamp::default();
        stamp.set(timestamp_s);
        stamp
    }

    /// Replaces the text with `timestamp_s`'s (Unix time, s), keeping the buffer.
    pub fn set(&mut self, timestamp_s: f64) {
        self.text.clear();
        // serde_json writes a NaN or an infinity as null, as the serde path did.
        let _ = serde_json::to_writer(&mut self.text, &timestamp_s);
    }
}

/// Appends JSON text to a line.
struct Out<'a>(&'a mut Vec<u8>);

impl Out<'_> {
    fn raw(&mut self, text: &str) -> &mut Self {
        self.0.extend_from_slice(text.as_bytes());
        self
    }

    fn uint(&mut self, v: impl Into<u64>) -> &mut Self {
        // Formatting a number into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *self.0, &v.into());
        self
    }

    fn float(&mut self, v: f64) -> &mut Self {
        // serde_json writes a NaN or an infinity as null, as the serde path did.
        let _ = serde_json::to_writer(&mut *self.0, &v);
        self
    }

    fn opt_float(&mut self, v: Option<f64>) -> &mut Self {
        match v {
            Some(v) => self.float(v),
            None => self.raw("null"),
        }
    }

    fn opt_uint(&mut self, v: Option<u8>) -> &mut Self {
        match v {
            Some(v) => self.uint(v),
            None => self.raw("null"),
        }
    }

    /// `{"type_id":"<type_id>","timestamp":<s>`.
    fn head(&mut self, type_id: &str, timestamp: &Stamp) -> &mut Self {
        self.raw("{\"type_id\":\"").raw(type_id).raw("\",\"timestamp\":");
        self.0.extend_from_slice(&timestamp.text);
        self
    }
}

/// Appends `LTE_PHY_PDSCH_Stat_Indication` as one line (with its `\n`).
pub fn pdsch(line: &mut Vec<u8>, timestamp: &Stamp, m: &PdschStat) {
    let mut o = Out(line);
    o.head("LTE_PHY_PDSCH_Stat_Indication", timestamp)
        .raw(",\"Records\":[{\"Subframe Num\":")
        .uint(m.subframe_num)
        .raw(",\"Frame Num\":")
        .uint(m.frame_num)
        .raw(",\"Num RBs\":")
        .uint(m.num_rbs)
        .raw(",\"Num Layers\":")
        .uint(m.num_layers)
        .raw(",\"Serving Cell Index\":\"PCell\",\"Transport Blocks\":[");
    if let Some(tb) = &m.transport_block {
        transport_block(&mut o, tb);
    }
    o.raw("]}]}\n");
}

fn transport_block(o: &mut Out<'_>, tb: &TransportBlock) {
    o.raw("{\"HARQ ID\":")
        .uint(tb.harq_id)
        .raw(",\"RV\":")
        .uint(tb.rv)
        .raw(",\"NDI\":")
        .uint(tb.ndi)
        .raw(if tb.crc_pass { ",\"CRC Result\":\"Pass\"" } else { ",\"CRC Result\":\"Fail\"" })
        .raw(",\"RNTI Type\":\"C-RNTI\",\"TB Index\":0,\"TB Size\":")
        .uint(tb.tb_size_bytes)
        .raw(",\"MCS\":")
        .uint(tb.mcs)
        .raw(",\"Num RBs\":")
        .uint(tb.num_rbs)
        .raw(",\"Modulation Type\":\"")
        .raw(tb.modulation_type())
        .raw("\"}");
}

/// Appends `LTE_PHY_Serv_Cell_Measurement` as one line.
pub fn serv_cell(line: &mut Vec<u8>, timestamp: &Stamp, m: &ServCellMeasurement) {
    Out(line)
        .head("LTE_PHY_Serv_Cell_Measurement", timestamp)
        .raw(",\"Subpackets\":[{\"Current SFN\":")
        .uint(m.current_sfn)
        .raw(",\"Current Subframe Number\":")
        .uint(m.current_subframe)
        .raw(",\"RSRP\":")
        .float(m.rsrp_dbm)
        .raw(",\"RSRQ\":")
        .float(m.rsrq_db)
        .raw(",\"RSSI\":")
        .float(m.rssi_dbm)
        .raw(",\"FTL SNR Rx[0]\":")
        .opt_float(m.snr_db)
        .raw("}],\"channel_mcs\":")
        .opt_uint(m.channel_mcs)
        .raw("}\n");
}

/// Appends `LTE_MAC_DL_Transport_Block` as one line.
pub fn mac(line: &mut Vec<u8>, timestamp: &Stamp, m: &MacDlTransportBlock) {
    let mut o = Out(line);
    o.head("LTE_MAC_DL_Transport_Block", timestamp).raw(",\"Samples\":[");
    if let Some(s) = &m.sample {
        o.raw("{\"SFN\":")
            .uint(m.sfn)
            .raw(",\"Sub-FN\":")
            .uint(m.sub_fn)
            .raw(",\"HARQ ID\":")
            .uint(s.harq_id)
            .raw(",\"DL TBS (bytes)\":")
            .uint(s.dl_tbs_bytes)
            .raw(",\"RLC PDUs\":")
            .uint(s.rlc_pdus)
            .raw(",\"Padding (bytes)\":")
            .uint(s.padding_bytes)
            .raw("}");
    }
    o.raw("]}\n");
}

/// Appends `LTE_RLC_DL_Stats` as one line.
pub fn rlc(line: &mut Vec<u8>, timestamp: &Stamp, m: &RlcDlStats) {
    Out(line)
        .head("LTE_RLC_DL_Stats", timestamp)
        .raw(",\"Num RBs\":1,\"RB Stats\":[{\"Num Retx PDU\":")
        .uint(m.num_retx_pdu)
        .raw(",\"Num Dropped PDU\":")
        .uint(m.num_dropped_pdu)
        .raw(",\"RLC PDCP Q Full Count\":")
        .uint(m.pdcp_q_full_count)
        .raw(",\"Num Complete NACK\":")
        .uint(m.num_complete_nack)
        .raw(",\"Num Segments NACK\":0}]}\n");
}

/// Appends `LTE_PDCP_DL_Stats` as one line.
pub fn pdcp(line: &mut Vec<u8>, timestamp: &Stamp, m: &PdcpDlStats) {
    Out(line)
        .head("LTE_PDCP_DL_Stats", timestamp)
        .raw(",\"Num Offload Q Full Count\":")
        .uint(m.offload_q_full_count)
        .raw(",\"Num PDU Dups\":0,\"Num PDU Out of Win\":0}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use cell::diag::MacSample;
    use serde::Serialize;
    use serde_json::Value;

    /// What serde gives for `message`, with `timestamp` put after `type_id`, as one line.
    fn via_serde(message: &impl Serialize, timestamp_s: f64) -> String {
        let Value::Object(fields) = serde_json::to_value(message).expect("serialises") else { panic!("an object") };
        let mut out = serde_json::Map::new();
        for (key, value) in fields {
            let is_type = key == "type_id";
            out.insert(key, value);
            if is_type {
                out.insert("timestamp".into(), timestamp_s.into());
            }
        }
        serde_json::to_string(&out).expect("serialises") + "\n"
    }

    fn line(write: impl FnOnce(&mut Vec<u8>, &Stamp)) -> String {
        let mut buf = Vec::new();
        write(&mut buf, &Stamp::new(T));
        String::from_utf8(buf).expect("UTF-8")
    }

    const T: f64 = 1_795_301_447.012_625;

    #[test]
    fn lines_are_the_serde_bytes() {
        let tb =
            TransportBlock { harq_id: 3, rv: 2, ndi: 1, crc_pass: false, tb_size_bytes: 2292, mcs: 20, num_rbs: 25 };
        for transport_block in [None, Some(tb)] {
            let m = PdschStat { frame_num: 67, subframe_num: 3, num_rbs: 25, num_layers: 2, transport_block };
            assert_eq!(line(|b, t| pdsch(b, t, &m)), via_serde(&m, T));
        }
        for (snr_db, channel_mcs) in [(Some(14.0), Some(20)), (None, None)] {
            let m = ServCellMeasurement {
                current_sfn: 1023,
                current_subframe: 9,
                rsrp_dbm: -90.0,
                rsrq_db: -11.5625,
                rssi_dbm: -61.400000000000006,
                snr_db,
                channel_mcs,
            };
            assert_eq!(line(|b, t| serv_cell(b, t, &m)), via_serde(&m, T));
        }
        let sample = MacSample { harq_id: 7, dl_tbs_bytes: 1000, rlc_pdus: 2, padding_bytes: 13 };
        for sample in [None, Some(sample)] {
            let m = MacDlTransportBlock { sfn: 5, sub_fn: 1, sample };
            assert_eq!(line(|b, t| mac(b, t, &m)), via_serde(&m, T));
        }
        let m = RlcDlStats { num_retx_pdu: 1, num_dropped_pdu: 2, pdcp_q_full_count: 3, num_complete_nack: 4 };
        assert_eq!(line(|b, t| rlc(b, t, &m)), via_serde(&m, T));
        let m = PdcpDlStats { offload_q_full_count: 9 };
        assert_eq!(line(|b, t| pdcp(b, t, &m)), via_serde(&m, T));
    }
}

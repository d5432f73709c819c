//! From the diag feed's messages (MobileInsight's names, `docs/diag-feed.md`) to what the
//! client needs: per subframe the UE's own RBs, MCS and layers; RSRQ measurements with the
//! channel-quality MCS; loss events from the cumulative RLC / PDCP counters. The rules are
//! those of the reference decoder, `claw/client/feed.py` (which documents the fields);
//! both the emulator's JSON shapes and MobileInsight's (sub-packets) are read.

use crate::json::Value;

pub const PDSCH_STAT: &str = "LTE_PHY_PDSCH_Stat_Indication";
pub const SERV_CELL_MEASUREMENT: &str = "LTE_PHY_Serv_Cell_Measurement";
pub const MAC_DL_TRANSPORT_BLOCK: &str = "LTE_MAC_DL_Transport_Block";
pub const RLC_DL_STATS: &str = "LTE_RLC_DL_Stats";
pub const PDCP_DL_STATS: &str = "LTE_PDCP_DL_Stats";
/// dB between the emulator's channel MCS and the SNR it reports for it.
const SNR_BELOW_MCS_DB: f64 = 6.0;
/// The FTL SNR field's floor (raw 0): no indication.
const SNR_FLOOR_DB: f64 = -20.0;
/// Largest data MCS.
pub const MAX_MCS: i64 = 28;
/// SFN cycle, frames.
const SFN_CYCLE: i64 = 1024;
/// SFN cycle, ms.
pub const SFN_CYCLE_MS: i64 = SFN_CYCLE * 10;
/// LTE cell sizes, RBs.
pub const VALID_N_RB: [i64; 6] = [6, 15, 25, 50, 75, 100];

/// A message lacks a field the client needs, or holds a value of the wrong kind.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedFormatError(pub String);

impl std::fmt::Display for FeedFormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

type Result<T> = std::result::Result<T, FeedFormatError>;

/// The diag events the client turns into ACK flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKind {
    /// RLC gave up on a packet (flag 0x02).
    Wireless,
    /// The BS buffer dropped a packet (flag 0x04).
    Overflow,
}

impl LossKind {
    pub fn name(self) -> &'static str {
        match self {
            LossKind::Wireless => "rlc-loss",
            LossKind::Overflow => "overflow",
        }
    }
}

/// Loss counters went up: `count` more packets of `kind` (Unix time of the message, s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossEvent {
    pub kind: LossKind,
    pub count: i64,
    pub unix_s: Option<f64>,
}

/// The UE's PDSCH in one subframe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PdschSubframe {
    pub t_ms: i64,
    pub own_rbs: i64,
    /// MCS of the UE's transport block, None when it was not scheduled.
    pub mcs: Option<i64>,
    pub layers: i64,
}

/// A serving-cell measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    pub t_ms: i64,
    pub rsrq_db: f64,
    pub rsrp_dbm: Option<f64>,
    pub rssi_dbm: Option<f64>,
    pub channel_mcs: Option<i64>,
}

impl Measurement {
    /// N_rb by Eq. 1 (RSRQ = N_rb·RSRP/RSSI) snapped to an LTE cell size within 10 %.
    pub fn n_rb(&self) -> Option<i64> {
        let (rsrp, rssi) = (self.rsrp_dbm?, self.rssi_dbm?);
        let n = 10f64.powf((self.rsrq_db + rssi - rsrp) / 10.0);
        // The first of equally near sizes, as Python's min() over the sorted set.
        let mut best = VALID_N_RB[0];
        for v in VALID_N_RB {
            if (v as f64 - n).abs() < (best as f64 - n).abs() {
                best = v;
            }
        }
        ((best as f64 - n).abs() <= 0.1 * best as f64).then_some(best)
    }
}

fn type_of<'v>(message: &'v Value<'_>) -> &'v str {
    message.get("type_id").and_then(Value::as_str).unwrap_or("?")
}

fn field<'v, 'a>(holder: &'v Value<'a>, key: &str, message: &Value<'_>) -> Result<&'v Value<'a>> {
    holder.get(key).ok_or_else(|| FeedFormatError(format!("{}: no field {key:?}", type_of(message))))
}

fn list<'v, 'a>(value: &'v Value<'a>, what: &str) -> Result<&'v [Value<'a>]> {
    value.as_array().ok_or_else(|| FeedFormatError(format!("{what}: expected a list")))
}

/// Python's `_int`: an integer, or a float without a fraction; not a bool.
fn int(value: &Value<'_>, what: &str) -> Result<i64> {
    match value {
        Value::Num(x, _) if x.is_finite() && x.fract() == 0.0 => Ok(*x as i64),
        other => Err(FeedFormatError(format!("{what}: expected an integer, found {other:?}"))),
    }
}

/// The emulator's channel MCS back from its SNR indication, clamped to 0..28.
pub fn channel_mcs_from_snr_db(snr_db: f64) -> i64 {
    ((snr_db + SNR_BELOW_MCS_DB + 0.5).floor() as i64).clamp(0, MAX_MCS)
}

/// Unwraps (SFN, subframe) into a monotone diag time (see `claw/client/analyzer.py`,
/// `SfnClock`): a step back of less than half a cycle is a late message, placed before
/// the latest one without moving the clock.
#[derive(Debug, Default, Clone)]
pub struct SfnClock {
    last_raw: Option<i64>,
    last_t: i64,
}

impl SfnClock {
    pub fn unwrap(&mut self, sfn: i64, subframe: i64) -> Result<i64> {
        if !(0..SFN_CYCLE).contains(&sfn) || !(0..=9).contains(&subframe) {
            return Err(FeedFormatError(format!(
                "SFN {sfn} / subframe {subframe} outside 0..{} / 0..9",
                SFN_CYCLE - 1
            )));
        }
        let raw = 10 * sfn + subframe;
        let Some(last_raw) = self.last_raw else {
            self.last_raw = Some(raw);
            self.last_t = raw;
            return Ok(raw);
        };
        let delta = (raw - last_raw).rem_euclid(SFN_CYCLE_MS);
        if delta > SFN_CYCLE_MS / 2 {
            return Ok(self.last_t + delta - SFN_CYCLE_MS);
        }
        self.last_raw = Some(raw);
        self.last_t += delta;
        Ok(self.last_t)
    }

    /// The latest time unwrapped, or None before the first.
    pub fn latest_ms(&self) -> Option<i64> {
        self.last_raw.map(|_| self.last_t)
    }
}

/// A cumulative counter made continuous (a report below the previous one is a reset).
#[derive(Debug, Default, Clone)]
struct Counter {
    last: Option<i64>,
    level: i64,
}

impl Counter {
    fn update(&mut self, value: i64) -> i64 {
        let last = self.last.replace(value);
        match last {
            Some(last) if value >= last => {
                self.level += value - last;
                value - last
            }
            _ => 0,
        }
    }
}

/// Stateful decoder of one UE's feed: unwraps time and differentiates the counters.
#[derive(Debug, Default, Clone)]
pub struct FeedDecoder {
    pub clock: SfnClock,
    rlc_dropped: Counter,
    // The RLC and PDCP messages count the same overflow drops: an overflow event is an
    // increase of the larger of the two, so one drop is never two events.
    rlc_q_full: Counter,
    pdcp_q_full: Counter,
    overflow_reported: i64,
}

impl FeedDecoder {
    /// The PCell subframes of a PDSCH statistics message.
    pub fn pdsch(&mut self, message: &Value<'_>) -> Result<Vec<PdschSubframe>> {
        let mut out = Vec::new();
        for record in list(field(message, "Records", message)?, "Records")? {
            match record.get("Serving Cell Index") {
                None => {}
                Some(Value::Str(s)) if s == "PCell" => {}
                Some(Value::Num(x, _)) if *x == 0.0 => {}
                Some(_) => continue,
            }
            let sfn = int(field(record, "Frame Num", message)?, "Frame Num")?;
            let sf = int(field(record, "Subframe Num", message)?, "Subframe Num")?;
            let t = self.clock.unwrap(sfn, sf)?;
            let own = int(field(record, "Num RBs", message)?, "Num RBs")?;
            let layers = match record.get("Num Layers") {
                None => 1,
                Some(v) => int(v, "Num Layers")?,
            };
            let mut mcs: Option<i64> = None;
            if let Some(blocks) = record.get("Transport Blocks") {
                for tb in list(blocks, "Transport Blocks")? {
                    let c_rnti = match tb.get("RNTI Type") {
                        None => true,
                        Some(v) => v.as_str() == Some("C-RNTI"),
                    };
                    if c_rnti {
                        let m = int(field(tb, "MCS", message)?, "MCS")?;
                        mcs = Some(mcs.map_or(m, |x| x.max(m)));
                    }
                }
            }
            let mcs = if own > 0 { mcs } else { None };
            out.push(PdschSubframe { t_ms: t, own_rbs: if mcs.is_some() { own } else { 0 }, mcs, layers });
        }
        Ok(out)
    }

    /// The measurements of a serving-cell measurement message (those without RSRQ skipped).
    pub fn measurements(&mut self, message: &Value<'_>) -> Result<Vec<Measurement>> {
        let mut out = Vec::new();
        for sub in list(field(message, "Subpackets", message)?, "Subpackets")? {
            let Some(rsrq) = sub.get("RSRQ").and_then(Value::as_finite) else { continue };
            let sfn = int(field(sub, "Current SFN", message)?, "Current SFN")?;
            let sf = int(field(sub, "Current Subframe Number", message)?, "Current Subframe Number")?;
            let t = self.clock.unwrap(sfn, sf)?;
            // The message's own channel_mcs (even null) wins over the sub-packet's.
            let channel = match message.get("channel_mcs") {
                Some(v) => Some(v),
                None => sub.get("channel_mcs"),
            };
            let channel = match channel {
                None | Some(Value::Null) => {
                    let snr = sub.get("FTL SNR Rx[0]").and_then(Value::as_finite);
                    snr.filter(|&s| s != SNR_FLOOR_DB).map(channel_mcs_from_snr_db)
                }
                Some(v) => Some(int(v, "channel_mcs")?),
            };
            out.push(Measurement {
                t_ms: t,
                rsrq_db: rsrq,
                rsrp_dbm: sub.get("RSRP").and_then(Value::as_finite),
                rssi_dbm: sub.get("RSSI").and_then(Value::as_finite),
                channel_mcs: channel,
            });
        }
        Ok(out)
    }

    /// (SFN, subframe) of a MAC transport-block message's first sample, if any.
    pub fn mac_subframe(message: &Value<'_>) -> Option<(i64, i64)> {
        let first = match message.get("Samples") {
            Some(samples) => samples.as_array()?.first()?,
            None => {
                let subs = message.get("Subpackets").map(|s| s.as_array()).unwrap_or(Some(&[]))?;
                subs.iter()
                    .filter_map(|sp| sp.get("Samples").and_then(Value::as_array))
                    .flat_map(|s| s.iter())
                    .next()?
            }
        };
        // Python's int(): a number truncated (a string of digits too).
        let num = |v: &Value<'_>| -> Option<i64> {
            match v {
                Value::Num(x, _) if x.is_finite() => Some(x.trunc() as i64),
                Value::Bool(b) => Some(i64::from(*b)),
                Value::Str(s) => s.trim().parse().ok(),
                _ => None,
            }
        };
        Some((num(first.get("SFN")?)?, num(first.get("Sub-FN")?)?))
    }

    /// Events from a cumulative RLC or PDCP statistics message (see `feed.py`).
    pub fn loss_events(&mut self, message: &Value<'_>, kind: &str, unix_s: Option<f64>) -> Result<Vec<LossEvent>> {
        let mut events = Vec::new();
        if kind == RLC_DL_STATS {
            let json_shape = message.get("RB Stats").is_some() || message.get("Subpackets").is_none();
            let mut dropped = 0;
            let mut q_full = 0;
            if json_shape {
                for b in list(field(message, "RB Stats", message)?, "RB Stats")? {
                    dropped += int(field(b, "Num Dropped PDU", message)?, "Num Dropped PDU")?;
                }
                for b in list(field(message, "RB Stats", message)?, "RB Stats")? {
                    q_full += b.get("RLC PDCP Q Full Count").map_or(Ok(0), |v| int(v, "RLC PDCP Q Full Count"))?;
                }
            } else {
                let subs = list(field(message, "Subpackets", message)?, "Subpackets")?;
                for sp in subs {
                    if let Some(rbs) = sp.get("RBs") {
                        for b in list(rbs, "RBs")? {
                            dropped += int(field(b, "Num Dropped PDU", message)?, "Num Dropped PDU")?;
                        }
                    }
                }
                for sp in subs {
                    q_full += sp.get("RLC PDCP Q Full Count").map_or(Ok(0), |v| int(v, "RLC PDCP Q Full Count"))?;
                }
            }
            let delta = self.rlc_dropped.update(dropped);
            if delta != 0 {
                events.push(LossEvent { kind: LossKind::Wireless, count: delta, unix_s });
            }
            self.rlc_q_full.update(q_full);
        } else if kind == PDCP_DL_STATS {
            let mut total = 0;
            if message.get("Subpackets").is_none() {
                total = int(field(message, "Num Offload Q Full Count", message)?, "Num Offload Q Full Count")?;
            } else {
                for h in list(field(message, "Subpackets", message)?, "Subpackets")? {
                    total += int(field(h, "Num Offload Q Full Count", message)?, "Num Offload Q Full Count")?;
                }
            }
            self.pdcp_q_full.update(total);
        } else {
            return Ok(events);
        }
        let overflow = self.rlc_q_full.level.max(self.pdcp_q_full.level);
        if overflow > self.overflow_reported {
            events.push(LossEvent { kind: LossKind::Overflow, count: overflow - self.overflow_reported, unix_s });
            self.overflow_reported = overflow;
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse;

    #[test]
    fn clock_unwraps_and_places_late_messages() {
        let mut c = SfnClock::default();
        assert_eq!(c.unwrap(1023, 9).unwrap(), 10239);
        assert_eq!(c.unwrap(0, 0).unwrap(), 10240);
        assert_eq!(c.unwrap(1023, 8).unwrap(), 10238);
        assert_eq!(c.latest_ms(), Some(10240));
        assert!(c.unwrap(1024, 0).is_err());
    }

    #[test]
    fn pdsch_needs_a_c_rnti_block_on_rbs() {
        let mut d = FeedDecoder::default();
        let m = parse(r#"{"type_id":"LTE_PHY_PDSCH_Stat_Indication","Records":[{"Subframe Num":3,"Frame Num":67,"Num RBs":25,"Num Layers":2,"Transport Blocks":[{"RNTI Type":"C-RNTI","MCS":20},{"RNTI Type":"C-RNTI","MCS":22}]},{"Subframe Num":4,"Frame Num":67,"Num RBs":5,"Transport Blocks":[]},{"Subframe Num":5,"Frame Num":67,"Num RBs":5,"Serving Cell Index":"SCell1"}]}"#).unwrap();
        let sfs = d.pdsch(&m).unwrap();
        assert_eq!(sfs.len(), 2);
        assert_eq!(sfs[0], PdschSubframe { t_ms: 673, own_rbs: 25, mcs: Some(22), layers: 2 });
        assert_eq!(sfs[1], PdschSubframe { t_ms: 674, own_rbs: 0, mcs: None, layers: 1 });
        let bad = parse(r#"{"type_id":"LTE_PHY_PDSCH_Stat_Indication","Records":[{"Subframe Num":3.5}]}"#).unwrap();
        assert!(d.pdsch(&bad).unwrap_err().0.contains("no field \"Frame Num\""));
    }

    #[test]
    fn overflow_counted_once_across_rlc_and_pdcp() {
        let mut d = FeedDecoder::default();
        let rlc = |dropped: i64, q: i64| {
            format!(
                r#"{{"type_id":"LTE_RLC_DL_Stats","RB Stats":[{{"Num Dropped PDU":{dropped},"RLC PDCP Q Full Count":{q}}}]}}"#
            )
        };
        let pdcp = |q: i64| format!(r#"{{"type_id":"LTE_PDCP_DL_Stats","Num Offload Q Full Count":{q}}}"#);
        let mut run = |text: String| {
            let m = parse(&text).unwrap();
            let kind = m.get("type_id").unwrap().as_str().unwrap().to_string();
            d.loss_events(&m, &kind, None).unwrap()
        };
        assert!(run(rlc(0, 0)).is_empty());
        assert!(run(pdcp(0)).is_empty());
        let e = run(rlc(2, 3));
        assert_eq!(
            e.iter().map(|e| (e.kind, e.count)).collect::<Vec<_>>(),
            [(LossKind::Wireless, 2), (LossKind::Overflow, 3)]
        );
        assert!(run(pdcp(3)).is_empty());
        assert_eq!(run(pdcp(4)).iter().map(|e| e.count).collect::<Vec<_>>(), [1]);
    }
}

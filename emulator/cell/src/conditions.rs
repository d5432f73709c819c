//! What a UE's channel and the cell's other users look like, subframe by subframe.
//!
//! A [`Conditions`] source answers, for a subframe time `t_ms`, with
//! [`SubframeConditions`]: either the UE's channel (closed loop: MCS and layers, the
//! scheduler decides the RBs, HARQ and RLC apply) or a fixed number of bytes (open loop,
//! bypassing the scheduler, as Mahimahi's `mm-link` does), plus the other users' demand.
//!
//! - [`TraceConditions`]: a PHY trace (`traces/FORMAT.md`), looping at its end unless told
//!   not to. The trace's columns (`TraceColumns::from(phy_trace::Trace::read(path)?)`) live
//!   once in an [`Arc<ConditionTrace>`] that any number of UEs share, each at its own
//!   offset.
//! - [`MahimahiConditions`]: a Mahimahi delivery-opportunity trace, open loop.
//! - [`ConstantRate`]: a fixed bit rate, open loop, for a link without a trace file.

use std::fmt;
use std::sync::Arc;

/// How many bytes the UE can receive in a subframe, and who decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capacity {
    /// Closed loop: the UE's channel-quality MCS (0..=28) and spatial layers (1 or 2) for
    /// a new transmission; the scheduler decides the RBs, the TBS table the bits.
    Channel {
        /// MCS index, 36.213 Table 7.1.7.1-1 (0..=28).
        mcs: u8,
        /// Spatial layers of a transport block (1 or 2).
        layers: u8,
    },
    /// Open loop: exactly this many bytes may leave the UE's queue in this subframe,
    /// bypassing the scheduler, HARQ and RLC; unused bytes are lost, as in `mm-link`.
    OpenLoop {
        /// Bytes deliverable in this subframe.
        bytes: u32,
    },
}

/// What the conditions say about the first transmission of a transport block in this
/// subframe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FirstTx {
    /// Nothing: the configured BLER applies.
    Unspecified,
    /// Recorded outcome (a trace's `harq_fail` column): `true` when it fails its CRC.
    Fails(bool),
    /// Block error rate to draw the outcome from (a trace's `bler` column), 0..=1.
    Bler(f32),
}

/// One subframe's conditions for one UE.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SubframeConditions {
    /// The UE's capacity, closed or open loop.
    pub capacity: Capacity,
    /// RBs the cell's other users demand, B_k (0..=N_rb).
    pub other_rbs: u8,
    /// Number of active other users, when the source knows it.
    pub other_users: Option<u8>,
    /// The first-transmission outcome or error rate, when the source knows it.
    pub first_tx: FirstTx,
    /// RSRP, dBm, when the source knows it.
    pub rsrp_dbm: Option<f32>,
    /// The UE's link is out in this subframe (a trace's `outage` column): nothing is sent
    /// to it, its data waits (`crate::stall`).
    pub outage: bool,
}

impl SubframeConditions {
    /// Open-loop conditions carrying `bytes`, with no other users.
    fn open_loop(bytes: u32) -> SubframeConditions {
        SubframeConditions {
            capacity: Capacity::OpenLoop { bytes },
            other_rbs: 0,
            other_users: None,
            first_tx: FirstTx::Unspecified,
            rsrp_dbm: None,
            outage: false,
        }
    }
}

/// A source of per-subframe conditions. Implementations are pure functions of `t_ms`,
/// so a run is reproducible and the cell may ask in any order.
pub trait Conditions {
    /// The conditions of subframe `t_ms` (ms since the start of the run), or `None` once
    /// the source has ended (a trace told not to loop).
    fn at(&self, t_ms: u64) -> Option<SubframeConditions>;

    /// The first `t_ms` for which [`Conditions::at`] is `None`; `None` if the source never
    /// ends.
    fn end_ms(&self) -> Option<u64>;

    /// The cell's resource blocks N_rb, if the source knows it (a PHY trace does).
    fn n_rb(&self) -> Option<u8> {
        None
    }

    /// The cell's transmit antenna ports, if the source knows them.
    fn n_antennas(&self) -> Option<u8> {
        None
    }

    /// System frame number of `t_ms` = 0, if the source knows it.
    fn start_sfn(&self) -> Option<u16> {
        None
    }
}

/// A defect in conditions data, naming the column or line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionsError(pub String);

impl fmt::Display for ConditionsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conditions: {}", self.0)
    }
}

impl std::error::Error for ConditionsError {}

/// The PHY trace columns the cell uses (`traces/FORMAT.md`), one value per 1 ms row, as
/// read by the `phy-trace` crate. Optional columns are `None` when absent. Build a
/// [`ConditionTrace`] from it to validate it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceColumns {
    /// Resource blocks of the cell (metadata `cell.n_rb`).
    pub n_rb: u8,
    /// Transmit antenna ports (metadata `cell.n_antennas`).
    pub n_antennas: u8,
    /// SFN of the first row (metadata `start_sfn`, 0..=1023).
    pub start_sfn: u16,
    /// `mcs`: the UE's channel-quality MCS, 0..=28.
    pub mcs: Vec<u8>,
    /// `other_rbs`: RBs the other users demand, B_k, 0..=N_rb.
    pub other_rbs: Vec<u8>,
    /// `other_users`: active other users.
    pub other_users: Option<Vec<u8>>,
    /// `harq_fail`: 1 when the first transmission fails, else 0.
    pub harq_fail: Option<Vec<u8>>,
    /// `bler`: first-transmission block error rate, 0..=1.
    pub bler: Option<Vec<f32>>,
    /// `layers`: spatial layers, 1 or 2 (absent: 1).
    pub layers: Option<Vec<u8>>,
    /// `rsrp_dbm`: RSRP, dBm, −140..=−44.
    pub rsrp_dbm: Option<Vec<f32>>,
    /// `outage`: 1 when the UE's link is out (a stall), else 0.
    pub outage: Option<Vec<u8>>,
}

/// Takes the columns the cell uses out of a trace read by `phy_trace::Trace::read`
/// (moved, not copied). The columns the data plane plays itself (`ul_capacity_bits`,
/// `core_delay_ms`) and the recorded ones (`own_rbs`, `own_tbs_bits`, `rsrq_db`) are
/// dropped: take them out of the trace first if they are needed.
impl From<phy_trace::Trace> for TraceColumns {
    fn from(trace: phy_trace::Trace) -> TraceColumns {
        let c = trace.columns;
        TraceColumns {
            n_rb: trace.metadata.cell.n_rb,
            n_antennas: trace.metadata.cell.n_antennas,
            start_sfn: trace.metadata.start_sfn,
            mcs: c.mcs,
            other_rbs: c.other_rbs,
            other_users: c.other_users,
            harq_fail: c.harq_fail,
            bler: c.bler,
            layers: c.layers,
            rsrp_dbm: c.rsrp_dbm,
            outage: c.outage,
        }
    }
}

/// Validated PHY trace columns, shared (in an `Arc`) by every [`TraceConditions`] that
/// plays them.
#[derive(Debug)]
pub struct ConditionTrace {
    columns: TraceColumns,
}

/// Checks that optional column `name` has `rows` values, each accepted by `ok`.
fn check_column<T: Copy + fmt::Display>(
    name: &str,
    column: Option<&[T]>,
    rows: usize,
    range: &str,
    ok: impl Fn(T) -> bool,
) -> Result<(), ConditionsError> {
    let Some(values) = column else { return Ok(()) };
    if values.len() != rows {
        return Err(ConditionsError(format!("column `{name}` has {} rows, `mcs` has {rows}", values.len())));
    }
    match values.iter().position(|&v| !ok(v)) {
        Some(row) => Err(ConditionsError(format!("column `{name}` row {row}: {} is outside {range}", values[row]))),
        None => Ok(()),
    }
}

impl ConditionTrace {
    /// Validates `columns`: a valid cell size and antenna count, at least one row, every
    /// column as long as `mcs`, every value in its `FORMAT.md` range, not both `harq_fail`
    /// and `bler`. The error names the column and the first bad row.
    pub fn new(columns: TraceColumns) -> Result<ConditionTrace, ConditionsError> {
        let c = &columns;
        if lte::bandwidth::mhz_for_n_rb(c.n_rb).is_none() {
            return Err(ConditionsError(format!("n_rb {} is not an LTE cell size", c.n_rb)));
        }
        if lte::rsrq::n_ref(c.n_antennas).is_none() {
            return Err(ConditionsError(format!("n_antennas {} is not 1 or 2", c.n_antennas)));
        }
        if c.start_sfn > 1023 {
            return Err(ConditionsError(format!("start_sfn {} is outside 0..=1023", c.start_sfn)));
        }
        let rows = c.mcs.len();
        if rows == 0 {
            return Err(ConditionsError("the trace has no rows".into()));
        }
        let n_rb = c.n_rb;
        check_column("mcs", Some(&c.mcs), rows, "0..=28", |v| v <= lte::mcs::MAX_DATA_MCS)?;
        check_column("other_rbs", Some(&c.other_rbs), rows, "0..=n_rb", |v| v <= n_rb)?;
        check_column("other_users", c.other_users.as_deref(), rows, "0..=255", |_| true)?;
        check_column("harq_fail", c.harq_fail.as_deref(), rows, "0..=1", |v| v <= 1)?;
        check_column("bler", c.bler.as_deref(), rows, "0..=1", |v| (0.0..=1.0).contains(&v))?;
        check_column("layers", c.layers.as_deref(), rows, "1..=2", |v| v == 1 || v == 2)?;
        check_column("rsrp_dbm", c.rsrp_dbm.as_deref(), rows, "-140..=-44", |v| (-140.0..=-44.0).contains(&v))?;
        check_column("outage", c.outage.as_deref(), rows, "0..=1", |v| v <= 1)?;
        if c.harq_fail.is_some() && c.bler.is_some() {
            return Err(ConditionsError("a trace carries `harq_fail` or `bler`, not both".into()));
        }
        Ok(ConditionTrace { columns })
    }

    /// Rows of the trace, ms.
    pub fn len_ms(&self) -> u64 {
        self.columns.mcs.len() as u64
    }

    /// The validated columns.
    pub fn columns(&self) -> &TraceColumns {
        &self.columns
    }

    /// The conditions of row `row` (< `len_ms`).
    fn row(&self, row: usize) -> SubframeConditions {
        let c = &self.columns;
        let first_tx = match (&c.harq_fail, &c.bler) {
            (Some(fail), _) => FirstTx::Fails(fail[row] == 1),
            (None, Some(bler)) => FirstTx::Bler(bler[row]),
            (None, None) => FirstTx::Unspecified,
        };
        SubframeConditions {
            capacity: Capacity::Channel { mcs: c.mcs[row], layers: c.layers.as_ref().map_or(1, |layers| layers[row]) },
            other_rbs: c.other_rbs[row],
            other_users: c.other_users.as_ref().map(|users| users[row]),
            first_tx,
            rsrp_dbm: c.rsrp_dbm.as_ref().map(|rsrp| rsrp[row]),
            outage: c.outage.as_ref().is_some_and(|outage| outage[row] == 1),
        }
    }
}

/// A PHY trace played from row `offset_ms` on, looping at its end unless told not to.
#[derive(Clone, Debug)]
pub struct TraceConditions {
    trace: Arc<ConditionTrace>,
    offset_ms: u64,
    looping: bool,
}

impl TraceConditions {
    /// Plays `trace` from its first row, looping.
    pub fn new(trace: Arc<ConditionTrace>) -> TraceConditions {
        TraceConditions { trace, offset_ms: 0, looping: true }
    }

    /// Starts at row `offset_ms` instead (so that several UEs sharing one trace do not see
    /// the same channel at the same time).
    pub fn starting_at(mut self, offset_ms: u64) -> TraceConditions {
        self.offset_ms = offset_ms;
        self
    }

    /// Ends at the trace's last row instead of looping.
    pub fn without_loop(mut self) -> TraceConditions {
        self.looping = false;
        self
    }
}

impl Conditions for TraceConditions {
    fn at(&self, t_ms: u64) -> Option<SubframeConditions> {
        let len = self.trace.len_ms();
        let index = t_ms.checked_add(self.offset_ms)?;
        let row = if self.looping {
            index % len
        } else if index < len {
            index
        } else {
            return None;
        };
        // row < len ≤ usize::MAX, since the rows are in memory.
        Some(self.trace.row(row as usize))
    }

    fn end_ms(&self) -> Option<u64> {
        (!self.looping).then(|| self.trace.len_ms().saturating_sub(self.offset_ms))
    }

    fn n_rb(&self) -> Option<u8> {
        Some(self.trace.columns.n_rb)
    }

    fn n_antennas(&self) -> Option<u8> {
        Some(self.trace.columns.n_antennas)
    }

    fn start_sfn(&self) -> Option<u16> {
        Some(self.trace.columns.start_sfn)
    }
}

/// Bytes of one Mahimahi delivery opportunity: one MTU-sized packet.
pub const MAHIMAHI_OPPORTUNITY_BYTES: u32 = 1500;

/// A Mahimahi delivery-opportunity trace, open loop: each timestamp (ms) is an
/// opportunity to deliver [`MAHIMAHI_OPPORTUNITY_BYTES`] bytes; several equal timestamps
/// are several opportunities. As `mm-link` does, the schedule repeats with the last
/// timestamp as its period (opportunity `ts` of cycle n is at n·period + ts), unless told
/// not to loop; bytes are carried across packet boundaries, and unused ones are lost.
#[derive(Clone, Debug)]
pub struct MahimahiConditions {
    /// Opportunities at each ms of a period; index 0 counts both timestamps 0 and
    /// `period_ms`, which coincide from the second cycle on.
    counts: Arc<Vec<u32>>,
    /// Opportunities with timestamp exactly `period_ms` (they do not happen at t = 0).
    at_period: u32,
    period_ms: u64,
    bytes_per_opportunity: u32,
    looping: bool,
}

impl MahimahiConditions {
    /// From the opportunity timestamps, ms, non-decreasing, the last one > 0.
    pub fn from_timestamps_ms(timestamps_ms: &[u64]) -> Result<MahimahiConditions, ConditionsError> {
        let Some(&period_ms) = timestamps_ms.last() else {
            return Err(ConditionsError("the Mahimahi trace has no timestamps".into()));
        };
        if period_ms == 0 {
            return Err(ConditionsError("the Mahimahi trace's last timestamp must be > 0".into()));
        }
        if let Some(i) = timestamps_ms.windows(2).position(|w| w[1] < w[0]) {
            return Err(ConditionsError(format!("Mahimahi timestamp {} decreases", i + 1)));
        }
        let period = usize::try_from(period_ms)
            .map_err(|_| ConditionsError(format!("Mahimahi period {period_ms} ms is too long")))?;
        let mut counts = vec![0u32; period];
        let mut at_period = 0u32;
        for &ts in timestamps_ms {
            if ts == period_ms {
                at_period = at_period.saturating_add(1);
            }
            let slot = &mut counts[(ts % period_ms) as usize];
            *slot = slot.saturating_add(1);
        }
        Ok(MahimahiConditions {
            counts: Arc::new(counts),
            at_period,
            period_ms,
            bytes_per_opportunity: MAHIMAHI_OPPORTUNITY_BYTES,
            looping: true,
        })
    }

    /// From the text of a Mahimahi trace file: one timestamp (ms) per line, blank lines
    /// ignored. The error names the 1-based line.
    pub fn parse(text: &str) -> Result<MahimahiConditions, ConditionsError> {
        let mut timestamps_ms = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let ts = line.parse::<u64>().map_err(|_| {
                ConditionsError(format!("Mahimahi trace line {}: `{line}` is not a timestamp in ms", i + 1))
            })?;
            timestamps_ms.push(ts);
        }
        MahimahiConditions::from_timestamps_ms(&timestamps_ms)
    }

    /// Ends after the first period instead of looping.
    pub fn without_loop(mut self) -> MahimahiConditions {
        self.looping = false;
        self
    }

    /// The schedule's period (its last timestamp), ms.
    pub fn period_ms(&self) -> u64 {
        self.period_ms
    }

    /// Opportunities at `t_ms`, or `None` after the end.
    fn opportunities(&self, t_ms: u64) -> Option<u32> {
        if !self.looping && t_ms > self.period_ms {
            return None;
        }
        if !self.looping && t_ms == self.period_ms {
            return Some(self.at_period);
        }
        // index < period_ms, which fits in usize (the counts are in memory).
        let count = self.counts[(t_ms % self.period_ms) as usize];
        Some(if t_ms == 0 { count - self.at_period } else { count })
    }
}

impl Conditions for MahimahiConditions {
    fn at(&self, t_ms: u64) -> Option<SubframeConditions> {
        let bytes = self.opportunities(t_ms)?.saturating_mul(self.bytes_per_opportunity);
        Some(SubframeConditions::open_loop(bytes))
    }

    fn end_ms(&self) -> Option<u64> {
        (!self.looping).then_some(self.period_ms + 1)
    }
}

/// A constant bit rate, open loop, for a link without a trace file. The bytes of a
/// subframe are rounded so that the first `t` subframes carry exactly ⌊t·rate/8000⌋ bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConstantRate {
    /// The link's rate, bit/s.
    pub rate_bps: u64,
}

impl ConstantRate {
    /// Bytes carried by subframes 0..`t_ms`.
    fn bytes_before(&self, t_ms: u64) -> u128 {
        u128::from(t_ms) * u128::from(self.rate_bps) / 8000
    }
}

impl Conditions for ConstantRate {
    fn at(&self, t_ms: u64) -> Option<SubframeConditions> {
        let bytes = self.bytes_before(t_ms.saturating_add(1)) - self.bytes_before(t_ms);
        Some(SubframeConditions::open_loop(u32::try_from(bytes).unwrap_or(u32::MAX)))
    }

    fn end_ms(&self) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(rows: usize) -> TraceColumns {
        TraceColumns {
            n_rb: 50,
            n_antennas: 2,
            start_sfn: 0,
            mcs: (0..rows).map(|i| (i % 29) as u8).collect(),
            other_rbs: vec![10; rows],
            ..TraceColumns::default()
        }
    }

    #[test]
    fn from_a_phy_trace() {
        let trace = phy_trace::Trace {
            metadata: phy_trace::Metadata {
                format_version: 1,
                cell: phy_trace::Cell { bandwidth_mhz: 5.0, n_rb: 25, n_antennas: 1 },
                duration_ms: 3,
                start_sfn: 17,
                source: "synth".into(),
                provenance: Default::default(),
                description: None,
            },
            columns: phy_trace::Columns {
                t_ms: vec![0, 1, 2],
                mcs: vec![3, 4, 5],
                other_rbs: vec![0, 25, 7],
                bler: Some(vec![0.0, 0.5, 1.0]),
                ..Default::default()
            },
        };
        let conditions = TraceConditions::new(Arc::new(ConditionTrace::new(trace.into()).unwrap()));
        assert_eq!((conditions.n_rb(), conditions.n_antennas(), conditions.start_sfn()), (Some(25), Some(1), Some(17)));
        let row = conditions.at(1).unwrap();
        assert_eq!(row.capacity, Capacity::Channel { mcs: 4, layers: 1 });
        assert_eq!((row.other_rbs, row.first_tx), (25, FirstTx::Bler(0.5)));
    }

    #[test]
    fn trace_loops_and_offsets() {
        let trace = Arc::new(ConditionTrace::new(columns(5)).unwrap());
        let looping = TraceConditions::new(trace.clone()).starting_at(2);
        let mcs = |c: SubframeConditions| match c.capacity {
            Capacity::Channel { mcs, .. } => mcs,
            Capacity::OpenLoop { .. } => unreachable!(),
        };
        let seen: Vec<u8> = (0..7).map(|t| mcs(looping.at(t).unwrap())).collect();
        assert_eq!(seen, [2, 3, 4, 0, 1, 2, 3]);
        assert_eq!(looping.end_ms(), None);
        let once = TraceConditions::new(trace).starting_at(2).without_loop();
        assert_eq!(once.end_ms(), Some(3));
        assert!(once.at(2).is_some());
        assert!(once.at(3).is_none());
    }

    #[test]
    fn trace_validation_names_the_column() {
        let mut bad = columns(3);
        bad.other_rbs[1] = 51;
        assert!(ConditionTrace::new(bad).unwrap_err().0.contains("`other_rbs` row 1"));
        let mut bad = columns(3);
        bad.layers = Some(vec![1, 1]);
        assert!(ConditionTrace::new(bad).unwrap_err().0.contains("`layers` has 2 rows"));
        let mut both = columns(3);
        both.harq_fail = Some(vec![0; 3]);
        both.bler = Some(vec![0.1; 3]);
        assert!(ConditionTrace::new(both).is_err());
        let mut bad = columns(3);
        bad.n_rb = 40;
        assert!(ConditionTrace::new(bad).is_err());
    }

    #[test]
    fn mahimahi_schedule() {
        // Period 3: opportunities at 0, 1, 1 and 3 in the first cycle, then every 3 ms.
        let mm = MahimahiConditions::parse("0\n1\n1\n\n3\n").unwrap();
        let bytes = |t| match mm.at(t).unwrap().capacity {
            Capacity::OpenLoop { bytes } => bytes / MAHIMAHI_OPPORTUNITY_BYTES,
            Capacity::Channel { .. } => unreachable!(),
        };
        let seen: Vec<u32> = (0..7).map(bytes).collect();
        assert_eq!(seen, [1, 2, 0, 2, 2, 0, 2]);
        let once = mm.clone().without_loop();
        assert_eq!(once.at(3).unwrap().capacity, Capacity::OpenLoop { bytes: MAHIMAHI_OPPORTUNITY_BYTES });
        assert!(once.at(4).is_none());
        assert!(MahimahiConditions::parse("5\n4\n").is_err());
        assert!(MahimahiConditions::parse("1\nx\n").unwrap_err().0.contains("line 2"));
        assert!(MahimahiConditions::parse("0\n").is_err());
    }

    #[test]
    fn constant_rate_is_exact_over_time() {
        let link = ConstantRate { rate_bps: 12_345_678 };
        let total: u64 = (0..1000)
            .map(|t| match link.at(t).unwrap().capacity {
                Capacity::OpenLoop { bytes } => u64::from(bytes),
                Capacity::Channel { .. } => unreachable!(),
            })
            .sum();
        assert_eq!(total, 12_345_678 / 8);
    }
}

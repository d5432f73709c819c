//! The format's rules on values (FORMAT.md, "Columns" and "Rules that apply to every
//! trace"), checked all at once so a person sees every defect in one go.
//!
//! A column breaking a rule in many rows yields one defect: its first offending row and
//! how many rows break it in all.

use std::fmt::Display;

use crate::error::Defect;
use crate::Trace;

/// Highest MCS a trace may carry (new transmissions: 36.213 I_MCS 0..=28).
const MAX_MCS: u8 = lte::mcs::MAX_DATA_MCS;
/// Bound of the bit-count columns, 2^24 bits.
const MAX_BITS: u32 = 1 << 24;
const RSRP_DBM: (f32, f32) = (-140.0, -44.0);
const RSRQ_DB: (f32, f32) = (-34.0, 3.0);
const CORE_DELAY_MS: (f32, f32) = (0.0, 10000.0);

pub(crate) fn validate(trace: &Trace) -> Vec<Defect> {
    let mut defects = trace.metadata.validate();
    let rows = trace.metadata.duration_ms as usize;
    if rows == 0 {
        defects.push(Defect::new("duration_ms", "is 0, but a trace has at least one row"));
    }
    for (name, slice) in trace.columns.present() {
        if slice.len() != rows {
            defects.push(Defect::new(name.as_str(), format!("has {} rows, but duration_ms says {rows}", slice.len())));
        }
    }

    let c = &trace.columns;
    let n_rb = trace.metadata.cell.n_rb;
    let d = &mut defects;
    check(
        d,
        "t_ms",
        c.t_ms.iter().copied(),
        |row, t| t as usize == row,
        |row| format!("must equal the row number {row}: rows are contiguous 1 ms subframes from t_ms 0"),
    );
    check(d, "mcs", c.mcs.iter().copied(), |_, v| v <= MAX_MCS, |_| format!("must be 0..={MAX_MCS}"));
    check(d, "other_rbs", c.other_rbs.iter().copied(), |_, v| v <= n_rb, |_| format!("must be 0..=n_rb ({n_rb})"));
    if let Some(v) = &c.harq_fail {
        check(d, "harq_fail", v.iter().copied(), |_, v| v <= 1, |_| "must be 0 or 1".into());
    }
    if let Some(v) = &c.bler {
        check(d, "bler", v.iter().copied(), |_, v| (0.0..=1.0).contains(&v), |_| "must be 0.0..=1.0".into());
        if c.harq_fail.is_some() {
            d.push(Defect::new("bler", "a trace carries harq_fail or bler, not both"));
        }
    }
    if let Some(v) = &c.layers {
        check(d, "layers", v.iter().copied(), |_, v| v == 1 || v == 2, |_| "must be 1 or 2".into());
    }
    if let Some(v) = &c.rsrp_dbm {
        check_range(d, "rsrp_dbm", v, RSRP_DBM);
    }
    if let Some(own) = &c.own_rbs {
        check(d, "own_rbs", own.iter().copied(), |_, v| v <= n_rb, |_| format!("must be 0..=n_rb ({n_rb})"));
        let total = own.iter().zip(&c.other_rbs).map(|(&o, &b)| u16::from(o) + u16::from(b));
        check(
            d,
            "own_rbs",
            total,
            |_, v| v <= u16::from(n_rb),
            |_| format!("own_rbs + other_rbs must be at most n_rb ({n_rb})"),
        );
    }
    if let Some(v) = &c.own_tbs_bits {
        check(d, "own_tbs_bits", v.iter().copied(), |_, v| v <= MAX_BITS, |_| format!("must be 0..={MAX_BITS}"));
    }
    if let Some(v) = &c.rsrq_db {
        check_range(d, "rsrq_db", v, RSRQ_DB);
    }
    if let Some(v) = &c.ul_capacity_bits {
        check(d, "ul_capacity_bits", v.iter().copied(), |_, v| v <= MAX_BITS, |_| format!("must be 0..={MAX_BITS}"));
    }
    if let Some(v) = &c.core_delay_ms {
        check_range(d, "core_delay_ms", v, CORE_DELAY_MS);
    }
    if let Some(v) = &c.outage {
        check(d, "outage", v.iter().copied(), |_, v| v <= 1, |_| "must be 0 or 1".into());
    }
    if let Some(v) = &c.mcs_source {
        check(d, "mcs_source", v.iter().copied(), |_, v| v <= 2, |_| "must be 0, 1 or 2".into());
    }
    defects
}

/// Adds one defect for `field` if any value fails `ok(row, value)`, naming the first such
/// row and its value; `rule` says what the value must be.
fn check<T: Copy + Display>(
    defects: &mut Vec<Defect>,
    field: &str,
    values: impl Iterator<Item = T>,
    ok: impl Fn(usize, T) -> bool,
    rule: impl FnOnce(usize) -> String,
) {
    let mut first = None;
    let mut bad_rows = 0usize;
    for (row, value) in values.enumerate() {
        if !ok(row, value) {
            bad_rows += 1;
            first.get_or_insert((row, value));
        }
    }
    let Some((row, value)) = first else { return };
    let mut message = format!("is {value}, {}", rule(row));
    if bad_rows > 1 {
        message.push_str(&format!(" ({bad_rows} rows in all)"));
    }
    defects.push(Defect::at_row(field, row, message));
}

/// [`check`] for a float column bounded by `(low, high)` inclusive; NaN fails.
fn check_range(defects: &mut Vec<Defect>, field: &str, values: &[f32], (low, high): (f32, f32)) {
    check(
        defects,
        field,
        values.iter().copied(),
        |_, v| (low..=high).contains(&v),
        |_| format!("must be {low:?}..={high:?}"),
    );
}

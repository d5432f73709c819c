//! `cbtrace`: inspect, convert and time clawbed PHY traces (traces/FORMAT.md).
//!
//! ```text
//! cbtrace summary FILE     one JSON object: rows, metadata, per-column {sum, min, max},
//!                          load_seconds
//! cbtrace convert IN OUT   rewrite IN (.cbt or .csv) as OUT (encoding from OUT's suffix)
//! cbtrace bench [ROWS]     write a synthetic all-column trace (default 3 600 000 rows, one
//!                          hour) to a temporary file, read it back, print size and times
//! ```
//!
//! `summary` lets the Python tests check that both languages read a file the same way:
//! integer sums are exact, float sums are the correctly rounded sum of the f32 values taken
//! as f64 (what Python's `math.fsum` returns), so the two sides can compare exactly.

#![forbid(unsafe_code)]

use std::env;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use phy_trace::{Cell, ColumnSlice, Columns, Metadata, Trace};
use serde_json::{json, Map, Value};

const USAGE: &str = "usage: cbtrace summary FILE | cbtrace convert IN OUT | cbtrace bench [ROWS]";

/// One hour of 1 ms subframes.
const HOUR_ROWS: u32 = 3_600_000;

/// Reads of the same file in `bench`; the best is reported, as the first may pay for
/// page-cache misses.
const BENCH_READS: usize = 3;

fn main() -> ExitCode {
    let args: Vec<OsString> = env::args_os().skip(1).collect();
    let command = args.first().and_then(|a| a.to_str()).unwrap_or("");
    let result = match (command, &args[args.len().min(1)..]) {
        ("summary", [file]) => summary(Path::new(file)),
        ("convert", [input, output]) => convert(Path::new(input), Path::new(output)),
        ("bench", []) => bench(HOUR_ROWS),
        ("bench", [rows]) => match rows.to_str().and_then(|r| r.parse().ok()) {
            Some(rows) => bench(rows),
            None => Err(format!("ROWS must be a whole number, got {rows:?}")),
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("cbtrace: {message}");
            ExitCode::FAILURE
        }
    }
}

fn summary(path: &Path) -> Result<(), String> {
    let start = Instant::now();
    let trace = Trace::read(path).map_err(|e| e.to_string())?;
    let load_seconds = start.elapsed().as_secs_f64();
    let mut columns = Map::new();
    for (name, values) in trace.columns.present() {
        columns.insert(name.as_str().to_string(), column_summary(values));
    }
    let out = json!({
        "rows": trace.rows(),
        "metadata": trace.metadata.to_json(),
        "columns": columns,
        "load_seconds": load_seconds,
    });
    print_json(&out)
}

/// Prints `value` as pretty JSON on stdout. A reader that stops early (`| head`) is not an
/// error.
fn print_json(value: &Value) -> Result<(), String> {
    match writeln!(io::stdout().lock(), "{value:#}") {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(format!("stdout: {e}")),
        _ => Ok(()),
    }
}

/// `{sum, min, max}` of one column: integers for integer columns (exact), numbers for float
/// columns; `min` and `max` are null for an empty column.
fn column_summary(values: ColumnSlice<'_>) -> Value {
    match values {
        ColumnSlice::U8(v) => integer_summary(v.iter().map(|&x| u64::from(x))),
        ColumnSlice::U32(v) => integer_summary(v.iter().map(|&x| u64::from(x))),
        ColumnSlice::F32(v) => {
            let min = v.iter().copied().reduce(f32::min).map(f64::from);
            let max = v.iter().copied().reduce(f32::max).map(f64::from);
            json!({"sum": exact_sum(v.iter().map(|&x| f64::from(x))), "min": min, "max": max})
        }
    }
}

fn integer_summary(values: impl Iterator<Item = u64> + Clone) -> Value {
    // A valid trace cannot overflow u64: at most 2^32 rows of values at most 2^32.
    let sum: u64 = values.clone().sum();
    json!({"sum": sum, "min": values.clone().min(), "max": values.max()})
}

/// The correctly rounded sum of finite `values` (Shewchuk's algorithm with CPython's
/// `math.fsum` half-even fix-up), so the result does not depend on summation order and
/// equals Python's `math.fsum` of the same values.
fn exact_sum(values: impl Iterator<Item = f64>) -> f64 {
    // Non-overlapping partial sums, increasing magnitude; their exact total is the sum.
    let mut partials: Vec<f64> = Vec::new();
    for mut x in values {
        let mut kept = 0;
        for i in 0..partials.len() {
            let mut y = partials[i];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                partials[kept] = lo;
                kept += 1;
            }
            x = hi;
        }
        partials.truncate(kept);
        partials.push(x);
    }
    // Add the partials from the largest down until the total becomes inexact.
    let mut n = partials.len();
    let Some(&top) = partials.last() else {
        return 0.0;
    };
    let mut hi = top;
    let mut lo = 0.0;
    n -= 1;
    while n > 0 {
        let x = hi;
        let y = partials[n - 1];
        n -= 1;
        hi = x + y;
        lo = y - (hi - x);
        if lo != 0.0 {
            break;
        }
    }
    // Round half to even across partials: if the rest pushes the same way as `lo`, the true
    // sum is past the halfway point.
    if n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0)) {
        let y = lo * 2.0;
        let x = hi + y;
        if y == x - hi {
            hi = x;
        }
    }
    hi
}

fn convert(input: &Path, output: &Path) -> Result<(), String> {
    let trace = Trace::read(input).map_err(|e| e.to_string())?;
    trace.write(output).map_err(|e| e.to_string())
}

fn bench(rows: u32) -> Result<(), String> {
    let trace = synthetic_trace(rows)?;
    let path = env::temp_dir().join(format!("cbtrace-bench-{}.cbt", std::process::id()));
    let result = time_round_trip(&trace, &path);
    // The file is scratch: remove it whatever happened (it may not exist).
    let _ = fs::remove_file(&path);
    let (file_bytes, write_seconds, load_seconds) = result?;
    let names: Vec<&str> = trace.columns.present().iter().map(|(name, _)| name.as_str()).collect();
    let out = json!({
        "rows": rows,
        "columns": names,
        "file_bytes": file_bytes,
        "write_seconds": write_seconds,
        "load_seconds": load_seconds.iter().copied().fold(f64::INFINITY, f64::min),
        "load_seconds_each": load_seconds,
    });
    print_json(&out)
}

/// Writes `trace` to `path` and reads it back [`BENCH_READS`] times: (file size in bytes,
/// write seconds, each read's seconds).
fn time_round_trip(trace: &Trace, path: &Path) -> Result<(u64, f64, Vec<f64>), String> {
    let start = Instant::now();
    trace.write_cbt(path).map_err(|e| e.to_string())?;
    let write_seconds = start.elapsed().as_secs_f64();
    let file_bytes = fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    let mut load_seconds = Vec::with_capacity(BENCH_READS);
    for _ in 0..BENCH_READS {
        let start = Instant::now();
        let read = Trace::read(path).map_err(|e| e.to_string())?;
        load_seconds.push(start.elapsed().as_secs_f64());
        if read != *trace {
            return Err(format!("{}: read back differs from what was written", path.display()));
        }
    }
    Ok((file_bytes, write_seconds, load_seconds))
}

/// SplitMix64: a small, fixed pseudo-random sequence, so every bench run measures the same
/// data.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in low..=high.
    fn between(&mut self, low: u32, high: u32) -> u32 {
        // The remainder is at most high - low, so the sum fits.
        low + (self.next_u64() % (u64::from(high - low) + 1)) as u32
    }

    /// Roughly normal with mean 0 and standard deviation `sigma` (sum of uniforms).
    fn normal(&mut self, sigma: f64) -> f64 {
        ((0..12).map(|_| self.unit()).sum::<f64>() - 6.0) * sigma
    }
}

/// A value held for runs of geometric length (mean `mean_ms`), then redrawn: how recorded
/// quantities look between the events that change them.
struct Runs {
    value: u32,
    left: u32,
    mean_ms: f64,
}

impl Runs {
    fn new(mean_ms: f64) -> Runs {
        Runs { value: 0, left: 0, mean_ms }
    }

    /// This subframe's value; `draw` gives a new one when a run ends.
    fn next(&mut self, rng: &mut SplitMix64, draw: impl FnOnce(&mut SplitMix64) -> u32) -> u32 {
        if self.left == 0 {
            self.value = draw(rng);
            // Geometric length by inversion; 1 - unit() is in (0, 1], so ln is finite.
            let p = 1.0 / self.mean_ms;
            self.left = 1 + ((1.0 - rng.unit()).ln() / (1.0 - p).ln()) as u32;
        }
        self.left -= 1;
        self.value
    }
}

/// A busy 20 MHz two-antenna cell with every column but `harq_fail` (a trace carries
/// `harq_fail` or `bler`; the float `bler` is the heavier). Values vary the way recorded
/// ones do, so the compressed size is realistic rather than that of constant or
/// white-noise columns: the MCS walks slowly with ±1 jitter, other users come in bursts
/// (mean 40 ms) that take most of the cell, the UE's own allocation changes every few ms,
/// RSRP and RSRQ are quantised (1/16 dB, 0.5 dB) and measured every 40 ms, BLER is
/// reported in 1 % steps around 10 %, and the core delay changes every ~10 s.
fn synthetic_trace(rows: u32) -> Result<Trace, String> {
    const N_RB: u8 = 100;
    const N_ANTENNAS: u8 = 2;
    const MEASUREMENT_MS: u32 = 40;
    let n_rb = u32::from(N_RB);
    let mut rng = SplitMix64(1);
    let capacity = rows as usize;
    let mut c = Columns { t_ms: (0..rows).collect(), ..Columns::default() };
    let mut mcs_col = Vec::with_capacity(capacity);
    let mut other_rbs = Vec::with_capacity(capacity);
    let (mut other_users, mut layers, mut own_rbs, mut own_tbs_bits) = (vec![], vec![], vec![], vec![]);
    let (mut bler, mut rsrp_dbm, mut rsrq_db, mut ul_capacity_bits, mut core_delay_ms) =
        (vec![], vec![], vec![], vec![], vec![]);

    let (mut busy, mut users, mut own_run, mut layer_run, mut ul_prbs, mut delay_run) =
        (Runs::new(40.0), Runs::new(500.0), Runs::new(8.0), Runs::new(2000.0), Runs::new(50.0), Runs::new(10_000.0));
    let (mut channel, mut rsrp, mut rsrq) = (16.0f64, -95.0f64, -10.0f64);
    let to_u8 = |v: u32| u8::try_from(v).map_err(|_| format!("synthetic value {v} exceeds u8"));
    for t in 0..rows {
        let previous = channel;
        channel = (channel + rng.normal(0.04)).clamp(2.0, 26.0);
        let jitter = [-1, 0, 0, 0, 0, 0, 0, 1][rng.between(0, 7) as usize];
        let mcs = to_u8((channel.round() as i32 + jitter).clamp(0, 28) as u32)?;
        let is_busy = busy.next(&mut rng, |r| r.between(0, 1)) == 1;
        let other = if is_busy { rng.between(n_rb * 7 / 10, n_rb) } else { rng.between(0, 3) };
        let active = users.next(&mut rng, |r| r.between(1, 8));
        let own = own_run.next(&mut rng, |r| [0, 0, 2, 6, 12, 25, n_rb][r.between(0, 6) as usize]).min(n_rb - other);
        let layer = to_u8(layer_run.next(&mut rng, |r| r.between(1, 2)))?;
        let own = to_u8(own)?;
        let tbs = if own == 0 { 0 } else { lte::tbs::tbs_bits(mcs, own, layer).unwrap_or(0) };
        let ul_mcs = mcs.saturating_sub(4).min(20);
        let ul_n_prb = to_u8(ul_prbs.next(&mut rng, |r| r.between(1, 25)))?;
        let ul = lte::tbs::tbs_bits(ul_mcs, ul_n_prb, 1).unwrap_or(0);
        if t % MEASUREMENT_MS == 0 {
            rsrp = (rsrp + rng.normal(0.3)).clamp(-140.0, -44.0);
            let load = f64::from(other + u32::from(own)) / f64::from(n_rb);
            rsrq = lte::rsrq::rsrq_db_from_load(load.min(1.0), N_ANTENNAS).unwrap_or(rsrq);
        }
        let error_rate = 0.1 - (channel - previous) + rng.normal(0.02);
        // Core delay in half-ms steps from 10 to 39.5 ms.
        let delay = delay_run.next(&mut rng, |r| r.between(20, 79));

        mcs_col.push(mcs);
        other_rbs.push(to_u8(other)?);
        other_users.push(if is_busy { to_u8(active)? } else { 0 });
        layers.push(layer);
        own_rbs.push(own);
        own_tbs_bits.push(tbs);
        bler.push(((error_rate.clamp(0.0, 1.0) * 100.0).round() / 100.0) as f32);
        rsrp_dbm.push(((rsrp * 16.0).round() / 16.0) as f32);
        rsrq_db.push(((rsrq * 2.0).round() / 2.0).clamp(-34.0, 3.0) as f32);
        ul_capacity_bits.push(ul);
        core_delay_ms.push(delay as f32 / 2.0);
    }
    c.mcs = mcs_col;
    c.other_rbs = other_rbs;
    c.other_users = Some(other_users);
    c.layers = Some(layers);
    c.own_rbs = Some(own_rbs);
    c.own_tbs_bits = Some(own_tbs_bits);
    c.bler = Some(bler);
    c.rsrp_dbm = Some(rsrp_dbm);
    c.rsrq_db = Some(rsrq_db);
    c.ul_capacity_bits = Some(ul_capacity_bits);
    c.core_delay_ms = Some(core_delay_ms);

    let mut provenance = Map::new();
    provenance.insert("generator".into(), "cbtrace bench".into());
    provenance.insert("seed".into(), 1.into());
    let metadata = Metadata {
        format_version: phy_trace::metadata::FORMAT_VERSION,
        cell: Cell { bandwidth_mhz: 20.0, n_rb: N_RB, n_antennas: N_ANTENNAS },
        duration_ms: rows,
        start_sfn: 0,
        source: "synth".into(),
        provenance,
        description: Some("synthetic benchmark trace: all columns but harq_fail, realistic variation".into()),
    };
    Ok(Trace { metadata, columns: c })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_sum_is_correctly_rounded() {
        assert_eq!(exact_sum(std::iter::empty()), 0.0);
        assert_eq!(exact_sum([0.1; 10].into_iter()), 1.0);
        assert_eq!(exact_sum([1e100, 1.0, -1e100, 1e-100].into_iter()), 1.0);
        // CPython's own test: the half-even fix-up rounds up here.
        assert_eq!(exact_sum([1e-16, 1.0, 1e16].into_iter()), 10000000000000002.0);
        let values: Vec<f64> = (0..1000).map(|i| f64::from(i) * 0.001 - 0.3).collect();
        let forward = exact_sum(values.iter().copied());
        assert_eq!(forward, exact_sum(values.iter().rev().copied()));
    }

    #[test]
    fn synthetic_trace_is_valid() {
        let trace = synthetic_trace(20_000).unwrap();
        assert_eq!(trace.validate(), vec![]);
        assert_eq!(trace.columns.present().len(), 12);
    }
}

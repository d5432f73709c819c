//! The estimates log: one CSV row per subframe (or per period), byte for byte the
//! reference's (`claw/client/estimates.py`, which documents the columns).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::core::Row;

pub const COLUMNS: &str = "t_ms,unix_s,active,window_ms,samples,load,n_t_rbs,n_a_rbs,n_i_rbs,n_s_rbs,n_f_rbs,\
mean_mcs,mcs_source,layers,n_prb,w_claw_bytes,saturated,bottleneck,degraded,verdict,feedback_seq,events";
/// Rows between flushes (100 ms of subframes): an interrupted run loses at most these.
const FLUSH_ROWS: u64 = 100;

/// One row as the reference writes it (without the newline).
pub fn format_row(row: &Row, out: &mut String) {
    out.clear();
    let _ = write!(out, "{},", row.t_ms);
    if let Some(u) = row.unix_s {
        let _ = write!(out, "{u:.6}");
    }
    let _ = write!(out, ",{}", u8::from(row.active));
    match &row.estimate {
        None => out.push_str(",,,,,,,,,,,,,"),
        Some(e) => {
            let _ = write!(
                out,
                ",{},{},{:.6},{},{:.3},{:.3},{},{:.3},",
                e.window_ms, e.samples, e.load, e.n_t_rbs, e.n_a_rbs, e.n_i_rbs, e.n_s_rbs, e.n_f_rbs
            );
            if let Some(m) = e.mean_mcs {
                let _ = write!(out, "{m:.4}");
            }
            let _ = write!(out, ",{},{},{},{}", e.mcs_source.name(), e.layers, e.n_prb, e.w_claw_bytes);
        }
    }
    let _ = write!(out, ",{},{},{},", u8::from(row.saturated), row.bottleneck.name(), u8::from(row.degraded));
    if let Some(v) = row.verdict {
        out.push_str(v.name());
    }
    out.push(',');
    if let Some(s) = row.feedback_seq {
        let _ = write!(out, "{s}");
    }
    out.push(',');
    for (i, ev) in row.events.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        let _ = write!(out, "{}:{}", ev.kind.name(), ev.count);
    }
}

/// Writes rows as CSV (`period_ms` > 1: one row per period plus every notable row).
pub struct EstimateLog {
    path: PathBuf,
    file: BufWriter<File>,
    period_ms: i64,
    pending: u64,
    last_t: Option<i64>,
    pub rows: u64,
    line: String,
}

impl EstimateLog {
    pub fn create(path: &Path, period_ms: i64) -> std::io::Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let mut file = BufWriter::with_capacity(1 << 16, File::create(path)?);
        writeln!(file, "{COLUMNS}")?;
        Ok(EstimateLog {
            path: path.to_path_buf(),
            file,
            period_ms,
            pending: 0,
            last_t: None,
            rows: 0,
            line: String::with_capacity(256),
        })
    }

    pub fn write(&mut self, row: &Row) -> std::io::Result<()> {
        let notable = row.verdict.is_some() || row.feedback_seq.is_some() || !row.events.is_empty();
        if self.period_ms > 1 && !notable && self.last_t.is_some_and(|last| row.t_ms - last < self.period_ms) {
            return Ok(());
        }
        self.last_t = Some(row.t_ms);
        format_row(row, &mut self.line);
        self.line.push('\n');
        self.file.write_all(self.line.as_bytes())?;
        self.rows += 1;
        self.pending += 1;
        // The first row at once: a scheme takes the client as ready when its log has one.
        if self.pending >= FLUSH_ROWS || self.rows == 1 {
            self.file.flush()?;
            self.pending = 0;
        }
        Ok(())
    }

    pub fn close(mut self) -> std::io::Result<u64> {
        self.file.flush()?;
        Ok(self.rows)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

//! Reader and writer of the clawbed PHY trace format, version 1 (`traces/FORMAT.md`): one
//! row per 1 ms subframe describing one LTE cell as seen by one UE, in a compressed
//! columnar binary encoding (`.cbt`) or in CSV.
//!
//! ```no_run
//! # fn main() -> Result<(), phy_trace::Error> {
//! let trace = phy_trace::Trace::read("busy-cell.cbt")?; // validated on reading
//! println!("{} rows, N_rb {}", trace.rows(), trace.metadata.cell.n_rb);
//! trace.write_csv("busy-cell.csv")?;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod binary;
pub mod column;
pub mod csv;
pub mod error;
pub mod metadata;
mod validate;

use std::ffi::OsString;
use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::Path;

pub use binary::{CbtOptions, Encoding};
pub use column::{ColumnData, ColumnName, ColumnSlice, Columns, Dtype};
pub use error::{Defect, Error};
pub use metadata::{Cell, Metadata};

/// SFNs count modulo this.
const SFN_MODULUS: u64 = 1024;
/// Subframes per radio frame.
const SUBFRAMES_PER_FRAME: u64 = 10;

/// The two encodings of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Binary, columnar, compressed; suffix `.cbt`.
    Cbt,
    /// CSV; suffix `.csv`.
    Csv,
}

impl FileKind {
    /// The encoding named by the file's suffix (`.cbt` or `.csv`, any case).
    pub fn from_path(path: &Path) -> Option<FileKind> {
        let suffix = path.extension()?.to_str()?.to_ascii_lowercase();
        match suffix.as_str() {
            "cbt" => Some(FileKind::Cbt),
            "csv" => Some(FileKind::Csv),
            _ => None,
        }
    }

    /// The encoding recognised from the start of the file: the `.cbt` magic or the CSV
    /// format line.
    pub fn sniff(bytes: &[u8]) -> Option<FileKind> {
        if bytes.starts_with(&binary::MAGIC) {
            Some(FileKind::Cbt)
        } else if bytes.starts_with(csv::FORMAT_LINE_PREFIX.as_bytes()) {
            Some(FileKind::Csv)
        } else {
            None
        }
    }
}

/// A PHY trace: metadata and one value per column per 1 ms subframe.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The metadata (cell, duration, provenance, ...).
    pub metadata: Metadata,
    /// The values.
    pub columns: Columns,
}

impl Trace {
    /// Reads and validates a trace. The encoding follows the suffix (`.cbt`, `.csv`) or,
    /// for any other name, the file's first bytes. Any defect fails the read with
    /// [`Error::Invalid`], which lists them all.
    pub fn read(path: impl AsRef<Path>) -> Result<Trace, Error> {
        let path = path.as_ref();
        let bytes = fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        Trace::from_bytes(&bytes, path)
    }

    /// Decodes and validates a trace held in memory, as [`Trace::read`] does a file's
    /// bytes: the encoding follows `path`'s suffix, else the first bytes; `path` names the
    /// trace in errors. Any input gives a trace or an error, never a panic.
    pub fn from_bytes(bytes: &[u8], path: impl AsRef<Path>) -> Result<Trace, Error> {
        let path = path.as_ref();
        let kind = FileKind::from_path(path).or_else(|| FileKind::sniff(bytes)).ok_or_else(|| Error::NotATrace {
            path: path.to_path_buf(),
            detail: "the suffix is neither .cbt nor .csv and the file starts with neither the .cbt magic nor \
                     the CSV format line"
                .into(),
        })?;
        let trace = match kind {
            FileKind::Cbt => binary::decode(bytes, path)?,
            FileKind::Csv => csv::decode(bytes, path)?,
        };
        let mut defects = trace.validate();
        if defects.is_empty() {
            return Ok(trace);
        }
        if kind == FileKind::Csv {
            for defect in &mut defects {
                defect.line = Some(csv::line_of(defect));
            }
        }
        Err(Error::Invalid { path: path.to_path_buf(), defects })
    }

    /// Writes the trace in the encoding its suffix names (`.cbt` with default options, or
    /// `.csv`).
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        match FileKind::from_path(path) {
            Some(FileKind::Cbt) => self.write_cbt(path),
            Some(FileKind::Csv) => self.write_csv(path),
            None => Err(Error::NotATrace {
                path: path.to_path_buf(),
                detail: "cannot tell the encoding to write: use the suffix .cbt or .csv".into(),
            }),
        }
    }

    /// Writes the trace as `.cbt` with [`CbtOptions::default`]. Refuses an invalid trace
    /// ([`Error::Invalid`]).
    pub fn write_cbt(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        self.write_cbt_with(path, &CbtOptions::default())
    }

    /// Writes the trace as `.cbt` with the given encodings and compression level. Refuses
    /// an invalid trace ([`Error::Invalid`]). The file appears whole or not at all.
    pub fn write_cbt_with(&self, path: impl AsRef<Path>, options: &CbtOptions) -> Result<(), Error> {
        let path = path.as_ref();
        self.check_before_writing(path)?;
        let bytes = binary::encode(self, options, path)?;
        write_whole(path, |out| out.write_all(&bytes))
    }

    /// Writes the trace as CSV. Refuses an invalid trace ([`Error::Invalid`]). The file
    /// appears whole or not at all.
    pub fn write_csv(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        self.check_before_writing(path)?;
        write_whole(path, |out| csv::encode(self, out))
    }

    /// Every rule of the format the trace breaks (metadata, row count, contiguous `t_ms`,
    /// value ranges, cross-column rules); empty when the trace is valid.
    pub fn validate(&self) -> Vec<Defect> {
        validate::validate(self)
    }

    /// Number of rows (1 ms subframes).
    pub fn rows(&self) -> usize {
        self.columns.t_ms.len()
    }

    /// (SFN 0..=1023, subframe 0..=9) of row `row`: SFN = (start_sfn + t_ms / 10) mod 1024,
    /// subframe = t_ms mod 10. `None` past the last row.
    pub fn sfn_subframe(&self, row: usize) -> Option<(u16, u8)> {
        let t_ms = u64::from(*self.columns.t_ms.get(row)?);
        let sfn = (u64::from(self.metadata.start_sfn) + t_ms / SUBFRAMES_PER_FRAME) % SFN_MODULUS;
        let subframe = t_ms % SUBFRAMES_PER_FRAME;
        // Both are reduced modulo 1024 and 10, so they fit.
        Some((sfn as u16, subframe as u8))
    }

    fn check_before_writing(&self, path: &Path) -> Result<(), Error> {
        let defects = self.validate();
        if defects.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid { path: path.to_path_buf(), defects })
        }
    }
}

/// Writes a file through `write` into a temporary file beside `path`, then renames it over
/// `path`, so that a reader (or a crash) never sees half a trace.
fn write_whole(path: &Path, write: impl FnOnce(&mut BufWriter<fs::File>) -> io::Result<()>) -> Result<(), Error> {
    let io_error = |source| Error::Io { path: path.to_path_buf(), source };
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(format!(".tmp-{}", std::process::id()));
    let temporary = path.with_file_name(name);
    let result = fs::File::create(&temporary).and_then(|file| {
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        out.flush()?;
        fs::rename(&temporary, path)
    });
    if result.is_err() {
        // Best effort: the temporary file may not even exist.
        let _ = fs::remove_file(&temporary);
    }
    result.map_err(io_error)
}

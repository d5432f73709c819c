//! Errors of reading and writing traces, and the defects validation finds.
//!
//! Every error names the file, and the column, header field or CSV line concerned, so a
//! person can go straight to the problem.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// One way a trace breaks a rule of the format (a range, a cross-column rule, a metadata
/// key), found by [`crate::Trace::validate`] or while reading metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Defect {
    /// The column name (`mcs`) or metadata key path (`cell.n_rb`) concerned.
    pub field: String,
    /// The first offending row (0-based, equal to its `t_ms`), for a per-row defect.
    pub row: Option<usize>,
    /// The line of the CSV file holding that row or key, when the trace was read from CSV.
    pub line: Option<usize>,
    /// What is wrong, for a person.
    pub message: String,
}

impl Defect {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Defect {
        Defect { field: field.into(), row: None, line: None, message: message.into() }
    }

    pub(crate) fn at_row(field: impl Into<String>, row: usize, message: impl Into<String>) -> Defect {
        Defect { row: Some(row), ..Defect::new(field, message) }
    }
}

impl fmt::Display for Defect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.field)?;
        if let Some(row) = self.row {
            write!(f, ", row {row}")?;
        }
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Why a trace could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system refused to read or write the file.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// Neither the `.cbt` magic nor the CSV format line, or an unknown file suffix.
    #[error("{}: not a clawbed trace: {detail}", .path.display())]
    NotATrace {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        detail: String,
    },

    /// A trace of a format version this library does not read.
    #[error("{}: format version {version} is not supported (this reader knows version 1)", .path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version the file declares.
        version: u64,
    },

    /// The `.cbt` fixed header or JSON header is malformed.
    #[error("{}: header field `{field}`: {message}", .path.display())]
    Header {
        /// The file.
        path: PathBuf,
        /// The header field, e.g. `columns[2].stored_bytes`.
        field: String,
        /// What is wrong.
        message: String,
    },

    /// A column name that format version 1 does not define (a typo must not pass silently).
    #[error("{}: {}unknown column `{column}`", .path.display(), line_prefix(.line))]
    UnknownColumn {
        /// The file.
        path: PathBuf,
        /// The name as found.
        column: String,
        /// The CSV line of the column names, when reading CSV.
        line: Option<usize>,
    },

    /// A column is missing, repeated, of the wrong dtype, or its block does not decode.
    #[error("{}: column `{column}`: {message}", .path.display())]
    Column {
        /// The file.
        path: PathBuf,
        /// The column name.
        column: String,
        /// What is wrong.
        message: String,
    },

    /// A decoded `.cbt` column block does not match the CRC-32 its header entry records.
    #[error(
        "{}: column `{column}`: CRC-32 mismatch (header says {expected:#010x}, data gives {actual:#010x}): corrupted block",
        .path.display()
    )]
    Crc {
        /// The file.
        path: PathBuf,
        /// The column name.
        column: String,
        /// CRC-32 recorded in the header.
        expected: u32,
        /// CRC-32 of the decoded bytes.
        actual: u32,
    },

    /// The `.cbt` file ends inside its header or a column block.
    #[error(
        "{}: truncated: {part} needs bytes {start}..{end} but the file has {file_len} bytes",
        .path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// `header` or `column \`name\``.
        part: String,
        /// Offset where that part starts, bytes.
        start: u64,
        /// Offset where that part should end, bytes.
        end: u64,
        /// Length of the file, bytes.
        file_len: u64,
    },

    /// Bytes follow the last column block of a `.cbt` file.
    #[error("{}: {extra} unexpected bytes after the last column block", .path.display())]
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// Number of extra bytes.
        extra: u64,
    },

    /// A CSV line that cannot be parsed.
    #[error("{}: line {line}{}: {message}", .path.display(), column_suffix(.column.as_deref()))]
    Csv {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The column concerned, if one is.
        column: Option<String>,
        /// What is wrong.
        message: String,
    },

    /// The trace parsed but breaks the format's rules; every defect found is listed.
    #[error("{}: {} defect(s): {}", .path.display(), .defects.len(), join_defects(.defects))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// All defects found.
        defects: Vec<Defect>,
    },
}

fn line_prefix(line: &Option<usize>) -> String {
    line.map(|l| format!("line {l}: ")).unwrap_or_default()
}

fn column_suffix(column: Option<&str>) -> String {
    column.map(|c| format!(", column `{c}`")).unwrap_or_default()
}

fn join_defects(defects: &[Defect]) -> String {
    defects.iter().map(Defect::to_string).collect::<Vec<_>>().join("; ")
}

//! The CSV encoding (FORMAT.md, "CSV encoding"): a format line, the metadata as one line of
//! JSON, the column names, then one row per subframe.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::num::IntErrorKind;
use std::path::Path;

use serde_json::Value;

use crate::column::{ColumnData, ColumnName, ColumnSlice, Columns, Dtype};
use crate::error::{Defect, Error};
use crate::metadata::{Metadata, FORMAT_VERSION};
use crate::Trace;

/// Line 1 of a CSV trace is this, a space, and the format version.
pub const FORMAT_LINE_PREFIX: &str = "# clawbed-trace";

/// Line of the metadata JSON.
const METADATA_LINE: usize = 2;
/// Line of the column names.
const HEADER_LINE: usize = 3;
/// Line of row 0; row `i` is on line `i + FIRST_ROW_LINE`.
const FIRST_ROW_LINE: usize = 4;

/// The line of a CSV trace a defect points at: its row's, else the column names' for a
/// defect of a whole column, else the metadata's.
pub(crate) fn line_of(defect: &Defect) -> usize {
    match defect.row {
        Some(row) => row + FIRST_ROW_LINE,
        None if ColumnName::from_name(&defect.field).is_some() => HEADER_LINE,
        None => METADATA_LINE,
    }
}

/// Parses CSV bytes (without validating the values: [`crate::Trace::read`] does that).
pub(crate) fn decode(bytes: &[u8], path: &Path) -> Result<Trace, Error> {
    let csv_error = |line: usize, column: Option<ColumnName>, message: String| Error::Csv {
        path: path.to_path_buf(),
        line,
        column: column.map(|c| c.as_str().to_string()),
        message,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        csv_error(line, None, "not valid UTF-8".into())
    })?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).zip(1..);

    let first = lines.next().map_or("", |(l, _)| l);
    let version =
        first.strip_prefix(FORMAT_LINE_PREFIX).and_then(|rest| rest.trim().parse::<u64>().ok()).ok_or_else(|| {
            Error::NotATrace {
                path: path.to_path_buf(),
                detail: format!("line 1 is not the format line `{FORMAT_LINE_PREFIX} {FORMAT_VERSION}`"),
            }
        })?;
    if version != u64::from(FORMAT_VERSION) {
        return Err(Error::UnsupportedVersion { path: path.to_path_buf(), version });
    }

    let json = lines
        .next()
        .and_then(|(l, _)| l.strip_prefix('#'))
        .ok_or_else(|| csv_error(METADATA_LINE, None, "must be `# ` followed by the metadata JSON".into()))?;
    let json: Value = serde_json::from_str(json.trim())
        .map_err(|e| csv_error(METADATA_LINE, None, format!("metadata is not valid JSON: {e}")))?;
    let metadata = Metadata::from_json(&json).map_err(|mut defects| {
        for defect in &mut defects {
            defect.line = Some(METADATA_LINE);
        }
        Error::Invalid { path: path.to_path_buf(), defects }
    })?;

    let header = lines
        .next()
        .map(|(l, _)| l)
        .filter(|l| !l.trim().is_empty())
        .ok_or_else(|| csv_error(HEADER_LINE, None, "the column names are missing".into()))?;
    let mut names: Vec<ColumnName> = Vec::new();
    for field in header.split(',').map(str::trim) {
        let name = ColumnName::from_name(field).ok_or_else(|| Error::UnknownColumn {
            path: path.to_path_buf(),
            column: field.to_string(),
            line: Some(HEADER_LINE),
        })?;
        if names.contains(&name) {
            return Err(csv_error(HEADER_LINE, Some(name), "appears twice".into()));
        }
        names.push(name);
    }
    if let Some(&missing) = ColumnName::ALL.iter().find(|c| c.is_required() && !names.contains(c)) {
        return Err(csv_error(HEADER_LINE, Some(missing), "required column is missing".into()));
    }

    // Reserve for the declared rows, but no more than the text could hold, so a wrong
    // duration_ms cannot make us allocate much.
    let capacity = (metadata.duration_ms as usize).min(text.len() / 2);
    let mut data: Vec<ColumnData> = names
        .iter()
        .map(|name| match name.dtype() {
            Dtype::U8 => ColumnData::U8(Vec::with_capacity(capacity)),
            Dtype::U32 => ColumnData::U32(Vec::with_capacity(capacity)),
            Dtype::F32 => ColumnData::F32(Vec::with_capacity(capacity)),
        })
        .collect();
    let mut blank_line = None;
    for (line, number) in lines {
        if line.trim().is_empty() {
            blank_line = blank_line.or(Some(number));
            continue;
        }
        if let Some(blank) = blank_line {
            return Err(csv_error(blank, None, "empty line among the rows".into()));
        }
        let mut fields = line.split(',');
        for (name, column) in names.iter().zip(data.iter_mut()) {
            let field = fields
                .next()
                .ok_or_else(|| csv_error(number, Some(*name), format!("expected {} fields", names.len())))?;
            push_value(column, field.trim()).map_err(|message| csv_error(number, Some(*name), message))?;
        }
        if fields.next().is_some() {
            return Err(csv_error(number, None, format!("more than the {} fields of line 3", names.len())));
        }
    }

    let mut columns = Columns::default();
    for (name, column) in names.into_iter().zip(data) {
        // Each builder was made with the column's own dtype, so `set` accepts it.
        if columns.set(name, column).is_err() {
            return Err(csv_error(HEADER_LINE, Some(name), "parsed to the wrong type".into()));
        }
    }
    Ok(Trace { metadata, columns })
}

fn push_value(column: &mut ColumnData, field: &str) -> Result<(), String> {
    match column {
        ColumnData::U8(v) => v.push(parse_unsigned(field, "u8")?),
        ColumnData::U32(v) => v.push(parse_unsigned(field, "u32")?),
        ColumnData::F32(v) => v.push(field.parse().map_err(|_| format!("`{field}` is not a number"))?),
    }
    Ok(())
}

fn parse_unsigned<T: std::str::FromStr<Err = std::num::ParseIntError>>(field: &str, dtype: &str) -> Result<T, String> {
    field.parse().map_err(|e: std::num::ParseIntError| match e.kind() {
        IntErrorKind::PosOverflow => format!("`{field}` is too large for {dtype}"),
        _ => format!("`{field}` is not a non-negative integer"),
    })
}

/// Writes `trace` as CSV: the present columns in FORMAT.md's order, floats in the
/// shortest decimal form that reads back to the same `f32`.
pub(crate) fn encode(trace: &Trace, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "{FORMAT_LINE_PREFIX} {FORMAT_VERSION}")?;
    writeln!(out, "# {}", trace.metadata.to_json())?;
    let present = trace.columns.present();
    let names: Vec<&str> = present.iter().map(|(name, _)| name.as_str()).collect();
    writeln!(out, "{}", names.join(","))?;
    let mut line = String::new();
    for row in 0..trace.rows() {
        line.clear();
        for (i, (_, column)) in present.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            // Writing into a String cannot fail.
            let _ = match column {
                ColumnSlice::U8(v) => write!(line, "{}", v[row]),
                ColumnSlice::U32(v) => write!(line, "{}", v[row]),
                ColumnSlice::F32(v) => write!(line, "{}", v[row]),
            };
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}

//! The binary encoding, `.cbt` (FORMAT.md, "Binary encoding"): a fixed 16-byte header, a
//! JSON header, then one block per column, each raw, zstd or delta-zstd, with the CRC-32 of
//! its decoded bytes in the JSON header.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use crate::column::{ColumnData, ColumnName, ColumnSlice, Columns, Dtype};
use crate::error::Error;
use crate::metadata::{Metadata, FORMAT_VERSION};
use crate::Trace;

/// The first 8 bytes of every `.cbt` file.
pub const MAGIC: [u8; 8] = *b"CBTRACE\0";

/// Magic, version, reserved and header length.
const FIXED_HEADER_LEN: usize = 16;

const HEADER_KEYS: [&str; 2] = ["metadata", "columns"];
const ENTRY_KEYS: [&str; 5] = ["name", "dtype", "encoding", "stored_bytes", "crc32"];

/// How a column block is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// The little-endian values as they are.
    Raw,
    /// A zstd frame of the raw bytes.
    Zstd,
    /// A zstd frame of the first value followed by the wrapping differences of successive
    /// values, same dtype; integer columns only.
    DeltaZstd,
}

impl Encoding {
    /// The name in the `.cbt` header: `raw`, `zstd` or `delta-zstd`.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Raw => "raw",
            Encoding::Zstd => "zstd",
            Encoding::DeltaZstd => "delta-zstd",
        }
    }

    /// The encoding called `name` in a `.cbt` header.
    pub fn from_name(name: &str) -> Option<Encoding> {
        [Encoding::Raw, Encoding::Zstd, Encoding::DeltaZstd].into_iter().find(|e| e.as_str() == name)
    }
}

/// Choices when writing a `.cbt` file.
#[derive(Debug, Clone, PartialEq)]
pub struct CbtOptions {
    /// zstd compression level (1..=22; higher is smaller and slower to write, reading speed
    /// barely changes).
    pub zstd_level: i32,
    /// Encoding per column. A column not listed is stored zstd if it is a float column and,
    /// if an integer column, zstd or delta-zstd, whichever is smaller (delta wins for
    /// `t_ms` and slowly varying columns, plain zstd for bursty ones).
    pub encodings: BTreeMap<ColumnName, Encoding>,
}

impl Default for CbtOptions {
    fn default() -> CbtOptions {
        CbtOptions { zstd_level: 3, encodings: BTreeMap::new() }
    }
}

/// The `.cbt` bytes of `trace`; `path` only names the destination in errors.
pub(crate) fn encode(trace: &Trace, options: &CbtOptions, path: &Path) -> Result<Vec<u8>, Error> {
    let mut entries = Vec::new();
    let mut blocks = Vec::new();
    for (name, slice) in trace.columns.present() {
        let column_error =
            |message: String| Error::Column { path: path.to_path_buf(), column: name.as_str().to_string(), message };
        let raw = slice.to_le_bytes();
        let crc32 = crc32fast::hash(&raw);
        let level = options.zstd_level;
        let delta_zstd = || match delta_encode(slice) {
            Some(deltas) => compress(&deltas, level),
            None => Err("delta-zstd applies to integer columns only".to_string()),
        };
        let (encoding, block) = match options.encodings.get(&name) {
            Some(Encoding::Raw) => (Encoding::Raw, raw),
            Some(Encoding::Zstd) => (Encoding::Zstd, compress(&raw, level).map_err(column_error)?),
            Some(Encoding::DeltaZstd) => (Encoding::DeltaZstd, delta_zstd().map_err(column_error)?),
            None if name.dtype() == Dtype::F32 => (Encoding::Zstd, compress(&raw, level).map_err(column_error)?),
            None => {
                let plain = compress(&raw, level).map_err(column_error)?;
                let delta = delta_zstd().map_err(column_error)?;
                if delta.len() < plain.len() {
                    (Encoding::DeltaZstd, delta)
                } else {
                    (Encoding::Zstd, plain)
                }
            }
        };
        let mut entry = Map::new();
        entry.insert("name".into(), name.as_str().into());
        entry.insert("dtype".into(), name.dtype().as_str().into());
        entry.insert("encoding".into(), encoding.as_str().into());
        entry.insert("stored_bytes".into(), block.len().into());
        entry.insert("crc32".into(), crc32.into());
        entries.push(Value::Object(entry));
        blocks.push(block);
    }
    let mut header = Map::new();
    header.insert("metadata".into(), trace.metadata.to_json());
    header.insert("columns".into(), Value::Array(entries));
    // Serialising a Value to memory cannot fail: all keys are strings.
    let header = serde_json::to_vec(&Value::Object(header)).map_err(|e| Error::Header {
        path: path.to_path_buf(),
        field: "header".into(),
        message: e.to_string(),
    })?;
    let header_len = u32::try_from(header.len()).map_err(|_| Error::Header {
        path: path.to_path_buf(),
        field: "header".into(),
        message: format!("{} bytes is too long for the u32 header length", header.len()),
    })?;

    let total = FIXED_HEADER_LEN + header.len() + blocks.iter().map(Vec::len).sum::<usize>();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&MAGIC);
    // FORMAT_VERSION is 1, well inside u16.
    out.extend_from_slice(&(FORMAT_VERSION as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(&header);
    for block in &blocks {
        out.extend_from_slice(block);
    }
    Ok(out)
}

/// A column entry of the JSON header, checked against format version 1.
struct Entry {
    name: ColumnName,
    encoding: Encoding,
    stored_bytes: u64,
    crc32: u32,
}

/// Parses `.cbt` bytes (without validating the values: [`crate::Trace::read`] does that).
pub(crate) fn decode(bytes: &[u8], path: &Path) -> Result<Trace, Error> {
    let file_len = bytes.len() as u64;
    let prefix = &bytes[..bytes.len().min(MAGIC.len())];
    if prefix != &MAGIC[..prefix.len()] || bytes.is_empty() {
        return Err(Error::NotATrace {
            path: path.to_path_buf(),
            detail: format!("the file does not start with the .cbt magic \"CBTRACE\\0\" (found {prefix:02x?})"),
        });
    }
    let truncated = |part: &str, start: u64, end: u64| Error::Truncated {
        path: path.to_path_buf(),
        part: part.to_string(),
        start,
        end,
        file_len,
    };
    if bytes.len() < FIXED_HEADER_LEN {
        return Err(truncated("fixed header", 0, FIXED_HEADER_LEN as u64));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if u32::from(version) != FORMAT_VERSION {
        return Err(Error::UnsupportedVersion { path: path.to_path_buf(), version: version.into() });
    }
    let header_error =
        |field: &str, message: String| Error::Header { path: path.to_path_buf(), field: field.to_string(), message };
    let reserved = u16::from_le_bytes([bytes[10], bytes[11]]);
    if reserved != 0 {
        return Err(header_error("reserved", format!("bytes 10..12 must be 0, found {reserved}")));
    }
    let header_len = u64::from(u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]));
    let header_end = FIXED_HEADER_LEN as u64 + header_len;
    if header_end > file_len {
        return Err(truncated("JSON header", FIXED_HEADER_LEN as u64, header_end));
    }
    // header_end ≤ file length, so it fits usize.
    let header_end = header_end as usize;
    let header: Value = serde_json::from_slice(&bytes[FIXED_HEADER_LEN..header_end])
        .map_err(|e| header_error("header", format!("invalid JSON: {e}")))?;
    let header = header.as_object().ok_or_else(|| header_error("header", "must be a JSON object".into()))?;
    if let Some(key) = header.keys().find(|k| !HEADER_KEYS.contains(&k.as_str())) {
        return Err(header_error(key, "unknown header key (expected metadata and columns)".into()));
    }
    let metadata = header.get("metadata").ok_or_else(|| header_error("metadata", "required key is missing".into()))?;
    let metadata =
        Metadata::from_json(metadata).map_err(|defects| Error::Invalid { path: path.to_path_buf(), defects })?;
    let entries = header
        .get("columns")
        .and_then(Value::as_array)
        .ok_or_else(|| header_error("columns", "must be a JSON array of column entries".into()))?;
    let entries = entries
        .iter()
        .enumerate()
        .map(|(i, entry)| parse_entry(i, entry, path))
        .collect::<Result<Vec<Entry>, Error>>()?;
    for (i, entry) in entries.iter().enumerate() {
        if entries[..i].iter().any(|e| e.name == entry.name) {
            return Err(column_error(path, entry.name, "appears twice in the header".into()));
        }
    }
    if let Some(&missing) = ColumnName::ALL.iter().find(|&&c| c.is_required() && !entries.iter().any(|e| e.name == c)) {
        return Err(column_error(path, missing, "required column is missing".into()));
    }

    let rows = metadata.duration_ms as usize;
    let mut columns = Columns::default();
    let mut offset = header_end as u64;
    for entry in &entries {
        let end = offset.saturating_add(entry.stored_bytes);
        if end > file_len {
            return Err(truncated(&format!("column `{}`", entry.name.as_str()), offset, end));
        }
        // offset ≤ end ≤ file length, so both fit usize.
        let block = &bytes[offset as usize..end as usize];
        let (data, raw_crc) =
            decode_block(entry, block, rows).map_err(|message| column_error(path, entry.name, message))?;
        if raw_crc != entry.crc32 {
            return Err(Error::Crc {
                path: path.to_path_buf(),
                column: entry.name.as_str().to_string(),
                expected: entry.crc32,
                actual: raw_crc,
            });
        }
        // decode_block produced the column's own dtype, so `set` accepts it.
        if columns.set(entry.name, data).is_err() {
            return Err(column_error(path, entry.name, "decoded to the wrong type".into()));
        }
        offset = end;
    }
    if offset < file_len {
        return Err(Error::TrailingBytes { path: path.to_path_buf(), extra: file_len - offset });
    }
    Ok(Trace { metadata, columns })
}

fn column_error(path: &Path, column: ColumnName, message: String) -> Error {
    Error::Column { path: path.to_path_buf(), column: column.as_str().to_string(), message }
}

fn parse_entry(index: usize, entry: &Value, path: &Path) -> Result<Entry, Error> {
    let field = |key: &str| format!("columns[{index}].{key}");
    let header_error = |key: &str, message: &str| Error::Header {
        path: path.to_path_buf(),
        field: field(key),
        message: message.to_string(),
    };
    let entry = entry.as_object().ok_or_else(|| Error::Header {
        path: path.to_path_buf(),
        field: format!("columns[{index}]"),
        message: "must be a JSON object".into(),
    })?;
    if let Some(key) = entry.keys().find(|k| !ENTRY_KEYS.contains(&k.as_str())) {
        return Err(header_error(key, "unknown key in a column entry"));
    }
    let text = |key: &str| entry.get(key).and_then(Value::as_str).ok_or_else(|| header_error(key, "must be a string"));
    let name_text = text("name")?;
    let name = ColumnName::from_name(name_text).ok_or_else(|| Error::UnknownColumn {
        path: path.to_path_buf(),
        column: name_text.to_string(),
        line: None,
    })?;
    let dtype = text("dtype")?;
    if dtype != name.dtype().as_str() {
        return Err(column_error(
            path,
            name,
            format!("header says dtype `{dtype}`, format version 1 says {}", name.dtype().as_str()),
        ));
    }
    let encoding_text = text("encoding")?;
    let encoding = Encoding::from_name(encoding_text).ok_or_else(|| {
        column_error(path, name, format!("unknown encoding `{encoding_text}` (raw, zstd or delta-zstd)"))
    })?;
    if encoding == Encoding::DeltaZstd && name.dtype() == Dtype::F32 {
        return Err(column_error(path, name, "delta-zstd applies to integer columns only".into()));
    }
    let stored_bytes = entry
        .get("stored_bytes")
        .and_then(Value::as_u64)
        .ok_or_else(|| header_error("stored_bytes", "must be a non-negative integer"))?;
    let crc32 = entry
        .get("crc32")
        .and_then(Value::as_u64)
        .and_then(|c| u32::try_from(c).ok())
        .ok_or_else(|| header_error("crc32", "must be an integer in 0..=4294967295"))?;
    Ok(Entry { name, encoding, stored_bytes, crc32 })
}

/// The column's values from its stored block, and the CRC-32 of their raw bytes; the error
/// says what is wrong.
fn decode_block(entry: &Entry, block: &[u8], rows: usize) -> Result<(ColumnData, u32), String> {
    let delta = entry.encoding == Encoding::DeltaZstd;
    Ok(match entry.name.dtype() {
        Dtype::U8 => {
            let (values, crc) = decode_values(entry.encoding, block, rows, delta.then_some(u8::wrapping_add))?;
            (ColumnData::U8(values), crc)
        }
        Dtype::U32 => {
            let (values, crc) = decode_values(entry.encoding, block, rows, delta.then_some(u32::wrapping_add))?;
            (ColumnData::U32(values), crc)
        }
        // parse_entry refuses delta-zstd for float columns.
        Dtype::F32 => {
            let (values, crc) = decode_values::<f32>(entry.encoding, block, rows, None)?;
            (ColumnData::F32(values), crc)
        }
    })
}

/// A column element that can be decoded in place from its little-endian bytes.
trait Element: bytemuck::Pod {
    /// The native value from one read as native but stored little-endian (a no-op on
    /// little-endian machines). Byte swapping is its own inverse, so this also turns a
    /// native value into its little-endian form.
    fn swap_le(self) -> Self;
}

impl Element for u8 {
    fn swap_le(self) -> u8 {
        self
    }
}

impl Element for u32 {
    fn swap_le(self) -> u32 {
        u32::from_le(self)
    }
}

impl Element for f32 {
    fn swap_le(self) -> f32 {
        f32::from_bits(u32::from_le(self.to_bits()))
    }
}

/// Decodes `rows` values straight into their `Vec` (no intermediate byte buffer: a one-hour
/// trace is over 100 MB decoded), undoing the delta coding with `add` if given, and returns
/// them with the CRC-32 of their little-endian bytes.
fn decode_values<T: Element>(
    encoding: Encoding,
    block: &[u8],
    rows: usize,
    add: Option<fn(T, T) -> T>,
) -> Result<(Vec<T>, u32), String> {
    let expected =
        rows.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| format!("{rows} rows do not fit in memory"))?;
    if encoding == Encoding::Raw && block.len() != expected {
        return Err(format!("raw block holds {} bytes, but duration_ms = {rows} rows need {expected}", block.len()));
    }
    if encoding != Encoding::Raw {
        // Check the frame's declared size first, so a corrupted header cannot make us
        // allocate more than the trace needs.
        match zstd::zstd_safe::get_frame_content_size(block) {
            Err(_) => return Err("block is not a zstd frame".into()),
            Ok(Some(size)) if size != expected as u64 => {
                return Err(format!("zstd frame holds {size} bytes, but duration_ms = {rows} rows need {expected}"));
            }
            Ok(_) => {}
        }
    }
    // A header may claim any duration: a size the machine cannot hold is an error, not an
    // abort.
    let mut values: Vec<T> = Vec::new();
    values.try_reserve_exact(rows).map_err(|_| format!("duration_ms = {rows} rows do not fit in memory"))?;
    values.resize(rows, T::zeroed());
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut values);
    if encoding == Encoding::Raw {
        bytes.copy_from_slice(block);
    } else {
        let written =
            zstd::bulk::decompress_to_buffer(block, bytes).map_err(|e| format!("zstd frame does not decode: {e}"))?;
        if written != expected {
            return Err(format!("zstd frame holds {written} bytes, but duration_ms = {rows} rows need {expected}"));
        }
    }
    for value in &mut values {
        *value = value.swap_le();
    }
    if let Some(add) = add {
        for i in 1..values.len() {
            values[i] = add(values[i - 1], values[i]);
        }
    }
    let crc = if cfg!(target_endian = "little") {
        crc32fast::hash(bytemuck::cast_slice(&values))
    } else {
        let mut hasher = crc32fast::Hasher::new();
        for value in &values {
            hasher.update(bytemuck::bytes_of(&value.swap_le()));
        }
        hasher.finalize()
    };
    Ok((values, crc))
}

fn compress(raw: &[u8], level: i32) -> Result<Vec<u8>, String> {
    zstd::bulk::compress(raw, level).map_err(|e| format!("zstd compression failed: {e}"))
}

/// The first value followed by wrapping differences, as little-endian bytes; `None` for a
/// float column.
fn delta_encode(slice: ColumnSlice<'_>) -> Option<Vec<u8>> {
    match slice {
        ColumnSlice::U8(v) => {
            let mut previous = 0u8;
            Some(v.iter().map(|&x| x.wrapping_sub(std::mem::replace(&mut previous, x))).collect())
        }
        ColumnSlice::U32(v) => {
            let mut previous = 0u32;
            Some(v.iter().flat_map(|&x| x.wrapping_sub(std::mem::replace(&mut previous, x)).to_le_bytes()).collect())
        }
        ColumnSlice::F32(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_round_trip_wraps() {
        let values = vec![5u8, 3, 255, 0, 0, 7];
        let deltas = delta_encode(ColumnSlice::U8(&values)).unwrap();
        assert_eq!(deltas, [5, 254, 252, 1, 0, 7]);
        let frame = compress(&deltas, 1).unwrap();
        let (decoded, crc) = decode_values(Encoding::DeltaZstd, &frame, 6, Some(u8::wrapping_add)).unwrap();
        assert_eq!((decoded, crc), (values.clone(), crc32fast::hash(&values)));

        let values = vec![0u32, 1, 2, u32::MAX, 3];
        let raw = ColumnSlice::U32(&values).to_le_bytes();
        let frame = compress(&delta_encode(ColumnSlice::U32(&values)).unwrap(), 1).unwrap();
        let (decoded, crc) = decode_values(Encoding::DeltaZstd, &frame, 5, Some(u32::wrapping_add)).unwrap();
        assert_eq!((decoded, crc), (values, crc32fast::hash(&raw)));
        assert_eq!(delta_encode(ColumnSlice::F32(&[1.0])), None);
    }

    #[test]
    fn block_length_must_match_the_rows() {
        let raw = [1u8, 2, 3];
        assert!(decode_values::<u8>(Encoding::Raw, &raw, 3, None).is_ok());
        assert!(decode_values::<u8>(Encoding::Raw, &raw, 4, None).is_err());
        let frame = compress(&raw, 1).unwrap();
        assert!(decode_values::<u8>(Encoding::Zstd, &frame, 2, None).is_err());
        assert!(decode_values::<f32>(Encoding::Zstd, &raw, 1, None).is_err());
    }

    #[test]
    fn encoding_names() {
        for e in [Encoding::Raw, Encoding::Zstd, Encoding::DeltaZstd] {
            assert_eq!(Encoding::from_name(e.as_str()), Some(e));
        }
        assert_eq!(Encoding::from_name("lz4"), None);
    }
}

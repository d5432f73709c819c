//! The chunked columnar file (`.cbcol`) that ground truth and the packet log are written in.
//!
//! A file is a header followed by self-contained chunks, each a small JSON header and one
//! zstd-compressed block per column with a CRC-32. A chunk is appended and flushed whole, so
//! a run that is killed keeps every completed chunk and a reader recognises the incomplete
//! last one by its length. The byte layout is specified in `../TRUTH_FORMAT.md`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::error::{Context, Result};

/// Magic bytes opening a `.cbcol` file.
pub const FILE_MAGIC: &[u8; 8] = b"CBCOLS\0\0";
/// Magic bytes opening each chunk.
pub const CHUNK_MAGIC: &[u8; 4] = b"CBCK";
/// Version of the container layout.
pub const FORMAT_VERSION: u16 = 1;
/// zstd level: fast enough for a background thread, and these columns compress well anyway.
const ZSTD_LEVEL: i32 = 3;

/// One column's values for the rows of a chunk.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnData {
    /// Unsigned 8-bit integers (booleans as 0/1 too).
    U8(Vec<u8>),
    /// Unsigned 16-bit integers.
    U16(Vec<u16>),
    /// Unsigned 32-bit integers.
    U32(Vec<u32>),
    /// Unsigned 64-bit integers.
    U64(Vec<u64>),
    /// Signed 64-bit integers.
    I64(Vec<i64>),
    /// IEEE 754 doubles.
    F64(Vec<f64>),
    /// Anything else: the UTF-8 text of one JSON array holding one value per row.
    Json {
        /// Number of values in the array.
        rows: usize,
        /// The array's text.
        text: Vec<u8>,
    },
}

impl ColumnData {
    /// The dtype name written in the chunk header.
    fn dtype(&self) -> &'static str {
        match self {
            ColumnData::U8(_) => "u8",
            ColumnData::U16(_) => "u16",
            ColumnData::U32(_) => "u32",
            ColumnData::U64(_) => "u64",
            ColumnData::I64(_) => "i64",
            ColumnData::F64(_) => "f64",
            ColumnData::Json { .. } => "json",
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            ColumnData::U8(v) => v.len(),
            ColumnData::U16(v) => v.len(),
            ColumnData::U32(v) => v.len(),
            ColumnData::U64(v) => v.len(),
            ColumnData::I64(v) => v.len(),
            ColumnData::F64(v) => v.len(),
            ColumnData::Json { rows, .. } => *rows,
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The decoded block: little-endian values, or the UTF-8 JSON array.
    fn to_bytes(&self) -> Vec<u8> {
        fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
            v.iter().flat_map(|&x| f(x)).collect()
        }
        match self {
            ColumnData::U8(v) => v.clone(),
            ColumnData::U16(v) => le(v, u16::to_le_bytes),
            ColumnData::U32(v) => le(v, u32::to_le_bytes),
            ColumnData::U64(v) => le(v, u64::to_le_bytes),
            ColumnData::I64(v) => le(v, i64::to_le_bytes),
            ColumnData::F64(v) => le(v, f64::to_le_bytes),
            ColumnData::Json { text, .. } => text.clone(),
        }
    }
}

/// A named column.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// Column name, e.g. `t_ms` or `ues[0].queue_bytes`.
    pub name: String,
    /// The values, one per row.
    pub data: ColumnData,
}

/// Appends chunks to a `.cbcol` file.
pub struct ChunkWriter {
    out: BufWriter<File>,
    path: PathBuf,
    chunks_written: u64,
    /// One compression context for every block: a new one per block would allocate (and
    /// the allocator map and unmap) a megabyte each time.
    compressor: zstd::bulk::Compressor<'static>,
}

impl ChunkWriter {
    /// Creates (truncates) `path` and writes the file header: `kind` (`truth` or
    /// `packets`) and `meta`, an object of run metadata merged into the header.
    pub fn create(path: &Path, kind: &str, meta: Value) -> Result<ChunkWriter> {
        let file = File::create(path).context(|| format!("creating {}", path.display()))?;
        let mut header = json!({"kind": kind, "format_version": FORMAT_VERSION});
        if let (Some(h), Value::Object(m)) = (header.as_object_mut(), meta) {
            h.extend(m);
        }
        let header = serde_json::to_vec(&header).unwrap_or_default();
        let mut out = BufWriter::new(file);
        let mut prefix = Vec::with_capacity(16);
        prefix.extend_from_slice(FILE_MAGIC);
        prefix.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        prefix.extend_from_slice(&0u16.to_le_bytes());
        prefix.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.write_all(&prefix)
            .and_then(|()| out.write_all(&header))
            .and_then(|()| out.flush())
            .context(|| format!("writing the header of {}", path.display()))?;
        let compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL)
            .context(|| format!("creating the zstd context for {}", path.display()))?;
        Ok(ChunkWriter { out, path: path.to_path_buf(), chunks_written: 0, compressor })
    }

    /// Appends one chunk of `columns` (all of the same length) and flushes it to the
    /// kernel (no fsync: a killed process loses nothing written, a power cut may).
    pub fn write_chunk(&mut self, columns: &[Column]) -> Result<()> {
        let rows = columns.first().map_or(0, |c| c.data.len());
        let mut entries = Vec::with_capacity(columns.len());
        let mut blocks = Vec::with_capacity(columns.len());
        for column in columns {
            let raw = column.data.to_bytes();
            let crc = crc32fast::hash(&raw);
            let block = self
                .compressor
                .compress(&raw)
                .context(|| format!("compressing column {} for {}", column.name, self.path.display()))?;
            entries.push(json!({
                "name": column.name,
                "dtype": column.data.dtype(),
                "encoding": "zstd",
                "stored_bytes": block.len(),
                "crc32": crc,
            }));
            blocks.push(block);
        }
        let header = serde_json::to_vec(&json!({
            "chunk_index": self.chunks_written,
            "rows": rows,
            "columns": entries,
        }))
        .unwrap_or_default();
        let mut prefix = Vec::with_capacity(12);
        prefix.extend_from_slice(CHUNK_MAGIC);
        prefix.extend_from_slice(&(header.len() as u32).to_le_bytes());
        prefix.extend_from_slice(&crc32fast::hash(&header).to_le_bytes());
        let path = &self.path;
        (|| {
            self.out.write_all(&prefix)?;
            self.out.write_all(&header)?;
            for block in &blocks {
                self.out.write_all(block)?;
            }
            self.out.flush()
        })()
        .context(|| format!("appending a chunk to {}", path.display()))?;
        self.chunks_written += 1;
        Ok(())
    }

    /// Number of chunks written so far.
    pub fn chunks_written(&self) -> u64 {
        self.chunks_written
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A decoded column: (name, dtype, raw little-endian bytes or JSON).
    pub(crate) type RawColumn = (String, String, Vec<u8>);

    /// A minimal reader of the layout in TRUTH_FORMAT.md, to check the writer against the
    /// document: returns the file header and the columns of every complete chunk.
    pub(crate) fn read(bytes: &[u8]) -> (Value, Vec<Vec<RawColumn>>) {
        assert_eq!(&bytes[..8], FILE_MAGIC);
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), FORMAT_VERSION);
        let h_len = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
        let header: Value = serde_json::from_slice(&bytes[16..16 + h_len]).expect("header JSON");
        let mut pos = 16 + h_len;
        let mut chunks = Vec::new();
        while pos + 12 <= bytes.len() {
            assert_eq!(&bytes[pos..pos + 4], CHUNK_MAGIC);
            let j = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().expect("4 bytes")) as usize;
            let crc = u32::from_le_bytes(bytes[pos + 8..pos + 12].try_into().expect("4 bytes"));
            if pos + 12 + j > bytes.len() {
                break;
            }
            let hdr = &bytes[pos + 12..pos + 12 + j];
            assert_eq!(crc32fast::hash(hdr), crc);
            let hdr: Value = serde_json::from_slice(hdr).expect("chunk JSON");
            let mut at = pos + 12 + j;
            let mut cols = Vec::new();
            let mut complete = true;
            for c in hdr["columns"].as_array().expect("columns") {
                let n = c["stored_bytes"].as_u64().expect("stored_bytes") as usize;
                if at + n > bytes.len() {
                    complete = false;
                    break;
                }
                let raw = zstd::stream::decode_all(&bytes[at..at + n]).expect("zstd");
                assert_eq!(u64::from(crc32fast::hash(&raw)), c["crc32"].as_u64().expect("crc"));
                cols.push((
                    c["name"].as_str().expect("name").to_string(),
                    c["dtype"].as_str().expect("dtype").to_string(),
                    raw,
                ));
                at += n;
            }
            if !complete {
                break;
            }
            chunks.push(cols);
            pos = at;
        }
        (header, chunks)
    }

    #[test]
    fn round_trip_and_truncation() {
        let dir = std::env::temp_dir().join(format!("cbdp-cbcol-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("t.cbcol");
        let mut w = ChunkWriter::create(&path, "truth", json!({"origin_unix_ns": 5})).expect("create");
        for k in 0..2u64 {
            w.write_chunk(&[
                Column { name: "t_ms".into(), data: ColumnData::U64(vec![k * 2, k * 2 + 1]) },
                Column { name: "x".into(), data: ColumnData::I64(vec![-1, 2]) },
                Column { name: "s".into(), data: ColumnData::Json { rows: 2, text: br#"["a",null]"#.to_vec() } },
                Column { name: "n".into(), data: ColumnData::F64(vec![1.0, f64::NAN]) },
            ])
            .expect("chunk");
        }
        drop(w);
        let bytes = std::fs::read(&path).expect("read");
        let (header, chunks) = read(&bytes);
        assert_eq!(header["kind"], "truth");
        assert_eq!(header["origin_unix_ns"], 5);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1][0].2, [2u64.to_le_bytes(), 3u64.to_le_bytes()].concat());
        assert_eq!(chunks[0][1].1, "i64");
        assert_eq!(chunks[0][2].1, "json");
        assert_eq!(chunks[0][2].2, br#"["a",null]"#);
        assert_eq!(chunks[0][3].1, "f64");
        assert_eq!(chunks[0][3].2[..8], 1f64.to_le_bytes());
        assert!(f64::from_le_bytes(chunks[0][3].2[8..].try_into().expect("8 bytes")).is_nan());
        // A run killed mid-chunk keeps the complete chunks.
        let (_, chunks) = read(&bytes[..bytes.len() - 3]);
        assert_eq!(chunks.len(), 1);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}

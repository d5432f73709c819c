//! The recorder thread: ground truth and the packet log, in chunked columnar files.
//!
//! The cell thread sends each subframe's ground-truth record and each packet event over a
//! bounded channel (when it is full the item is dropped and counted there; the cell never
//! waits). This thread turns them into columns and appends a chunk to `truth.cbcol` every
//! [`TRUTH_CHUNK_ROWS`] subframes (one second) and to `packets.cbcol` at the same moments
//! (or sooner, every [`PACKET_CHUNK_MAX_ROWS`] events), so an interrupted run keeps every
//! completed second. Formats: `../TRUTH_FORMAT.md`.

use crossbeam_channel::Receiver;
use serde::Serialize;
use serde_json::Value;

use crate::clock::{Nanos, NANOS_PER_US};
use crate::columnar::{ChunkWriter, Column, ColumnData};
use crate::error::Result;
use crate::reader::Direction;

/// Subframes per ground-truth chunk (1 s).
pub const TRUTH_CHUNK_ROWS: usize = 1000;

/// Packet events per packet-log chunk at most.
pub const PACKET_CHUNK_MAX_ROWS: usize = 1 << 16;

/// What happened to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PacketEvent {
    /// Written to the destination TUN.
    Deliver = 0,
    /// Dropped by the base-station queue (drop-tail overflow).
    DropOverflow = 1,
    /// Lost after RLC gave up.
    DropRlc = 2,
}

/// One packet-log row. Times are ns of emulated time (the same zero as `t_ms`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PacketRecord {
    /// When the event happened: the write to the TUN was issued, or the drop was decided.
    pub actual_ns: Nanos,
    /// When the write was due (equal to `actual_ns` for drops).
    pub scheduled_ns: Nanos,
    /// When the packet was read from its source TUN.
    pub arrival_ns: Nanos,
    /// The UE.
    pub ue: u16,
    /// IP packet length, bytes.
    pub bytes: u32,
    /// What happened.
    pub event: PacketEvent,
    /// Which way the packet was going.
    pub direction: Direction,
}

/// One subframe's ground truth as the cell produced it, with the data plane's timing.
#[derive(Debug)]
pub struct TruthRow<T> {
    /// Subframe number (ms since time zero).
    pub t_ms: u64,
    /// How late the cell thread woke for this subframe, ns.
    pub wake_lateness_ns: Nanos,
    /// The cell's record.
    pub truth: T,
}

/// What the cell thread sends to the recorder.
#[derive(Debug)]
pub enum Record<T> {
    /// A subframe's ground truth.
    Truth(TruthRow<T>),
    /// A packet event.
    Packet(PacketRecord),
}

/// Counters of the recorder, reported at shutdown.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecordCounters {
    /// Ground-truth rows written.
    pub truth_rows: u64,
    /// Ground-truth chunks written.
    pub truth_chunks: u64,
    /// Packet-log rows written.
    pub packet_rows: u64,
    /// Packet-log chunks written.
    pub packet_chunks: u64,
    /// Truth records that did not serialise to a JSON object (a bug in the record type).
    pub truth_serialize_errors: u64,
    /// The first write error, if writing failed (then nothing more is written).
    pub write_error: Option<String>,
}

/// Ground-truth columns being filled: every leaf of the record, by flattened name.
///
/// The record's shape (its leaves, in serialisation order) is learnt once, with names, from
/// a JSON tree; every later row only collects its leaf values in order (no names, no tree),
/// which keeps a record of many UEs cheap. A row with another number of leaves starts a new
/// chunk with a newly learnt shape.
struct TruthColumns {
    t_ms: Vec<u64>,
    wake_lateness_us: Vec<f64>,
    /// Leaf names, e.g. `ues[0].queue_bytes`.
    names: Vec<String>,
    /// Values per leaf, same order as `names`.
    values: Vec<Vec<Value>>,
    /// The current row's leaves.
    row: Vec<Value>,
}

/// What [`TruthColumns::push`] did.
#[derive(Debug, PartialEq)]
enum Push {
    /// The row was added.
    Done,
    /// The row has another shape than the chunk's: write the chunk, then push again.
    ChunkFirst,
    /// The record does not serialise (a bug in the record type).
    Failed,
}

impl TruthColumns {
    fn new() -> TruthColumns {
        TruthColumns {
            t_ms: Vec::with_capacity(TRUTH_CHUNK_ROWS),
            wake_lateness_us: Vec::with_capacity(TRUTH_CHUNK_ROWS),
            names: Vec::new(),
            values: Vec::new(),
            row: Vec::new(),
        }
    }

    fn rows(&self) -> usize {
        self.t_ms.len()
    }

    fn push<T: Serialize>(&mut self, row: &TruthRow<T>) -> Push {
        self.row.clear();
        if row.truth.serialize(leaves::Sink(&mut self.row)).is_err() {
            return Push::Failed;
        }
        if self.row.len() != self.values.len() {
            if self.rows() > 0 {
                return Push::ChunkFirst;
            }
            let Ok(tree) = serde_json::to_value(&row.truth) else { return Push::Failed };
            let mut named = Vec::with_capacity(self.row.len());
            flatten("", tree, &mut named);
            if named.len() != self.row.len() {
                return Push::Failed;
            }
            self.names = named.into_iter().map(|(name, _)| name).collect();
            self.values = self.names.iter().map(|_| Vec::with_capacity(TRUTH_CHUNK_ROWS)).collect();
        }
        self.t_ms.push(row.t_ms);
        self.wake_lateness_us.push(row.wake_lateness_ns as f64 / NANOS_PER_US as f64);
        for (column, leaf) in self.values.iter_mut().zip(self.row.drain(..)) {
            column.push(leaf);
        }
        Push::Done
    }

    /// The chunk's columns; empties the builder, keeping the learnt shape.
    fn take(&mut self) -> Vec<Column> {
        let mut columns = vec![
            Column { name: "t_ms".into(), data: ColumnData::U64(std::mem::take(&mut self.t_ms)) },
            Column {
                name: "wake_lateness_us".into(),
                data: ColumnData::F64(std::mem::take(&mut self.wake_lateness_us)),
            },
        ];
        for (name, values) in self.names.iter().zip(self.values.iter_mut()) {
            let values = std::mem::replace(values, Vec::with_capacity(TRUTH_CHUNK_ROWS));
            // The data plane's own `t_ms` column is the subframe; a `t_ms` of the record is
            // the same number and is not repeated.
            if name != "t_ms" {
                columns.push(Column { name: name.clone(), data: ColumnData::infer(values) });
            }
        }
        columns
    }
}

/// A serde serialiser that keeps only the leaf values of what it serialises, in order:
/// numbers, booleans, strings (unit enum variants too), nulls. Map keys and field names are
/// skipped; sequences, structs and maps are walked.
mod leaves {
    use serde::ser::{self, Serialize};
    use serde_json::{Error, Value};

    /// Appends leaves to the vector.
    pub struct Sink<'a>(pub &'a mut Vec<Value>);

    impl Sink<'_> {
        fn leaf(self, value: Value) -> Result<(), Error> {
            self.0.push(value);
            Ok(())
        }
    }

    macro_rules! leaf_methods {
        ($($method:ident: $ty:ty => $conv:expr;)*) => {
            $(fn $method(self, v: $ty) -> Result<(), Error> {
                #[allow(clippy::redundant_closure_call)]
                self.leaf(($conv)(v))
            })*
        };
    }

    impl<'a> ser::Serializer for Sink<'a> {
        type Ok = ();
        type Error = Error;
        type SerializeSeq = Sink<'a>;
        type SerializeTuple = Sink<'a>;
        type SerializeTupleStruct = Sink<'a>;
        type SerializeTupleVariant = Sink<'a>;
        type SerializeMap = Sink<'a>;
        type SerializeStruct = Sink<'a>;
        type SerializeStructVariant = Sink<'a>;

        leaf_methods! {
            serialize_bool: bool => Value::Bool;
            serialize_i8: i8 => |v: i8| Value::from(i64::from(v));
            serialize_i16: i16 => |v: i16| Value::from(i64::from(v));
            serialize_i32: i32 => |v: i32| Value::from(i64::from(v));
            serialize_i64: i64 => Value::from;
            serialize_u8: u8 => |v: u8| Value::from(u64::from(v));
            serialize_u16: u16 => |v: u16| Value::from(u64::from(v));
            serialize_u32: u32 => |v: u32| Value::from(u64::from(v));
            serialize_u64: u64 => Value::from;
            serialize_f32: f32 => |v: f32| Value::from(f64::from(v));
            serialize_f64: f64 => Value::from;
            serialize_char: char => |v: char| Value::String(v.to_string());
            serialize_str: &str => |v: &str| Value::String(v.to_string());
        }

        fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
            self.leaf(Value::from(v.to_vec()))
        }
        fn serialize_none(self) -> Result<(), Error> {
            self.leaf(Value::Null)
        }
        fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Error> {
            value.serialize(self)
        }
        fn serialize_unit(self) -> Result<(), Error> {
            self.leaf(Value::Null)
        }
        fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
            self.leaf(Value::Null)
        }
        fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Error> {
            self.leaf(Value::String(variant.to_string()))
        }
        fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, value: &T) -> Result<(), Error> {
            value.serialize(self)
        }
        fn serialize_newtype_variant<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            value: &T,
        ) -> Result<(), Error> {
            value.serialize(self)
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Sink<'a>, Error> {
            Ok(self)
        }
        fn serialize_tuple(self, _: usize) -> Result<Sink<'a>, Error> {
            Ok(self)
        }
        fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Sink<'a>, Error> {
            Ok(self)
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Sink<'a>, Error> {
            Ok(self)
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Sink<'a>, Error> {
            Ok(self)
        }
        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Sink<'a>, Error> {
            Ok(self)
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Sink<'a>, Error> {
            Ok(self)
        }
    }

    /// Compound values forward each element to the same sink.
    macro_rules! compound {
        ($($trait:ident :: $method:ident $(($key:ident))?;)*) => {
            $(impl ser::$trait for Sink<'_> {
                type Ok = ();
                type Error = Error;
                fn $method<T: ?Sized + Serialize>(&mut self, $($key: &'static str,)? value: &T) -> Result<(), Error> {
                    $(let _ = $key;)?
                    value.serialize(Sink(self.0))
                }
                fn end(self) -> Result<(), Error> {
                    Ok(())
                }
            })*
        };
    }

    compound! {
        SerializeSeq::serialize_element;
        SerializeTuple::serialize_element;
        SerializeTupleStruct::serialize_field;
        SerializeTupleVariant::serialize_field;
        SerializeStruct::serialize_field(key);
        SerializeStructVariant::serialize_field(key);
    }

    impl ser::SerializeMap for Sink<'_> {
        type Ok = ();
        type Error = Error;
        fn serialize_key<T: ?Sized + Serialize>(&mut self, _: &T) -> Result<(), Error> {
            Ok(())
        }
        fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
            value.serialize(Sink(self.0))
        }
        fn end(self) -> Result<(), Error> {
            Ok(())
        }
    }
}

/// Flattens a JSON value into (name, leaf) pairs: object keys joined by `.`, array
/// elements as `[i]`; e.g. `{"ues": [{"queue_bytes": 5}]}` → `ues[0].queue_bytes = 5`.
fn flatten(prefix: &str, value: Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let name = if prefix.is_empty() { k } else { format!("{prefix}.{k}") };
                flatten(&name, v, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.into_iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, out);
            }
        }
        leaf => out.push((prefix.to_string(), leaf)),
    }
}

/// Packet-log columns being filled.
#[derive(Default)]
struct PacketColumns {
    t_actual_us: Vec<i64>,
    t_scheduled_us: Vec<i64>,
    t_arrival_us: Vec<i64>,
    ue: Vec<u16>,
    bytes: Vec<u32>,
    event: Vec<u8>,
    direction: Vec<u8>,
}

impl PacketColumns {
    fn push(&mut self, p: &PacketRecord) {
        self.t_actual_us.push(p.actual_ns / NANOS_PER_US);
        self.t_scheduled_us.push(p.scheduled_ns / NANOS_PER_US);
        self.t_arrival_us.push(p.arrival_ns / NANOS_PER_US);
        self.ue.push(p.ue);
        self.bytes.push(p.bytes);
        self.event.push(p.event as u8);
        self.direction.push(p.direction as u8);
    }

    fn rows(&self) -> usize {
        self.ue.len()
    }

    fn take(&mut self) -> Vec<Column> {
        let col = |name: &str, data| Column { name: name.into(), data };
        vec![
            col("t_actual_us", ColumnData::I64(std::mem::take(&mut self.t_actual_us))),
            col("t_scheduled_us", ColumnData::I64(std::mem::take(&mut self.t_scheduled_us))),
            col("t_arrival_us", ColumnData::I64(std::mem::take(&mut self.t_arrival_us))),
            col("ue", ColumnData::U16(std::mem::take(&mut self.ue))),
            col("bytes", ColumnData::U32(std::mem::take(&mut self.bytes))),
            col("event", ColumnData::U8(std::mem::take(&mut self.event))),
            col("direction", ColumnData::U8(std::mem::take(&mut self.direction))),
        ]
    }
}

/// Writes records from `records` until it closes (the cell thread ended), then the last
/// partial chunks. A write error stops writing (counted in `write_error`) but the thread
/// keeps draining the channel so the cell thread never blocks on it.
pub fn record<T: Serialize>(
    records: Receiver<Record<T>>,
    mut truth_out: ChunkWriter,
    mut packets_out: ChunkWriter,
) -> RecordCounters {
    let mut counters = RecordCounters::default();
    let mut truth = TruthColumns::new();
    let mut packets = PacketColumns::default();
    let mut failed = false;
    let mut write =
        |writer: &mut ChunkWriter, columns: Vec<Column>, rows: usize, counters: &mut RecordCounters, is_truth: bool| {
            if failed || rows == 0 {
                return;
            }
            match writer.write_chunk(&columns) {
                Ok(()) if is_truth => {
                    counters.truth_rows += rows as u64;
                    counters.truth_chunks += 1;
                }
                Ok(()) => {
                    counters.packet_rows += rows as u64;
                    counters.packet_chunks += 1;
                }
                Err(e) => {
                    failed = true;
                    counters.write_error = Some(e.to_string());
                }
            }
        };
    for item in records.iter() {
        match item {
            Record::Truth(row) => {
                let mut pushed = truth.push(&row);
                if pushed == Push::ChunkFirst {
                    let rows = truth.rows();
                    write(&mut truth_out, truth.take(), rows, &mut counters, true);
                    pushed = truth.push(&row);
                }
                if pushed != Push::Done {
                    counters.truth_serialize_errors += 1;
                }
                if truth.rows() >= TRUTH_CHUNK_ROWS {
                    let rows = truth.rows();
                    write(&mut truth_out, truth.take(), rows, &mut counters, true);
                    let rows = packets.rows();
                    write(&mut packets_out, packets.take(), rows, &mut counters, false);
                }
            }
            Record::Packet(p) => {
                packets.push(&p);
                if packets.rows() >= PACKET_CHUNK_MAX_ROWS {
                    let rows = packets.rows();
                    write(&mut packets_out, packets.take(), rows, &mut counters, false);
                }
            }
        }
    }
    let rows = truth.rows();
    write(&mut truth_out, truth.take(), rows, &mut counters, true);
    let rows = packets.rows();
    write(&mut packets_out, packets.take(), rows, &mut counters, false);
    counters
}

/// Creates `truth.cbcol` and `packets.cbcol` in `dir` with the run metadata `meta`.
pub fn create_files(dir: &std::path::Path, meta: &Value) -> Result<(ChunkWriter, ChunkWriter)> {
    Ok((
        ChunkWriter::create(&dir.join("truth.cbcol"), "truth", meta.clone())?,
        ChunkWriter::create(&dir.join("packets.cbcol"), "packets", meta.clone())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flatten_names() {
        let mut out = Vec::new();
        flatten("", json!({"b_rbs": 3, "ues": [{"d": 1}, {"d": 2}], "x": {"y": true}}), &mut out);
        let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["b_rbs", "ues[0].d", "ues[1].d", "x.y"]);
    }

    #[derive(Serialize)]
    #[serde(rename_all = "kebab-case")]
    enum State {
        Connected,
    }

    #[derive(Serialize)]
    struct Ue {
        mcs: Option<u8>,
        state: State,
        pass: Option<bool>,
    }

    #[derive(Serialize)]
    struct Rec {
        rsrq_db: f64,
        ues: Vec<Ue>,
    }

    #[test]
    fn leaves_match_the_named_flattening() {
        let rec = Rec {
            rsrq_db: -10.5,
            ues: vec![
                Ue { mcs: None, state: State::Connected, pass: Some(true) },
                Ue { mcs: Some(3), state: State::Connected, pass: None },
            ],
        };
        let mut leaves = Vec::new();
        rec.serialize(leaves::Sink(&mut leaves)).expect("serialises");
        let mut named = Vec::new();
        flatten("", serde_json::to_value(&rec).expect("tree"), &mut named);
        assert_eq!(leaves, named.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>());
        assert_eq!(named[2], ("ues[0].state".to_string(), json!("connected")));
    }

    #[test]
    fn truth_and_packets_chunks() {
        let dir = std::env::temp_dir().join(format!("cbdp-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (t, p) = create_files(&dir, &json!({"origin_unix_ns": 1})).expect("files");
        let (tx, rx) = crossbeam_channel::unbounded();
        for k in 0..1500u64 {
            // A field that appears late is null before it in its chunk.
            // A record whose shape changes starts a new chunk.
            let truth =
                if k < 1200 { json!({"t_ms": k, "b": k, "u": [{"x": true}]}) } else { json!({"b": k, "late": "x"}) };
            tx.send(Record::Truth(TruthRow { t_ms: k, wake_lateness_ns: 2_000, truth })).expect("send");
        }
        tx.send(Record::Packet(PacketRecord {
            actual_ns: 5_000,
            scheduled_ns: 4_000,
            arrival_ns: 1_000,
            ue: 1,
            bytes: 1500,
            event: PacketEvent::Deliver,
            direction: Direction::Downlink,
        }))
        .expect("send");
        drop(tx);
        let c = record(rx, t, p);
        assert_eq!((c.truth_rows, c.truth_chunks, c.packet_rows, c.packet_chunks), (1500, 3, 1, 1));
        let (_, chunks) = crate::columnar::tests::read(&std::fs::read(dir.join("truth.cbcol")).expect("read"));
        let names = |chunk: &Vec<crate::columnar::tests::RawColumn>| -> Vec<(String, String)> {
            chunk.iter().map(|(n, d, _)| (n.clone(), d.clone())).collect()
        };
        let s = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            names(&chunks[0]),
            [s("t_ms", "u64"), s("wake_lateness_us", "f64"), s("b", "u64"), s("u[0].x", "u8")]
        );
        assert_eq!(chunks[1][0].2.len(), 200 * 8, "rows 1000..1200, cut at the change of shape");
        assert_eq!(
            names(&chunks[2]),
            [s("t_ms", "u64"), s("wake_lateness_us", "f64"), s("b", "u64"), s("late", "json")]
        );
        let (_, chunks) = crate::columnar::tests::read(&std::fs::read(dir.join("packets.cbcol")).expect("read"));
        assert_eq!(chunks[0][0].2, 5i64.to_le_bytes());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}

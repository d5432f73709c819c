//! The recorder thread: ground truth and the packet log, in chunked columnar files.
//!
//! The cell thread pushes each subframe's ground-truth record, with the packet drops it
//! decided, and the writer thread pushes batches of delivered packets, into bounded
//! lock-free queues (when one is full the item is dropped and counted by its producer;
//! neither ever waits). This thread wakes every [`RECORD_POLL`] to drain them (no wake-up
//! per item: the files are written a second at a time anyway), turns them into typed
//! columns and appends a chunk to `truth.cbcol` every [`TRUTH_CHUNK_ROWS`] subframes (one
//! second) and to `packets.cbcol` at the same moments (or sooner, every
//! [`PACKET_CHUNK_MAX_ROWS`] events), so an interrupted run keeps every completed second.
//! Formats: `../TRUTH_FORMAT.md`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use serde::Serialize;
use serde_json::Value;

use crate::clock::{Nanos, NANOS_PER_US};
use crate::columnar::{ChunkWriter, Column, ColumnData};
use crate::error::Result;
use crate::handover::Handover;
use crate::reader::Direction;

/// Subframes per ground-truth chunk (1 s).
pub const TRUTH_CHUNK_ROWS: usize = 1000;

/// Packet events per packet-log chunk at most.
pub const PACKET_CHUNK_MAX_ROWS: usize = 1 << 16;

/// How often the recorder drains its queues.
pub const RECORD_POLL: Duration = Duration::from_millis(20);

/// Subframe records the queue holds (4 s: the recorder may stall on a slow disk).
pub const SUBFRAME_QUEUE_ROWS: usize = 4096;

/// Delivery batches the queue holds (the writer hands one over about every subframe).
pub const DELIVERY_QUEUE_BATCHES: usize = 4096;

/// Packet-log rows per batch a producer collects at most (a batch's buffer stays below
/// glibc's 128 KiB `mmap` threshold, so recycling it never unmaps memory).
pub const PACKET_BATCH_ROWS: usize = 1024;

/// Emptied buffers kept for reuse, per kind.
const SPARES: usize = 64;

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
    /// Dropped by a scripted drop event (`events`, kind `drop`).
    DropEvent = 3,
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

/// One subframe from the cell thread: the cell's ground truth with the data plane's
/// timing, and the drops decided since the previous one.
#[derive(Debug)]
pub struct SubframeRecord<T> {
    /// Subframe number (ms since time zero).
    pub t_ms: u64,
    /// How late the cell thread woke for this subframe, ns.
    pub wake_lateness_ns: Nanos,
    /// The cell's record.
    pub truth: T,
    /// Packet drops (overflow, RLC loss) decided since the previous subframe record.
    pub drops: Vec<PacketRecord>,
}

/// The queues into the recorder, and back: the recorder returns emptied records and
/// batches, so the real-time threads that produce them allocate nothing in steady state
/// (an allocation can wait on a lock held by a descheduled thread).
#[derive(Debug)]
pub struct RecordQueues<T> {
    /// One record per subframe, from the cell thread.
    pub subframes: ArrayQueue<SubframeRecord<T>>,
    /// Batches of delivered packets, from the writer thread.
    pub deliveries: ArrayQueue<Vec<PacketRecord>>,
    /// Truth records done with (their vectors keep their capacity). The spares go back to
    /// real-time threads, which must never wait for this one (`crate::handover`).
    spare_truth: Handover<T>,
    /// Empty packet-log batches.
    spare_batches: Handover<Vec<PacketRecord>>,
    done: AtomicBool,
}

impl<T> RecordQueues<T> {
    /// Empty queues of the default sizes.
    pub fn new() -> RecordQueues<T> {
        RecordQueues {
            subframes: ArrayQueue::new(SUBFRAME_QUEUE_ROWS),
            deliveries: ArrayQueue::new(DELIVERY_QUEUE_BATCHES),
            spare_truth: Handover::new(SPARES),
            spare_batches: Handover::new(SPARES),
            done: AtomicBool::new(false),
        }
    }

    /// A truth record to fill, reused if one came back.
    pub fn truth_record(&self) -> Option<T> {
        self.spare_truth.pop()
    }

    /// An empty packet-log batch with room for [`PACKET_BATCH_ROWS`], reused if possible.
    pub fn batch(&self) -> Vec<PacketRecord> {
        self.spare_batches.pop().unwrap_or_else(|| Vec::with_capacity(PACKET_BATCH_ROWS))
    }

    /// Keeps `batch` for reuse (emptied), or frees it if enough are kept.
    fn recycle(&self, mut batch: Vec<PacketRecord>) {
        if batch.capacity() > 0 {
            batch.clear();
            let _ = self.spare_batches.push(batch);
        }
    }

    /// Both producers have ended: the recorder drains what is left and ends.
    pub fn close(&self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

impl<T> Default for RecordQueues<T> {
    fn default() -> RecordQueues<T> {
        RecordQueues::new()
    }
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
    /// Truth records that did not serialise to leaves (a bug in the record type).
    pub truth_serialize_errors: u64,
    /// The first write error, if writing failed (then nothing more is written).
    pub write_error: Option<String>,
}

/// One leaf value of a truth record, as collected per row: typed, small, no allocation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Leaf {
    /// A boolean.
    Bool(bool),
    /// A non-negative integer.
    U64(u64),
    /// A negative integer.
    I64(i64),
    /// A float.
    F64(f64),
    /// A null (`None`, unit).
    Null,
    /// A string: its index in the recorder's [`Texts`].
    Text(u32),
}

impl Leaf {
    /// A signed integer, as `U64` when it is not negative (as serde_json numbers are).
    fn int(v: i64) -> Leaf {
        u64::try_from(v).map_or(Leaf::I64(v), Leaf::U64)
    }

    /// A float; a NaN or infinity is a null (JSON has none).
    fn float(v: f64) -> Leaf {
        if v.is_finite() {
            Leaf::F64(v)
        } else {
            Leaf::Null
        }
    }
}

/// The strings leaves have held (RRC states and the like: a handful), by index.
#[derive(Debug, Default)]
pub struct Texts(Vec<String>);

impl Texts {
    /// The index of `text`, added if new.
    fn index_of(&mut self, text: &str) -> u32 {
        match self.0.iter().position(|t| t == text) {
            Some(i) => i as u32,
            None => {
                self.0.push(text.to_string());
                (self.0.len() - 1) as u32
            }
        }
    }

    fn get(&self, index: u32) -> &str {
        self.0.get(index as usize).map_or("", String::as_str)
    }
}

/// The narrowest column holding a chunk's `values` of one leaf: all booleans → u8; all
/// non-negative integers → u64; all integers → i64; numbers and booleans, with or without
/// nulls (not all null) → f64 (true 1, false 0, null NaN); anything else (strings, all
/// nulls) → a JSON array.
fn column_of(values: &[Leaf], texts: &Texts) -> ColumnData {
    let all = |f: fn(&Leaf) -> bool| values.iter().all(f);
    if all(|v| matches!(v, Leaf::Bool(_))) {
        return ColumnData::U8(values.iter().map(|v| u8::from(*v == Leaf::Bool(true))).collect());
    }
    if all(|v| matches!(v, Leaf::U64(_))) {
        return ColumnData::U64(values.iter().map(|v| if let Leaf::U64(x) = v { *x } else { 0 }).collect());
    }
    let as_i64 = |v: &Leaf| match *v {
        Leaf::U64(x) => i64::try_from(x).ok(),
        Leaf::I64(x) => Some(x),
        _ => None,
    };
    if let Some(ints) = values.iter().map(as_i64).collect::<Option<Vec<i64>>>() {
        return ColumnData::I64(ints);
    }
    let as_f64 = |v: &Leaf| match *v {
        Leaf::Bool(b) => Some(f64::from(u8::from(b))),
        Leaf::U64(x) => Some(x as f64),
        Leaf::I64(x) => Some(x as f64),
        Leaf::F64(x) => Some(x),
        Leaf::Null => Some(f64::NAN),
        Leaf::Text(_) => None,
    };
    if !all(|v| *v == Leaf::Null) {
        if let Some(floats) = values.iter().map(as_f64).collect::<Option<Vec<f64>>>() {
            return ColumnData::F64(floats);
        }
    }
    let mut json = Vec::with_capacity(values.len() * 8 + 2);
    json.push(b'[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            json.push(b',');
        }
        // Writing JSON scalars into a Vec cannot fail.
        let _ = match *v {
            Leaf::Bool(b) => serde_json::to_writer(&mut json, &b),
            Leaf::U64(x) => serde_json::to_writer(&mut json, &x),
            Leaf::I64(x) => serde_json::to_writer(&mut json, &x),
            Leaf::F64(x) => serde_json::to_writer(&mut json, &x),
            Leaf::Null => serde_json::to_writer(&mut json, &()),
            Leaf::Text(t) => serde_json::to_writer(&mut json, texts.get(t)),
        };
    }
    json.push(b']');
    ColumnData::Json { rows: values.len(), text: json }
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
    values: Vec<Vec<Leaf>>,
    /// The current row's leaves.
    row: Vec<Leaf>,
    texts: Texts,
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
            texts: Texts::default(),
        }
    }

    fn rows(&self) -> usize {
        self.t_ms.len()
    }

    fn push<T: Serialize>(&mut self, row: &SubframeRecord<T>) -> Push {
        self.row.clear();
        if row.truth.serialize(leaves::Sink(&mut self.row, &mut self.texts)).is_err() {
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
            // The data plane's own `t_ms` column is the subframe; a `t_ms` of the record is
            // the same number and is not repeated.
            if name != "t_ms" {
                columns.push(Column { name: name.clone(), data: column_of(values, &self.texts) });
            }
            values.clear();
        }
        columns
    }
}

/// A serde serialiser that keeps only the leaf values of what it serialises, in order:
/// numbers, booleans, strings (unit enum variants too), nulls, as [`Leaf`]s (no JSON tree,
/// no allocation once the vectors have grown). Map keys and field names are skipped;
/// sequences, structs and maps are walked.
mod leaves {
    use serde::ser::{self, Serialize};
    use serde_json::Error;

    use super::{Leaf, Texts};

    /// Appends leaves to the vector; strings go to the text table.
    pub struct Sink<'a>(pub &'a mut Vec<Leaf>, pub &'a mut Texts);

    impl Sink<'_> {
        fn leaf(self, value: Leaf) -> Result<(), Error> {
            self.0.push(value);
            Ok(())
        }

        fn text(self, text: &str) -> Result<(), Error> {
            let index = self.1.index_of(text);
            self.leaf(Leaf::Text(index))
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
            serialize_bool: bool => Leaf::Bool;
            serialize_i8: i8 => |v: i8| Leaf::int(i64::from(v));
            serialize_i16: i16 => |v: i16| Leaf::int(i64::from(v));
            serialize_i32: i32 => |v: i32| Leaf::int(i64::from(v));
            serialize_i64: i64 => Leaf::int;
            serialize_u8: u8 => |v: u8| Leaf::U64(u64::from(v));
            serialize_u16: u16 => |v: u16| Leaf::U64(u64::from(v));
            serialize_u32: u32 => |v: u32| Leaf::U64(u64::from(v));
            serialize_u64: u64 => Leaf::U64;
            serialize_f32: f32 => |v: f32| Leaf::float(f64::from(v));
            serialize_f64: f64 => Leaf::float;
        }

        fn serialize_char(self, v: char) -> Result<(), Error> {
            self.text(v.encode_utf8(&mut [0u8; 4]))
        }
        fn serialize_str(self, v: &str) -> Result<(), Error> {
            self.text(v)
        }
        fn serialize_bytes(self, _: &[u8]) -> Result<(), Error> {
            Err(ser::Error::custom("byte strings are not truth leaves"))
        }
        fn serialize_none(self) -> Result<(), Error> {
            self.leaf(Leaf::Null)
        }
        fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Error> {
            value.serialize(self)
        }
        fn serialize_unit(self) -> Result<(), Error> {
            self.leaf(Leaf::Null)
        }
        fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
            self.leaf(Leaf::Null)
        }
        fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Error> {
            self.text(variant)
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
                    value.serialize(Sink(self.0, self.1))
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
            value.serialize(Sink(self.0, self.1))
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

    fn push_all(&mut self, records: &[PacketRecord]) {
        for p in records {
            self.push(p);
        }
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

/// Writes what the queues bring until they are closed and drained (the cell thread and
/// the writer ended), then the last partial chunks. When `flush` is set (SIGRTMIN), the
/// partial chunks are written after the next drain, and the flag cleared. A write error
/// stops writing (counted in `write_error`) but the thread keeps draining so its producers
/// never find a full queue.
pub fn record<T: Serialize>(
    queues: Arc<RecordQueues<T>>,
    mut truth_out: ChunkWriter,
    mut packets_out: ChunkWriter,
    flush: &AtomicBool,
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
    loop {
        // Read before draining: whatever was pushed before the close is drained below.
        let done = queues.done.load(Ordering::SeqCst);
        while let Some(mut row) = queues.subframes.pop() {
            let mut pushed = truth.push(&row);
            if pushed == Push::ChunkFirst {
                let rows = truth.rows();
                write(&mut truth_out, truth.take(), rows, &mut counters, true);
                pushed = truth.push(&row);
            }
            if pushed != Push::Done {
                counters.truth_serialize_errors += 1;
            }
            packets.push_all(&row.drops);
            queues.recycle(std::mem::take(&mut row.drops));
            let _ = queues.spare_truth.push(row.truth);
            if truth.rows() >= TRUTH_CHUNK_ROWS {
                let rows = truth.rows();
                write(&mut truth_out, truth.take(), rows, &mut counters, true);
                let rows = packets.rows();
                write(&mut packets_out, packets.take(), rows, &mut counters, false);
            }
        }
        while let Some(batch) = queues.deliveries.pop() {
            packets.push_all(&batch);
            queues.recycle(batch);
            if packets.rows() >= PACKET_CHUNK_MAX_ROWS {
                let rows = packets.rows();
                write(&mut packets_out, packets.take(), rows, &mut counters, false);
            }
        }
        if done {
            break;
        }
        if flush.swap(false, Ordering::SeqCst) {
            let rows = truth.rows();
            write(&mut truth_out, truth.take(), rows, &mut counters, true);
            let rows = packets.rows();
            write(&mut packets_out, packets.take(), rows, &mut counters, false);
        }
        std::thread::sleep(RECORD_POLL);
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
        let (mut leaves, mut texts) = (Vec::new(), Texts::default());
        rec.serialize(leaves::Sink(&mut leaves, &mut texts)).expect("serialises");
        let mut named = Vec::new();
        flatten("", serde_json::to_value(&rec).expect("tree"), &mut named);
        assert_eq!(leaves.len(), named.len());
        assert_eq!(
            leaves,
            [Leaf::F64(-10.5), Leaf::Null, Leaf::Text(0), Leaf::Bool(true), Leaf::U64(3), Leaf::Text(0), Leaf::Null]
        );
        assert_eq!(named[2], ("ues[0].state".to_string(), json!("connected")));
        assert_eq!(texts.get(0), "connected");
    }

    #[test]
    fn column_types_follow_the_values() {
        let texts = Texts(vec!["a".into()]);
        let col = |v: &[Leaf]| column_of(v, &texts);
        assert_eq!(col(&[Leaf::Bool(true), Leaf::Bool(false)]), ColumnData::U8(vec![1, 0]));
        assert_eq!(col(&[Leaf::U64(1), Leaf::U64(2)]), ColumnData::U64(vec![1, 2]));
        assert_eq!(col(&[Leaf::U64(1), Leaf::I64(-2)]), ColumnData::I64(vec![1, -2]));
        assert_eq!(col(&[Leaf::F64(0.5), Leaf::U64(2)]), ColumnData::F64(vec![0.5, 2.0]));
        let ColumnData::F64(v) = col(&[Leaf::Bool(true), Leaf::Null]) else { panic!("nullable → f64") };
        assert!(v[0] == 1.0 && v[1].is_nan());
        assert_eq!(col(&[Leaf::Text(0), Leaf::Null]), ColumnData::Json { rows: 2, text: br#"["a",null]"#.to_vec() });
        assert_eq!(col(&[Leaf::Null, Leaf::Null]), ColumnData::Json { rows: 2, text: b"[null,null]".to_vec() });
        assert_eq!(col(&[Leaf::U64(u64::MAX), Leaf::I64(-1)]), ColumnData::F64(vec![u64::MAX as f64, -1.0]));
    }

    #[test]
    fn a_flush_writes_the_partial_chunk_at_once() {
        let dir = std::env::temp_dir().join(format!("cbdp-flush-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (t, p) = create_files(&dir, &json!({"origin_unix_ns": 1})).expect("files");
        let queues = Arc::new(RecordQueues::new());
        let flush = Arc::new(AtomicBool::new(false));
        let recorder = {
            let (queues, flush) = (Arc::clone(&queues), Arc::clone(&flush));
            std::thread::spawn(move || record(queues, t, p, &flush))
        };
        for k in 0..300u64 {
            let row = SubframeRecord { t_ms: k, wake_lateness_ns: 0, truth: json!({"t_ms": k}), drops: Vec::new() };
            queues.subframes.push(row).map_err(|_| "full").expect("room");
        }
        flush.store(true, Ordering::SeqCst);
        // 300 rows, a third of a chunk: on disk once the recorder took the flag.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let chunks = loop {
            let (_, chunks) = crate::columnar::tests::read(&std::fs::read(dir.join("truth.cbcol")).expect("read"));
            if !chunks.is_empty() || std::time::Instant::now() > deadline {
                break chunks;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0][0].2.len(), 300 * 8, "t_ms of rows 0..300");
        assert!(!flush.load(Ordering::SeqCst), "the flag is taken");
        queues.close();
        let c = recorder.join().expect("recorder");
        assert_eq!((c.truth_rows, c.truth_chunks), (300, 1));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn truth_and_packets_chunks() {
        let dir = std::env::temp_dir().join(format!("cbdp-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (t, p) = create_files(&dir, &json!({"origin_unix_ns": 1})).expect("files");
        let queues = Arc::new(RecordQueues::new());
        let recorder = {
            let queues = Arc::clone(&queues);
            std::thread::spawn(move || record(queues, t, p, &AtomicBool::new(false)))
        };
        let drop = PacketRecord {
            actual_ns: 5_000,
            scheduled_ns: 5_000,
            arrival_ns: 1_000,
            ue: 1,
            bytes: 1500,
            event: PacketEvent::DropOverflow,
            direction: Direction::Downlink,
        };
        for k in 0..1500u64 {
            // A record whose shape changes starts a new chunk.
            let truth =
                if k < 1200 { json!({"t_ms": k, "b": k, "u": [{"x": true}]}) } else { json!({"b": k, "late": "x"}) };
            let drops = if k == 3 { vec![drop] } else { Vec::new() };
            let mut row = SubframeRecord { t_ms: k, wake_lateness_ns: 2_000, truth, drops };
            while let Err(back) = queues.subframes.push(row) {
                row = back;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        queues.deliveries.push(vec![PacketRecord { event: PacketEvent::Deliver, ..drop }]).expect("room");
        queues.close();
        let c = recorder.join().expect("recorder");
        assert_eq!((c.truth_rows, c.truth_chunks, c.packet_rows), (1500, 3, 2));
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
        let rows: usize = chunks.iter().map(|c| c[0].2.len() / 8).sum();
        assert_eq!(rows, 2, "the drop and the delivery");
        assert_eq!(chunks[0][0].2, 5i64.to_le_bytes());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}

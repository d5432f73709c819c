//! The diag feed: per UE, JSON Lines over TCP inside the UE's namespace, and a file.
//!
//! The cell thread hands each subframe's records to this module's thread through a bounded
//! channel and never waits for it: when the channel is full the subframe's records are
//! dropped and counted. This thread serialises each record once, appends the line to the
//! UE's file (buffered, flushed at least every [`FILE_FLUSH_INTERVAL`]) and to every
//! subscriber's bounded buffer; a subscriber whose buffer overflows (it reads too slowly) is
//! disconnected and counted, so one slow reader never delays the others or the cell.
//! The transport is documented in `../DIAG_FEED.md`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use cell::DiagRecord;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde::Serialize;

use crate::error::{is_transient, Context, Result};
use crate::netns::Namespace;

/// How often the diag files are flushed at least.
pub const FILE_FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Bytes a subscriber may fall behind before it is disconnected (about 2 s of one UE's
/// records).
pub const SUBSCRIBER_BUFFER_BYTES: usize = 4 << 20;

/// How long the thread waits for records before it looks at new connections anyway.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// One subframe's diag records, one per UE, as the cell thread hands them over.
#[derive(Debug)]
pub struct DiagBatch<R> {
    /// Unix time of the subframe's start, s.
    pub timestamp_s: f64,
    /// The subframe (ms since time zero).
    pub t_ms: u64,
    /// The records, one per UE.
    pub records: Vec<R>,
}

/// Counters of the diag feed, reported at shutdown.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DiagCounters {
    /// Lines written, per UE.
    pub lines: Vec<u64>,
    /// Subscribers that connected, per UE.
    pub subscribers_accepted: Vec<u64>,
    /// Subscribers disconnected because they fell [`SUBSCRIBER_BUFFER_BYTES`] behind, per UE.
    pub subscribers_dropped_slow: Vec<u64>,
    /// Records that could not be serialised (a bug in a record type), all UEs.
    pub serialize_errors: u64,
}

struct Subscriber {
    stream: TcpStream,
    pending: Vec<u8>,
    /// Bytes of `pending` already sent.
    sent: usize,
}

impl Subscriber {
    /// Sends what the socket takes now. `Err` when the peer is gone.
    fn pump(&mut self) -> io::Result<()> {
        while self.sent < self.pending.len() {
            match self.stream.write(&self.pending[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if is_transient(&e) => break,
                Err(e) => return Err(e),
            }
        }
        if self.sent == self.pending.len() {
            self.pending.clear();
            self.sent = 0;
        }
        Ok(())
    }

    fn backlog_bytes(&self) -> usize {
        self.pending.len() - self.sent
    }
}

/// One UE's feed: its listener, subscribers and file.
struct Feed {
    listener: TcpListener,
    subscribers: Vec<Subscriber>,
    file: BufWriter<File>,
}

impl Feed {
    /// Appends a line to the file and to every subscriber's buffer.
    fn push_line(&mut self, line: &[u8]) {
        // A failing file write (disk full) must not stop the live feed; the counters show
        // the lines produced, the file what it could keep.
        let _ = self.file.write_all(line);
        for sub in &mut self.subscribers {
            sub.pending.extend_from_slice(line);
        }
    }
}

/// The diag messages are different types; this lets one closure serialise any of them.
mod erased {
    /// A serialisable diag message.
    pub trait Message {
        /// Appends the message's JSON to `out`.
        fn write_to(&self, out: &mut Vec<u8>) -> serde_json::Result<()>;
    }

    impl<T: serde::Serialize> Message for T {
        fn write_to(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
            serde_json::to_writer(out, self)
        }
    }
}

/// The listening sockets and files of every UE's feed, created before the emulator
/// reports ready.
pub struct DiagServer {
    feeds: Vec<Feed>,
}

/// Where one UE's feed listens.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DiagEndpoint {
    /// TCP port on 127.0.0.1 inside the UE's namespace.
    pub port: u16,
}

impl DiagServer {
    /// Binds 127.0.0.1:`port` inside each UE's namespace (port 0: any free port) and
    /// creates `diag-ue<N>.jsonl` in `output_dir`. `ues` pairs each UE's namespace with its
    /// port.
    pub fn bind(ues: &[(&Namespace, u16)], output_dir: &Path) -> Result<(DiagServer, Vec<DiagEndpoint>)> {
        let mut feeds = Vec::with_capacity(ues.len());
        let mut endpoints = Vec::with_capacity(ues.len());
        for (i, &(ns, port)) in ues.iter().enumerate() {
            let listener = ns.run_in(|| {
                crate::tun::bring_up_loopback(ns)?;
                TcpListener::bind((Ipv4Addr::LOCALHOST, port))
                    .context(|| format!("listening for the UE {i} diag feed on 127.0.0.1:{port} in namespace {ns}"))
            })?;
            listener.set_nonblocking(true).context(|| format!("making the UE {i} diag listener non-blocking"))?;
            let port = listener.local_addr().context(|| format!("reading the UE {i} diag port"))?.port();
            let path = output_dir.join(format!("diag-ue{i}.jsonl"));
            let file = File::create(&path).context(|| format!("creating {}", path.display()))?;
            feeds.push(Feed { listener, subscribers: Vec::new(), file: BufWriter::with_capacity(1 << 16, file) });
            endpoints.push(DiagEndpoint { port });
        }
        Ok((DiagServer { feeds }, endpoints))
    }

    /// Serves until `batches` is closed (the cell thread ended): accepts subscribers, writes
    /// lines. `LTE_RLC_DL_Stats` and `LTE_PDCP_DL_Stats` go out every `stats_period_ms`
    /// subframes. Returns the counters after flushing the files.
    pub fn serve(mut self, batches: Receiver<DiagBatch<DiagRecord>>, stats_period_ms: u64) -> DiagCounters {
        let n = self.feeds.len();
        let mut counters = DiagCounters {
            lines: vec![0; n],
            subscribers_accepted: vec![0; n],
            subscribers_dropped_slow: vec![0; n],
            serialize_errors: 0,
        };
        let mut line = Vec::with_capacity(4096);
        let mut last_flush = Instant::now();
        let mut last_accept = Instant::now();
        let mut publish = |feeds: &mut Vec<Feed>, batch: DiagBatch<DiagRecord>, counters: &mut DiagCounters| {
            let with_stats = batch.t_ms % stats_period_ms.max(1) == 0;
            for record in &batch.records {
                let ue = record.ue.index();
                let Some(feed) = feeds.get_mut(ue) else { continue };
                let mut emit = |message: &dyn erased::Message| {
                    line.clear();
                    if write_line(&mut line, batch.timestamp_s, message).is_err() {
                        counters.serialize_errors += 1;
                        return;
                    }
                    counters.lines[ue] += 1;
                    feed.push_line(&line);
                };
                emit(&record.pdsch);
                // A phone reports a measurement when it makes one (every `rsrq.hold_ms`).
                if record.measurement_updated {
                    emit(&record.serv_cell);
                }
                emit(&record.mac);
                if with_stats {
                    emit(&record.rlc);
                    emit(&record.pdcp);
                }
            }
        };
        loop {
            // New subscribers are looked for every poll interval, not at every batch: an
            // `accept` per UE per subframe would cost more than the feed itself.
            if last_accept.elapsed() >= POLL_INTERVAL {
                self.accept_all(&mut counters);
                last_accept = Instant::now();
            }
            match batches.recv_timeout(POLL_INTERVAL) {
                Ok(batch) => publish(&mut self.feeds, batch, &mut counters),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            // Drain whatever else is waiting before touching the sockets again.
            while let Ok(batch) = batches.try_recv() {
                publish(&mut self.feeds, batch, &mut counters);
            }
            self.pump_all(&mut counters);
            if last_flush.elapsed() >= FILE_FLUSH_INTERVAL {
                self.flush_files();
                last_flush = Instant::now();
            }
        }
        self.flush_files();
        counters
    }

    fn accept_all(&mut self, counters: &mut DiagCounters) {
        for (ue, feed) in self.feeds.iter_mut().enumerate() {
            while let Ok((stream, _)) = feed.listener.accept() {
                // A subscriber that cannot be made non-blocking could stall the feed: refuse it.
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                // Lines are small and time-critical: send each at once.
                let _ = stream.set_nodelay(true);
                feed.subscribers.push(Subscriber { stream, pending: Vec::new(), sent: 0 });
                counters.subscribers_accepted[ue] += 1;
            }
        }
    }

    fn pump_all(&mut self, counters: &mut DiagCounters) {
        for (ue, feed) in self.feeds.iter_mut().enumerate() {
            feed.subscribers.retain_mut(|sub| {
                if sub.pump().is_err() {
                    return false;
                }
                if sub.backlog_bytes() > SUBSCRIBER_BUFFER_BYTES {
                    counters.subscribers_dropped_slow[ue] += 1;
                    return false;
                }
                true
            });
        }
    }

    fn flush_files(&mut self) {
        for feed in &mut self.feeds {
            let _ = feed.file.flush();
        }
    }
}

/// Serialises `message` as one line: `{"type_id": ..., "timestamp": <s>, ...fields}\n`.
/// The message's own serialisation gives `type_id` (first) and the fields; `timestamp` is
/// spliced in after `type_id`, which avoids building a JSON tree for every message.
fn write_line(line: &mut Vec<u8>, timestamp_s: f64, message: &dyn erased::Message) -> serde_json::Result<()> {
    const HEAD: &[u8] = b"{\"type_id\":\"";
    message.write_to(line)?;
    // `type_id` values are plain names (no quote, no escape), so the first quote after the
    // head closes the value.
    let type_id_end = line.starts_with(HEAD).then(|| line[HEAD.len()..].iter().position(|&b| b == b'"')).flatten();
    match type_id_end {
        Some(end) => {
            let at = HEAD.len() + end + 1;
            let stamp = format!(
                ",\"timestamp\":{}",
                serde_json::Number::from_f64(timestamp_s).map_or("null".into(), |n| n.to_string())
            );
            line.splice(at..at, stamp.into_bytes());
        }
        None => {
            // Not shaped like a diag message: rebuild it with the timestamp in front.
            let mut value: serde_json::Value = serde_json::from_slice(line)?;
            if let Some(object) = value.as_object_mut() {
                object.shift_insert(0, "timestamp".into(), timestamp_s.into());
            }
            line.clear();
            serde_json::to_writer(&mut *line, &value)?;
        }
    }
    line.push(b'\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Msg {
        type_id: &'static str,
        #[serde(rename = "Num RBs")]
        num_rbs: u8,
    }

    #[derive(Serialize)]
    struct Other {
        #[serde(rename = "Num RBs")]
        num_rbs: u8,
    }

    #[test]
    fn a_message_without_type_id_gets_the_timestamp_first() {
        let mut line = Vec::new();
        write_line(&mut line, 2.0, &Other { num_rbs: 1 }).expect("serialises");
        assert_eq!(String::from_utf8(line).expect("utf8"), "{\"timestamp\":2.0,\"Num RBs\":1}\n");
    }

    #[test]
    fn line_puts_type_id_and_timestamp_first() {
        let mut line = Vec::new();
        write_line(&mut line, 1.5, &Msg { type_id: "LTE_PHY_PDSCH_Stat_Indication", num_rbs: 7 }).expect("serialises");
        assert_eq!(
            String::from_utf8(line).expect("utf8"),
            "{\"type_id\":\"LTE_PHY_PDSCH_Stat_Indication\",\"timestamp\":1.5,\"Num RBs\":7}\n"
        );
    }
}

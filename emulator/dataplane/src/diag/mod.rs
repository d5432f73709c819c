//! The diag feed: per UE, JSON Lines over TCP inside the UE's namespace, and a file.
//!
//! The cell thread hands each subframe's records to this module's thread through a bounded
//! lock-free queue and never waits for it: when the queue is full the subframe's records
//! are dropped and counted. It hands them over only when someone wants them: a subscriber
//! is connected or the diag files are on (`diag.file`); otherwise the records are not even
//! queued. With a subscriber it also rings an eventfd, so this thread sends each subframe's
//! lines at once; without one it wakes every [`FILE_POLL`] to write the files.
//!
//! This thread serialises each record once, straight from the typed record ([`lines`]),
//! appends the line to the UE's file (buffered, flushed at least every
//! [`FILE_FLUSH_INTERVAL`]) and to every subscriber's bounded buffer; a subscriber whose
//! buffer overflows (it reads too slowly) is disconnected and counted, so one slow reader
//! never delays the others or the cell. The transport is documented in `../DIAG_FEED.md`.
//!
//! With the phone's feed timing (`diag.feed_timing = "phone"`, the default; [`phone`]) the
//! lines and frames for subscribers and the pty are held and go out in packets, as a phone's
//! diag port delivers; the files get every subframe as it comes.

pub mod lines;
pub mod mi2log;
pub mod phone;
mod pty;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cell::DiagRecord;
use crossbeam_queue::ArrayQueue;
use serde::Serialize;

use crate::error::{is_transient, Context, Result};
use crate::handover::Handover;
use crate::netns::Namespace;
use crate::sys;

use self::mi2log::{Mi2logConfig, Mi2logCounters, Mi2logEndpoint, Mi2logFeed};
use self::phone::{Packer, PhoneTiming};

/// How often the diag files are flushed at least.
pub const FILE_FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// How often the thread drains the queue for the files when no subscriber rings it.
pub const FILE_POLL: Duration = Duration::from_millis(20);

/// How often a subscriber with unsent lines is offered them again.
const BACKLOG_POLL: Duration = Duration::from_millis(10);

/// Bytes a subscriber may fall behind before it is disconnected (about 2 s of one UE's
/// records).
pub const SUBSCRIBER_BUFFER_BYTES: usize = 4 << 20;

/// Subframes the queue holds (2 s).
pub const QUEUE_SUBFRAMES: usize = 2_000;

/// Emptied record vectors kept for reuse.
const SPARE_BATCHES: usize = 64;

/// Epoll token of the eventfd; a listener's token is its UE number (with this bit for the
/// UE's mi2log listener).
const WAKE_TOKEN: u64 = u64::MAX;
const MI2LOG_TOKEN: u64 = 1 << 32;

/// One subframe's diag records, one per UE, as the cell thread hands them over.
#[derive(Debug)]
pub struct DiagBatch {
    /// Unix time of the subframe's start, s.
    pub timestamp_s: f64,
    /// The subframe (ms since time zero).
    pub t_ms: u64,
    /// The records, one per UE.
    pub records: Vec<DiagRecord>,
}

/// The cell thread → diag thread hand-over (and back: emptied record vectors return for
/// reuse, so the cell thread allocates nothing in steady state).
#[derive(Debug)]
pub struct DiagQueue {
    batches: ArrayQueue<DiagBatch>,
    /// Emptied vectors back to the cell thread, which must never wait for this thread.
    spare: Handover<Vec<DiagRecord>>,
    /// An eventfd the cell thread writes to wake the diag thread (only with subscribers).
    wake: OwnedFd,
    /// Whether the diag files are written.
    file: bool,
    /// Subscribers connected, all UEs.
    subscribers: AtomicUsize,
    closed: AtomicBool,
}

impl DiagQueue {
    /// An empty queue; `file`: whether the diag files are written.
    pub fn new(file: bool) -> Result<DiagQueue> {
        let wake = sys::eventfd().context(|| "creating the diag thread's eventfd".into())?;
        Ok(DiagQueue {
            batches: ArrayQueue::new(QUEUE_SUBFRAMES),
            spare: Handover::new(SPARE_BATCHES),
            wake,
            file,
            subscribers: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        })
    }

    /// Whether anyone wants the records now (a subscriber, or the files).
    pub fn wanted(&self) -> bool {
        self.file || self.subscribers.load(Ordering::Relaxed) > 0
    }

    /// Whether a subscriber is connected (the feed is watched live).
    pub fn has_subscribers(&self) -> bool {
        self.subscribers.load(Ordering::Relaxed) > 0
    }

    /// An emptied record vector to fill, if one came back.
    pub fn spare_records(&self) -> Option<Vec<DiagRecord>> {
        self.spare.pop()
    }

    /// Hands a subframe's records over; false if the queue was full (they are dropped).
    pub fn publish(&self, batch: DiagBatch) -> bool {
        let queued = self.batches.push(batch).is_ok();
        if self.subscribers.load(Ordering::Relaxed) > 0 {
            self.wake();
        }
        queued
    }

    /// No more records will come: the diag thread sends what is queued and ends.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.wake();
    }

    fn wake(&self) {
        sys::eventfd_ring(&self.wake);
    }

    /// Resets the eventfd after a wake-up.
    fn clear_wake(&self) {
        sys::eventfd_clear(&self.wake);
    }
}

/// Counters of the diag feed, reported at shutdown.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DiagCounters {
    /// Lines produced, per UE.
    pub lines: Vec<u64>,
    /// Subscribers that connected, per UE.
    pub subscribers_accepted: Vec<u64>,
    /// Subscribers disconnected because they fell [`SUBSCRIBER_BUFFER_BYTES`] behind, per UE.
    pub subscribers_dropped_slow: Vec<u64>,
    /// Whether the diag files were written.
    pub file: bool,
    /// Failed writes (and flushes) of each UE's diag file: the file then lacks lines the
    /// live feed carried, as the truth writer's `write_error` says of its file.
    pub file_write_errors: Vec<u64>,
    /// The first such error of each UE's file, if any.
    pub file_write_error: Vec<Option<String>>,
    /// The mi2log feed's counters, per UE.
    pub mi2log: Vec<Mi2logCounters>,
    /// The feed timing: `phone` or `ideal`.
    pub feed_timing: &'static str,
    /// Deliveries to the live feed (subscribers, pty), per UE: one per subframe with the
    /// ideal timing, one per packet with the phone's.
    pub deliveries: Vec<u64>,
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
    file: Option<BufWriter<File>>,
    /// Failed writes and flushes of `file`, and the first one's error.
    file_errors: u64,
    first_file_error: Option<String>,
    /// The same feed as diag log packets (`mi2log.rs`).
    mi2log: Mi2logFeed,
    /// The phone's packing (`None`: the ideal timing, each subframe at once).
    packer: Option<Packer>,
    /// Lines held for the subscribers until the packet goes (phone timing).
    held: Vec<u8>,
    /// Deliveries to the live feed.
    deliveries: u64,
}

impl Feed {
    /// Appends a subframe's lines to the file and to every subscriber's buffer (with the
    /// phone's timing: to the lines held for them).
    fn push_lines(&mut self, lines: &[u8]) {
        if let Some(file) = &mut self.file {
            // A failing file write (disk full) must not stop the live feed: it is counted
            // (`file_write_errors`), and the file keeps what it could.
            if let Err(e) = file.write_all(lines) {
                self.note_file_error(&e);
            }
        }
        if self.packer.is_some() {
            if !self.subscribers.is_empty() {
                self.held.extend_from_slice(lines);
            }
        } else {
            for sub in &mut self.subscribers {
                sub.pending.extend_from_slice(lines);
            }
        }
    }

    /// The subframe `t_ms` has been pushed: with the phone's timing, delivers what is held
    /// when the packet is full or the flush tick has come; with the ideal one, counts it.
    fn after_subframe(&mut self, t_ms: u64, scheduled: bool) {
        let Some(packer) = &mut self.packer else {
            self.deliveries += 1;
            return;
        };
        if packer.after_subframe(t_ms, scheduled) {
            self.release();
        }
    }

    /// Delivers what is held (phone timing) to the subscribers and the mi2log feed's.
    fn release(&mut self) {
        for sub in &mut self.subscribers {
            sub.pending.extend_from_slice(&self.held);
        }
        self.held.clear();
        self.mi2log.release();
        self.deliveries += 1;
    }

    fn note_file_error(&mut self, e: &io::Error) {
        self.file_errors += 1;
        if self.first_file_error.is_none() {
            self.first_file_error = Some(e.to_string());
        }
    }
}

/// The listening sockets and files of every UE's feed, created before the emulator
/// reports ready.
pub struct DiagServer {
    feeds: Vec<Feed>,
    epoll: OwnedFd,
}

/// Where one UE's feed listens.
#[derive(Debug, Clone, Serialize)]
pub struct DiagEndpoint {
    /// TCP port on 127.0.0.1 inside the UE's namespace.
    pub port: u16,
    /// Where the mi2log feed is served.
    pub mi2log: Mi2logEndpoint,
}

impl DiagServer {
    /// Binds 127.0.0.1:`port` inside each UE's namespace (port 0: any free port) and, for
    /// the UEs whose files are wanted, creates `diag-ue<N>.jsonl` in `output_dir`. `ues`
    /// gives each UE's namespace, port and whether its feed is written to files.
    /// `mi2log`: the mi2log feed's settings (`diag-ue<N>.mi2log`, port, pty). `phone`: the
    /// phone's packing of the live feed, or `None` for the ideal timing.
    pub fn bind(
        ues: &[(&Namespace, u16, bool)],
        output_dir: &Path,
        mi2log: &Mi2logConfig,
        phone: Option<PhoneTiming>,
    ) -> Result<(DiagServer, Vec<DiagEndpoint>)> {
        let epoll = sys::epoll_create().context(|| "creating the epoll instance of the diag thread".into())?;
        let mut feeds = Vec::with_capacity(ues.len());
        let mut endpoints = Vec::with_capacity(ues.len());
        for (i, &(ns, port, file)) in ues.iter().enumerate() {
            let listener = ns.run_in(|| {
                crate::tun::bring_up_loopback(ns)?;
                TcpListener::bind((Ipv4Addr::LOCALHOST, port))
                    .context(|| format!("listening for the UE {i} diag feed on 127.0.0.1:{port} in namespace {ns}"))
            })?;
            listener.set_nonblocking(true).context(|| format!("making the UE {i} diag listener non-blocking"))?;
            let port = listener.local_addr().context(|| format!("reading the UE {i} diag port"))?.port();
            watch(&epoll, listener.as_raw_fd(), i as u64).context(|| format!("watching the UE {i} diag listener"))?;
            let file = if file {
                let path = output_dir.join(format!("diag-ue{i}.jsonl"));
                let f = File::create(&path).context(|| format!("creating {}", path.display()))?;
                Some(BufWriter::with_capacity(1 << 16, f))
            } else {
                None
            };
            let (mut mi2log, mi2log_at) = Mi2logFeed::open(i, ns, port, output_dir, file.is_some(), mi2log)?;
            mi2log.set_held(phone.is_some());
            if let Some(fd) = mi2log.listener_fd() {
                watch(&epoll, fd, MI2LOG_TOKEN | i as u64)
                    .context(|| format!("watching the UE {i} mi2log listener"))?;
            }
            feeds.push(Feed {
                listener,
                subscribers: Vec::new(),
                file,
                file_errors: 0,
                first_file_error: None,
                mi2log,
                packer: phone.map(Packer::new),
                held: Vec::new(),
                deliveries: 0,
            });
            endpoints.push(DiagEndpoint { port, mi2log: mi2log_at });
        }
        Ok((DiagServer { feeds, epoll }, endpoints))
    }

    /// Serves until `queue` is closed (the cell thread ended): accepts subscribers, writes
    /// lines. `LTE_RLC_DL_Stats` and `LTE_PDCP_DL_Stats` go out every `stats_period_ms`
    /// subframes. Returns the counters after flushing the files.
    pub fn serve(mut self, queue: Arc<DiagQueue>, stats_period_ms: u64) -> DiagCounters {
        let n = self.feeds.len();
        let mut counters = DiagCounters {
            lines: vec![0; n],
            subscribers_accepted: vec![0; n],
            subscribers_dropped_slow: vec![0; n],
            file: queue.file,
            file_write_errors: vec![0; n],
            file_write_error: vec![None; n],
            mi2log: vec![Mi2logCounters::default(); n],
            feed_timing: if self.feeds.iter().any(|f| f.packer.is_some()) { "phone" } else { "ideal" },
            deliveries: vec![0; n],
        };
        // A pty is a standing subscriber: whether anyone reads it shows only as it is written.
        let ptys = self.feeds.iter().filter(|f| f.mi2log.has_pty()).count();
        queue.subscribers.fetch_add(ptys, Ordering::Relaxed);
        if let Err(e) = watch(&self.epoll, queue.wake.as_raw_fd(), WAKE_TOKEN) {
            // Without the eventfd the thread still wakes every poll interval.
            crate::report!("clawbed-emu: warning: watching the diag eventfd: {e}");
        }
        let mut events = sys::epoll_events(2 * n + 1);
        let mut line = Vec::with_capacity(4096);
        let mut stamp = lines::Stamp::default();
        let mut last_flush = Instant::now();
        loop {
            let closed = queue.closed.load(Ordering::SeqCst);
            let backlog =
                self.feeds.iter().any(|f| f.subscribers.iter().any(|s| s.backlog_bytes() > 0) || f.mi2log.backlog());
            let timeout = if backlog { BACKLOG_POLL } else { FILE_POLL };
            let ready = sys::epoll_wait(&self.epoll, &mut events, timeout.as_millis() as i32);
            for event in &events[..ready] {
                let token = event.u64;
                match token {
                    WAKE_TOKEN => queue.clear_wake(),
                    token if token & MI2LOG_TOKEN != 0 => {
                        if let Some(feed) = self.feeds.get_mut((token & !MI2LOG_TOKEN) as usize) {
                            queue.subscribers.fetch_add(feed.mi2log.accept(), Ordering::Relaxed);
                        }
                    }
                    ue => self.accept(ue as usize, &queue, &mut counters),
                }
            }
            while let Some(mut batch) = queue.batches.pop() {
                self.publish(&batch, stats_period_ms, &mut line, &mut stamp, &mut counters);
                batch.records.clear();
                let _ = queue.spare.push(batch.records);
            }
            if closed {
                // The last subframes go out as the next flush tick would have sent them.
                for feed in self.feeds.iter_mut().filter(|f| !f.held.is_empty() || f.mi2log.has_held()) {
                    feed.release();
                }
            }
            self.pump_all(&queue, &mut counters);
            if last_flush.elapsed() >= FILE_FLUSH_INTERVAL {
                self.flush_files();
                last_flush = Instant::now();
            }
            if closed {
                break;
            }
        }
        self.flush_files();
        for (ue, feed) in self.feeds.iter().enumerate() {
            counters.mi2log[ue] = feed.mi2log.counters;
            counters.file_write_errors[ue] = feed.file_errors;
            counters.file_write_error[ue] = feed.first_file_error.clone();
            counters.deliveries[ue] = feed.deliveries;
        }
        counters
    }

    /// Serialises one subframe: per UE, its messages as lines, to the file and subscribers.
    fn publish(
        &mut self,
        batch: &DiagBatch,
        stats_period_ms: u64,
        line: &mut Vec<u8>,
        stamp: &mut lines::Stamp,
        counters: &mut DiagCounters,
    ) {
        let with_stats = batch.t_ms % stats_period_ms.max(1) == 0;
        let t = batch.timestamp_s;
        stamp.set(t);
        for record in &batch.records {
            let ue = record.ue.index();
            let Some(feed) = self.feeds.get_mut(ue) else { continue };
            feed.mi2log.push_record(t, record, with_stats);
            if feed.file.is_some() || !feed.subscribers.is_empty() {
                Self::push_record_lines(feed, stamp, record, with_stats, line, &mut counters.lines[ue]);
            }
            feed.after_subframe(batch.t_ms, record.pdsch.transport_block.is_some());
        }
    }

    /// One UE's lines of one subframe, to its file and subscribers; counts them in `line_count`.
    fn push_record_lines(
        feed: &mut Feed,
        t: &lines::Stamp,
        record: &DiagRecord,
        with_stats: bool,
        line: &mut Vec<u8>,
        line_count: &mut u64,
    ) {
        line.clear();
        lines::pdsch(line, t, &record.pdsch);
        let mut count = 2;
        // A phone reports a measurement when it makes one (every `rsrq.hold_ms`).
        if record.measurement_updated {
            lines::serv_cell(line, t, &record.serv_cell);
            count += 1;
        }
        lines::mac(line, t, &record.mac);
        if with_stats {
            lines::rlc(line, t, &record.rlc);
            lines::pdcp(line, t, &record.pdcp);
            count += 2;
        }
        *line_count += count;
        feed.push_lines(line);
    }

    fn accept(&mut self, ue: usize, queue: &DiagQueue, counters: &mut DiagCounters) {
        let Some(feed) = self.feeds.get_mut(ue) else { return };
        while let Ok((stream, _)) = feed.listener.accept() {
            // A subscriber that cannot be made non-blocking could stall the feed: refuse it.
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            // Lines are small and time-critical: send each at once.
            let _ = stream.set_nodelay(true);
            feed.subscribers.push(Subscriber { stream, pending: Vec::new(), sent: 0 });
            counters.subscribers_accepted[ue] += 1;
            queue.subscribers.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn pump_all(&mut self, queue: &DiagQueue, counters: &mut DiagCounters) {
        for (ue, feed) in self.feeds.iter_mut().enumerate() {
            queue.subscribers.fetch_sub(feed.mi2log.pump(), Ordering::Relaxed);
            feed.subscribers.retain_mut(|sub| {
                let keep = if sub.pump().is_err() {
                    false
                } else if sub.backlog_bytes() > SUBSCRIBER_BUFFER_BYTES {
                    counters.subscribers_dropped_slow[ue] += 1;
                    false
                } else {
                    true
                };
                if !keep {
                    queue.subscribers.fetch_sub(1, Ordering::Relaxed);
                }
                keep
            });
        }
    }

    fn flush_files(&mut self) {
        for feed in &mut self.feeds {
            if let Some(file) = &mut feed.file {
                if let Err(e) = file.flush() {
                    feed.note_file_error(&e);
                }
            }
            feed.mi2log.flush();
        }
    }
}

/// Adds `fd` to `epoll` for input, with `token`.
fn watch(epoll: &OwnedFd, fd: libc::c_int, token: u64) -> io::Result<()> {
    sys::epoll_watch(epoll, fd, token)
}

//! The client of one UE at run time: its own diag feed connection (JSON lines on
//! 127.0.0.1:`diag_port` of the UE namespace), its own feedback socket to the server agent
//! (HMAC-authenticated reports out, echoes in), its own loss-flag map and estimates log —
//! as separate phones would have. One thread, one `poll` over the feed, the feedback
//! socket and a signalfd (SIGTERM / SIGINT end it cleanly).
//!
//! Cost: the feed is read in whole chunks (a subframe's ~5 lines at once) and, with
//! `batch_ms`, at most once per that many ms: a phone's diag port delivers in bursts too,
//! and the client's rules run on diag time, so the outputs do not change; only the loss
//! flags and reports leave up to `batch_ms` later.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::core::{ClientConfig, ClientCore, Step};
use crate::estimates::EstimateLog;
use crate::feedback::{Echo, Hmac, ECHO_BYTES, FEEDBACK_BYTES};
use crate::json;
use crate::marking::AckMarkMap;

/// After the feed closed, how long a new connection is tried before the client ends.
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A loss event older than this when read is stamped "now", s.
const MAX_EVENT_LAG_S: f64 = 1.0;
/// Longest line accepted, bytes (the reference's limit).
const MAX_LINE_BYTES: usize = 1 << 20;
/// Bytes read from the feed at once.
const READ_BYTES: usize = 1 << 16;
/// Bad messages reported on stderr (the rest only counted).
const BAD_MESSAGES_SHOWN: u64 = 3;

/// Everything the daemon runs with.
pub struct DaemonConfig {
    pub client: ClientConfig,
    pub server: SocketAddr,
    pub key: Vec<u8>,
    pub diag_port: u16,
    pub netns: Option<String>,
    pub log_path: Option<PathBuf>,
    pub log_period_ms: i64,
    pub connect_timeout: Duration,
    pub ack_map: Option<PathBuf>,
    pub batch_ms: u64,
    pub exit_with_parent: bool,
    /// Where to say "ready" once the feed is connected (see [`signal_ready`]).
    pub ready_file: Option<PathBuf>,
}

/// What the daemon did; printed as its last line (the reference's `DaemonReport`).
#[derive(Default)]
pub struct DaemonReport {
    pub ended_by: &'static str,
    pub feedback_sent: u64,
    pub feedback_send_errors: u64,
    pub echoes_rejected: BTreeMap<&'static str, u64>,
    pub marks_written: u64,
    pub feed_reconnects: u64,
    pub log_rows: u64,
    pub window_ms: i64,
}

/// The client's state and outputs, shared by the live daemon and the offline replay.
pub struct Client {
    pub core: ClientCore,
    key: Hmac,
    pub report: DaemonReport,
    pub log: Option<EstimateLog>,
    marker: Option<AckMarkMap>,
    window_ms: i64,
    step: Step,
    /// Report datagrams made and not yet sent (the caller sends them).
    pub outbox: Vec<[u8; FEEDBACK_BYTES]>,
}

impl Client {
    pub fn new(config: ClientConfig, key: &[u8], log: Option<EstimateLog>, marker: Option<AckMarkMap>) -> Self {
        let core = ClientCore::new(config);
        let window_ms = core.window_ms();
        Client {
            core,
            key: Hmac::new(key),
            report: DaemonReport::default(),
            log,
            marker,
            window_ms,
            step: Step::default(),
            outbox: Vec::new(),
        }
    }

    /// The marker's window before the first echo.
    pub fn start(&mut self) -> Result<(), String> {
        if let Some(m) = &self.marker {
            m.set_window_ms(self.window_ms)?;
        }
        Ok(())
    }

    /// One line of the feed (without its newline); `offset`: its byte offset in the feed.
    pub fn on_line(&mut self, line: &[u8], offset: u64) -> io::Result<()> {
        let parsed = std::str::from_utf8(line)
            .map_err(|e| format!("not UTF-8 at byte {} of the line", e.valid_up_to()))
            .and_then(|text| json::parse(text).map_err(|e| format!("not a JSON line ({e})")));
        let message = match parsed {
            Ok(m) => m,
            Err(why) => {
                self.bad(&format!(
                    "feed byte {offset}: {why}: {:?}",
                    String::from_utf8_lossy(&line[..line.len().min(120)])
                ));
                return Ok(());
            }
        };
        let mut step = std::mem::take(&mut self.step);
        let result = self.core.on_message(&message, &mut step);
        if let Err(e) = result {
            // One malformed message must not end the client; it is counted.
            self.bad(&format!("feed byte {offset}: {e}"));
        }
        let applied = self.apply(&mut step);
        self.step = step;
        applied
    }

    fn bad(&mut self, what: &str) {
        self.core.counters.bad_messages += 1;
        if self.core.counters.bad_messages <= BAD_MESSAGES_SHOWN {
            eprintln!("claw-client: skipping a bad diag message: {what}");
        }
    }

    /// The feed ended: close the open subframe.
    pub fn finish(&mut self) -> io::Result<()> {
        let mut step = std::mem::take(&mut self.step);
        self.core.finish(&mut step);
        self.apply(&mut step)
    }

    fn apply(&mut self, step: &mut Step) -> io::Result<()> {
        for feedback in step.feedback.drain(..) {
            self.outbox.push(feedback.encode(&self.key));
        }
        for event in step.events.drain(..) {
            if let Some(m) = &self.marker {
                match m.note_event(event.kind, event_monotonic_ns(event.unix_s)) {
                    Ok(()) => self.report.marks_written += 1,
                    Err(e) => eprintln!("claw-client: {e}"),
                }
            }
        }
        for row in step.rows.drain(..) {
            if let Some(log) = &mut self.log {
                log.write(&row)
                    .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", log.path().display())))?;
            }
        }
        Ok(())
    }

    /// A datagram on the feedback socket (an echo of the server agent, or anything else).
    pub fn on_datagram(&mut self, data: &[u8]) {
        if data.len() != ECHO_BYTES {
            self.reject("malformed");
            return;
        }
        let echo = match Echo::decode(data, &self.key) {
            Ok(e) => e,
            Err(why) => {
                self.reject(why.name());
                return;
            }
        };
        if !self.core.on_echo(&echo) {
            self.reject("other-ue");
            return;
        }
        if self.core.window_ms() != self.window_ms {
            self.window_ms = self.core.window_ms();
            if let Some(m) = &self.marker {
                if let Err(e) = m.set_window_ms(self.window_ms) {
                    eprintln!("claw-client: {e}");
                }
            }
        }
    }

    fn reject(&mut self, why: &'static str) {
        *self.report.echoes_rejected.entry(why).or_insert(0) += 1;
    }

    /// Close the log; the report as the reference prints it (`claw-client {json}`).
    pub fn close(&mut self) -> io::Result<String> {
        if let Some(log) = self.log.take() {
            self.report.log_rows = log.close()?;
        }
        self.report.window_ms = self.core.window_ms();
        let r = &self.report;
        let rejected: Vec<String> = r.echoes_rejected.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
        Ok(format!(
            "{{\"ended_by\": \"{}\", \"counters\": {}, \"feedback_sent\": {}, \"feedback_send_errors\": {}, \
             \"echoes_rejected\": {{{}}}, \"marks_written\": {}, \"feed_reconnects\": {}, \"log_rows\": {}, \
             \"window_ms\": {}}}",
            r.ended_by,
            self.core.counters.to_json(),
            r.feedback_sent,
            r.feedback_send_errors,
            rejected.join(", "),
            r.marks_written,
            r.feed_reconnects,
            r.log_rows,
            r.window_ms
        ))
    }
}

/// CLOCK_MONOTONIC time of a diag event stamped `unix_s`: now minus how long ago it
/// happened (a lag beyond 1 s, or a stamp in the future, counts as now).
fn event_monotonic_ns(unix_s: Option<f64>) -> u64 {
    let now = monotonic_ns();
    let Some(unix_s) = unix_s else { return now };
    let wall_ns =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
    let lag_ns = wall_ns - (unix_s * 1e9) as i128;
    if 0 < lag_ns && lag_ns as f64 <= MAX_EVENT_LAG_S * 1e9 {
        now.saturating_sub(lag_ns as u64)
    } else {
        now
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Move this (single-threaded) process into network namespace `name`: its feed and
/// feedback sockets are then the UE's.
fn enter_netns(name: &str) -> Result<(), String> {
    let path = format!("/var/run/netns/{name}");
    let f = File::open(&path).map_err(|e| format!("opening network namespace {path}: {e}"))?;
    // SAFETY: setns on a namespace file descriptor we hold open.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("entering network namespace {name}: {}", io::Error::last_os_error()));
    }
    Ok(())
}

/// A signalfd for SIGTERM and SIGINT (blocked, so they arrive only through it).
fn signal_fd() -> Result<File, String> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on a local signal set; the new fd is owned by the File.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(format!("blocking SIGTERM/SIGINT: {}", io::Error::last_os_error()));
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(format!("making a signalfd: {}", io::Error::last_os_error()));
        }
        Ok(File::from_raw_fd(fd))
    }
}

/// SIGTERM (taken through the signalfd, so a clean end) when the parent process ends.
fn exit_with_parent() -> Result<(), String> {
    // SAFETY: plain libc calls without pointers.
    unsafe {
        let parent = libc::getppid();
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(format!("asking for SIGTERM at the parent's end: {}", io::Error::last_os_error()));
        }
        // The parent may have ended before the request: then it is already too late.
        if parent == 1 || libc::getppid() != parent {
            libc::raise(libc::SIGTERM);
        }
    }
    Ok(())
}

/// Append `ready ue=<id> pid=<pid>` to `path` (a regular file, or a FIFO its reader holds
/// open: O_NONBLOCK, so a reader that went away is an error, not a hang). One write of a
/// short line, so several clients can share one FIFO.
fn signal_ready(path: &Path, ue_id: u16) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let line = format!("ready ue={ue_id} pid={}\n", std::process::id());
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| format!("--ready-file {}: {e}", path.display()))
}

fn connect_feed(port: u16, timeout: Duration) -> Result<TcpStream, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "diag feed 127.0.0.1:{port}: connection refused for {} s (is the emulator running, and is \
                         this the UE's namespace?)",
                        timeout.as_secs_f64()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("diag feed 127.0.0.1:{port}: {e}")),
        }
    }
}

enum Wake {
    Feed,
    Echo,
    Signal,
}

/// Wait for the first ready of the feed (when `feed` is given), the socket and the signal
/// fd, up to `timeout_ms` (-1: forever).
fn wait(feed: Option<&TcpStream>, udp: &UdpSocket, sig: &File, timeout_ms: i32) -> io::Result<Vec<Wake>> {
    let mut fds = vec![
        libc::pollfd { fd: sig.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: udp.as_raw_fd(), events: libc::POLLIN, revents: 0 },
    ];
    if let Some(f) = feed {
        fds.push(libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 });
    }
    // SAFETY: fds is a valid array of pollfd for the call's duration.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(Vec::new()) } else { Err(e) };
    }
    let mut out = Vec::new();
    for (i, p) in fds.iter().enumerate() {
        if p.revents != 0 {
            out.push([Wake::Signal, Wake::Echo, Wake::Feed].into_iter().nth(i).expect("three fds at most"));
        }
    }
    Ok(out)
}

/// Run until the feed ends or a signal arrives; the report line.
pub fn run(config: DaemonConfig) -> Result<String, String> {
    let sig = signal_fd()?;
    if config.exit_with_parent {
        exit_with_parent()?;
    }
    if let Some(ns) = &config.netns {
        enter_netns(ns)?;
    }
    let udp = UdpSocket::bind(("0.0.0.0", 0)).map_err(|e| format!("feedback socket: {e}"))?;
    udp.connect(config.server).map_err(|e| format!("feedback socket to {}: {e}", config.server))?;
    udp.set_nonblocking(true).map_err(|e| format!("feedback socket: {e}"))?;
    let log = match &config.log_path {
        Some(p) => Some(
            EstimateLog::create(p, config.log_period_ms).map_err(|e| format!("estimates log {}: {e}", p.display()))?,
        ),
        None => None,
    };
    let marker = match &config.ack_map {
        Some(p) => Some(AckMarkMap::open(p)?),
        None => None,
    };
    let mut client = Client::new(config.client.clone(), &config.key, log, marker);
    client.start()?;
    let mut first = true;
    let mut buf = vec![0u8; READ_BYTES];
    let mut partial: Vec<u8> = Vec::new();
    let mut offset: u64 = 0;
    let batch = Duration::from_millis(config.batch_ms);
    let ended_by = 'feeds: loop {
        let timeout = if first { config.connect_timeout } else { RECONNECT_TIMEOUT };
        let mut feed = match connect_feed(config.diag_port, timeout) {
            Ok(s) => s,
            Err(e) if first => return Err(e),
            Err(_) => break 'feeds "feed-closed",
        };
        if first {
            if let Some(path) = &config.ready_file {
                signal_ready(path, config.client.ue_id)?;
            }
        }
        let _ = feed.set_nonblocking(true);
        partial.clear();
        let mut got_any = false;
        let mut next_read = Instant::now();
        loop {
            let now = Instant::now();
            let feed_due = now >= next_read;
            let timeout_ms = if feed_due { -1 } else { (next_read - now).as_millis() as i32 + 1 };
            let mut woke = wait(feed_due.then_some(&feed), &udp, &sig, timeout_ms).map_err(|e| format!("poll: {e}"))?;
            if matches!(woke.first(), Some(Wake::Signal)) {
                // What the feed already delivered is taken before stopping: nothing measured is lost.
                woke.remove(0);
                if !matches!(woke.last(), Some(Wake::Feed)) {
                    woke.push(Wake::Feed);
                }
                woke.push(Wake::Signal);
            }
            for w in woke {
                match w {
                    Wake::Signal => break 'feeds "signal",
                    Wake::Echo => {
                        let mut dgram = [0u8; 2048];
                        loop {
                            match udp.recv(&mut dgram) {
                                Ok(n) => client.on_datagram(&dgram[..n]),
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                                // ICMP port unreachable while the agent is not up yet.
                                Err(_) => client.report.feedback_send_errors += 1,
                            }
                        }
                    }
                    Wake::Feed => {
                        let mut closed = false;
                        loop {
                            match feed.read(&mut buf) {
                                Ok(0) => {
                                    closed = true;
                                    break;
                                }
                                Ok(n) => {
                                    partial.extend_from_slice(&buf[..n]);
                                    if n < buf.len() {
                                        break;
                                    }
                                }
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                                Err(_) => {
                                    closed = true;
                                    break;
                                }
                            }
                        }
                        let mut start = 0;
                        while let Some(nl) = partial[start..].iter().position(|&b| b == b'\n') {
                            if !got_any && !first {
                                client.report.feed_reconnects += 1;
                                eprintln!("claw-client: the diag feed closed; reconnected");
                            }
                            got_any = true;
                            let line = &partial[start..start + nl];
                            client.on_line(line, offset).map_err(|e| e.to_string())?;
                            offset += nl as u64 + 1;
                            start += nl + 1;
                        }
                        partial.drain(..start);
                        if partial.len() > MAX_LINE_BYTES {
                            return Err(format!(
                                "diag feed 127.0.0.1:{}: a line longer than {MAX_LINE_BYTES} bytes at byte {offset}",
                                config.diag_port
                            ));
                        }
                        send_outbox(&mut client, &udp);
                        if closed {
                            // A line cut short (the emulator stopped mid-line) is dropped.
                            if !got_any && !first {
                                break 'feeds "feed-closed";
                            }
                            first = false;
                            continue 'feeds;
                        }
                        next_read = Instant::now() + batch;
                    }
                }
            }
        }
    };
    client.report.ended_by = ended_by;
    client.finish().map_err(|e| e.to_string())?;
    send_outbox(&mut client, &udp);
    client.close().map_err(|e| e.to_string())
}

fn send_outbox(client: &mut Client, udp: &UdpSocket) {
    for datagram in client.outbox.drain(..) {
        match udp.send(&datagram) {
            Ok(_) => client.report.feedback_sent += 1,
            Err(_) => client.report.feedback_send_errors += 1,
        }
    }
}

/// The offline replay: every line of `input` is a diag message, or `{"echo_hex": "…"}` (a
/// datagram the feedback socket received between two messages). Writes the estimates log
/// and, per report, its datagram in hex, one a line; returns the report line.
pub fn replay(
    input: &std::path::Path,
    client_config: ClientConfig,
    key: &[u8],
    log: Option<EstimateLog>,
    feedback_out: Option<&std::path::Path>,
) -> Result<String, String> {
    let text = std::fs::read(input).map_err(|e| format!("reading {}: {e}", input.display()))?;
    let mut reports = match feedback_out {
        Some(p) => Some(io::BufWriter::new(File::create(p).map_err(|e| format!("creating {}: {e}", p.display()))?)),
        None => None,
    };
    let mut client = Client::new(client_config, key, log, None);
    let mut offset = 0u64;
    let mut write_reports = |client: &mut Client| -> Result<(), String> {
        for d in client.outbox.drain(..) {
            client.report.feedback_sent += 1;
            if let Some(w) = reports.as_mut() {
                let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
                writeln!(w, "{hex}").map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    };
    for (number, line) in text.split(|&b| b == b'\n').enumerate() {
        if offset as usize >= text.len() {
            break;
        }
        let here = offset;
        offset += line.len() as u64 + 1;
        if line.starts_with(b"{\"echo_hex\"") {
            let parsed = std::str::from_utf8(line).ok().and_then(|t| json::parse(t).ok());
            let hex = parsed.as_ref().and_then(|v| v.get("echo_hex")).and_then(json::Value::as_str).map(str::to_owned);
            let bytes = hex.as_deref().and_then(|h| {
                (0..h.len())
                    .step_by(2)
                    .map(|i| h.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
                    .collect::<Option<Vec<u8>>>()
            });
            match bytes {
                Some(b) => client.on_datagram(&b),
                None => return Err(format!("{} line {}: echo_hex is not hex", input.display(), number + 1)),
            }
            continue;
        }
        if !line.is_empty() {
            client.on_line(line, here).map_err(|e| e.to_string())?;
        }
        write_reports(&mut client)?;
    }
    client.report.ended_by = "feed-closed";
    client.finish().map_err(|e| e.to_string())?;
    write_reports(&mut client)?;
    client.close().map_err(|e| e.to_string())
}

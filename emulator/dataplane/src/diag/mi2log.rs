//! The diag feed in the phone's own format: each message as a diag log packet in an HDLC
//! frame, as a phone's diag port sends it and MobileInsight's `.mi2log` files hold it.
//!
//! Per UE: the file `diag-ue<N>.mi2log`, a TCP listener on 127.0.0.1 beside the JSON feed's
//! (port `diag_port + 1`; any free port when `diag_port` is 0) and optionally a
//! pseudo-terminal (a serial diag port's stand-in). Versions are the 2018 Pixel XL log's:
//! 0xB173 v24, 0xB193 v1/22, 0xB063 v1/4, 0xB087 v1/3, 0xB0A4 v1/2. The bytes equal what
//! `traces/diaglog/emufeed.py` (`encode_feed_message`) makes of the JSON line of the same
//! message; the mapping is documented there and in `../../DIAG_FEED.md`, and
//! `tests/test_diag_mi2log.py` (`test_rust_mi2log_is_the_python_encoding_of_the_json_feed`)
//! holds the two to it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use cell::diag::{MacDlTransportBlock, PdcpDlStats, PdschStat, RlcDlStats, ServCellMeasurement};
use cell::DiagRecord;
use serde::{Deserialize, Serialize};

use crate::error::{Context, Result};
use crate::netns::Namespace;

use super::pty::Pty;
use super::Subscriber;

/// The mi2log feed's settings (`diag.mi2log` in the config file).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct Mi2logConfig {
    /// Write `diag-ue<N>.mi2log` beside `diag-ue<N>.jsonl` (only while `diag.file` is on).
    /// Default true.
    pub file: bool,
    /// Serve the byte stream on TCP 127.0.0.1:`diag_port + 1` in the UE's namespace (any
    /// free port when `diag_port` is 0). Default true.
    pub tcp: bool,
    /// Serve it on a pseudo-terminal too (raw mode; its path is in the `ready` line and
    /// `diag-ue<N>.pty` links to it). A pty keeps the cell handing the diag thread every
    /// subframe, as a connected subscriber does. Default false.
    pub pty: bool,
}

impl Default for Mi2logConfig {
    fn default() -> Mi2logConfig {
        Mi2logConfig { file: true, tcp: true, pty: false }
    }
}

/// Diag timestamps count this many ticks per second (800 × 65 536) ...
const TICKS_PER_S: f64 = 52_428_800.0;
/// ... from the GPS epoch, 1980-01-06 00:00:00 UTC, as Unix time.
const GPS_EPOCH_UNIX_S: f64 = 315_964_800.0;
/// Bytes a TB Size of 0xB173 counts beyond the TBS: the transport block's 24-bit CRC.
const TB_CRC_BYTES: u32 = 3;
/// `Rb Cfg Idx` of the one data bearer (the Pixel XL log's).
const RB_CFG_IDX: u8 = 33;
/// RLC mode AM.
const MODE_AM: u8 = 1;

const LOG_PDSCH_STAT: u16 = 0xB173;
const LOG_SERV_CELL_MEAS: u16 = 0xB193;
const LOG_MAC_DL_TB: u16 = 0xB063;
const LOG_RLC_DL_STATS: u16 = 0xB087;
const LOG_PDCP_DL_STATS: u16 = 0xB0A4;

/// 0xB193 sub-packet v22: declared size (header included).
const B193_SUBPACKET_BYTES: usize = 492;
/// 0xB087 sub-packet 0x42 v3: 271 bytes of fields, padded to 272, plus the header.
const B087_SUBPACKET_BYTES: usize = 276;
/// 0xB0A4 sub-packet 0xC4 v2.
const B0A4_SUBPACKET_BYTES: usize = 184;

/// CRC-16/X.25 tables (reflected polynomial 0x1021) for eight bytes at a time: `[0]` is the
/// byte-at-a-time table; `[k][b]` is byte `b`'s effect with `k` bytes after it (the frames
/// are mostly long zero-padded sub-packets, and the CRC was the feed's largest cost).
const CRC_TABLES: [[u16; 256]; 8] = {
    let mut tables = [[0u16; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u16;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x8408 } else { c >> 1 };
            k += 1;
        }
        tables[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = tables[k - 1][i];
            tables[k][i] = (prev >> 8) ^ tables[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    tables
};

/// The HDLC flag that ends a frame, and the escape byte (the next byte XOR 0x20).
const FLAG: u8 = 0x7E;
const ESCAPE: u8 = 0x7D;

/// Levels of [`ZERO_RUNS`]: runs of up to 2^13 words of zeros (64 KiB, any log packet) in
/// one table step per level.
const ZERO_LEVELS: usize = 13;

/// The CRC register after runs of zero bytes: `[i]` maps the register's low and high byte
/// to their effect after 8 × 2^i zero bytes (the register's update is linear, so the two
/// halves' effects add by XOR). The zero-padded sub-packets (0xB193's 492 bytes are mostly
/// zeros) are skipped a run at a time.
const ZERO_RUNS: [[[u16; 256]; 2]; ZERO_LEVELS] = {
    let mut runs = [[[0u16; 256]; 2]; ZERO_LEVELS];
    // Level 0: eight zero bytes, from each byte of the register alone.
    let mut b = 0;
    while b < 256 {
        let mut half = 0;
        while half < 2 {
            let mut c = (b as u16) << (8 * half);
            let mut k = 0;
            while k < 8 {
                c = (c >> 8) ^ CRC_TABLES[0][(c & 0xFF) as usize];
                k += 1;
            }
            runs[0][half][b] = c;
            half += 1;
        }
        b += 1;
    }
    // Level i + 1: level i twice.
    let mut level = 1;
    while level < ZERO_LEVELS {
        let mut b = 0;
        while b < 256 {
            let mut half = 0;
            while half < 2 {
                let once = runs[level - 1][half][b];
                runs[level][half][b] =
                    runs[level - 1][0][(once & 0xFF) as usize] ^ runs[level - 1][1][(once >> 8) as usize];
                half += 1;
            }
            b += 1;
        }
        level += 1;
    }
    runs
};

/// The register `crc` after `words` × 8 zero bytes.
fn skip_zero_words(mut crc: u16, mut words: usize) -> u16 {
    let step = |crc: u16, table: &[[u16; 256]; 2]| table[0][usize::from(crc as u8)] ^ table[1][usize::from(crc >> 8)];
    for table in &ZERO_RUNS {
        if words == 0 {
            return crc;
        }
        if words & 1 != 0 {
            crc = step(crc, table);
        }
        words >>= 1;
    }
    // Longer than any log packet: what is left counts runs of 2^ZERO_LEVELS words, each
    // twice the largest table's.
    for _ in 0..2 * words {
        crc = step(crc, &ZERO_RUNS[ZERO_LEVELS - 1]);
    }
    crc
}

/// A CRC-16/X.25 register (init 0xFFFF), fed eight bytes at a time where it can.
struct Crc(u16);

impl Crc {
    /// Eight bytes.
    fn word(&mut self, c: &[u8]) {
        let t = &CRC_TABLES;
        let lo = (self.0 as u8) ^ c[0];
        let hi = ((self.0 >> 8) as u8) ^ c[1];
        self.0 = t[7][usize::from(lo)]
            ^ t[6][usize::from(hi)]
            ^ t[5][usize::from(c[2])]
            ^ t[4][usize::from(c[3])]
            ^ t[3][usize::from(c[4])]
            ^ t[2][usize::from(c[5])]
            ^ t[1][usize::from(c[6])]
            ^ t[0][usize::from(c[7])];
    }

    /// `words` × 8 zero bytes (the callers count runs of zero words in a local, which keeps
    /// the loop's count in a register).
    fn zero_words(&mut self, words: usize) {
        if words > 0 {
            self.0 = skip_zero_words(self.0, words);
        }
    }

    fn byte(&mut self, b: u8) {
        self.0 = (self.0 >> 8) ^ CRC_TABLES[0][usize::from((self.0 ^ u16::from(b)) as u8)];
    }

    /// The CRC (final XOR 0xFFFF).
    fn finish(self) -> u16 {
        self.0 ^ 0xFFFF
    }
}

/// `c` (eight bytes) as a little-endian number.
fn word_of(c: &[u8]) -> u64 {
    u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
}

/// CRC-16/X.25 (init 0xFFFF, final XOR 0xFFFF) of `data`.
pub fn crc16_x25(data: &[u8]) -> u16 {
    let mut crc = Crc(0xFFFF);
    let mut zeros = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        if word_of(c) == 0 {
            zeros += 1;
            continue;
        }
        crc.zero_words(zeros);
        zeros = 0;
        crc.word(c);
    }
    crc.zero_words(zeros);
    for &b in chunks.remainder() {
        crc.byte(b);
    }
    crc.finish()
}

/// Whether any of the eight bytes of `word` is [`FLAG`] or [`ESCAPE`].
fn has_flag_or_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS != 0;
    has_zero(word ^ (ONES * u64::from(FLAG))) || has_zero(word ^ (ONES * u64::from(ESCAPE)))
}

/// Appends one frame: `payload ‖ CRC (LE)`, 0x7E and 0x7D escaped, then 0x7E. One pass over
/// the payload, eight bytes at a time, for the CRC and the escapes; runs without a byte to
/// escape are copied whole.
pub fn push_frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.reserve(payload.len() + 8);
    let mut crc = Crc(0xFFFF);
    let mut zeros = 0;
    // Start of the payload bytes not yet copied.
    let mut run = 0;
    let escape = |out: &mut Vec<u8>, at: usize, b: u8, run: &mut usize| {
        out.extend_from_slice(&payload[*run..at]);
        out.extend_from_slice(&[ESCAPE, b ^ 0x20]);
        *run = at + 1;
    };
    let mut chunks = payload.chunks_exact(8);
    for (i, c) in (&mut chunks).enumerate() {
        let word = word_of(c);
        if word == 0 {
            zeros += 1;
            continue;
        }
        crc.zero_words(zeros);
        zeros = 0;
        crc.word(c);
        if has_flag_or_escape(word) {
            for (k, &b) in c.iter().enumerate() {
                if b == FLAG || b == ESCAPE {
                    escape(out, 8 * i + k, b, &mut run);
                }
            }
        }
    }
    crc.zero_words(zeros);
    let tail = payload.len() - chunks.remainder().len();
    for (k, &b) in chunks.remainder().iter().enumerate() {
        crc.byte(b);
        if b == FLAG || b == ESCAPE {
            escape(out, tail + k, b, &mut run);
        }
    }
    out.extend_from_slice(&payload[run..]);
    for b in crc.finish().to_le_bytes() {
        if b == FLAG || b == ESCAPE {
            out.extend_from_slice(&[ESCAPE, b ^ 0x20]);
        } else {
            out.push(b);
        }
    }
    out.push(FLAG);
}

/// Diag timestamp of a Unix time, s (round half to even, as the Python codec's `round`).
pub fn ticks(unix_s: f64) -> u64 {
    ((unix_s - GPS_EPOCH_UNIX_S) * TICKS_PER_S).round_ties_even() as u64
}

/// The raw field of a measurement: ⌊(value − offset) / step + ½⌋ clamped to
/// [0, 2^bits − 1]; a missing or non-finite value is 0 (`encode.quantise` in Python).
fn quantise(value: Option<f64>, offset: f64, step: f64, bits: u32) -> u32 {
    let Some(v) = value.filter(|v| v.is_finite()) else { return 0 };
    let x = (v - offset) / step + 0.5;
    if x <= 0.0 {
        return 0;
    }
    let top = (1u32 << bits) - 1;
    if x >= f64::from(top) + 1.0 {
        top
    } else {
        (x as u32).min(top)
    }
}

fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn or_u32(b: &mut [u8], at: usize, v: u32) {
    let w = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    put_u32(b, at, w | v);
}

/// A counter of the format's 32-bit fields: it wraps, as a modem's does.
fn counter(v: u64) -> u32 {
    v as u32
}

/// Builds the frames of messages; keeps its scratch buffer between calls.
#[derive(Default)]
pub struct Encoder {
    packet: Vec<u8>,
}

impl Encoder {
    /// Starts a log packet of `code` at `unix_s` in the scratch buffer (lengths filled by
    /// [`Encoder::finish`]).
    fn start(&mut self, code: u16, unix_s: f64) {
        self.packet.clear();
        self.packet.extend_from_slice(&[0x10, 0x00, 0, 0, 0, 0]);
        self.packet.extend_from_slice(&code.to_le_bytes());
        self.packet.extend_from_slice(&ticks(unix_s).to_le_bytes());
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let len = (self.packet.len() - 4) as u16;
        put_u16(&mut self.packet, 2, len);
        put_u16(&mut self.packet, 4, len);
        push_frame(out, &self.packet);
    }

    /// 0xB173 v24, one record.
    pub fn pdsch(&mut self, out: &mut Vec<u8>, unix_s: f64, m: &PdschStat) {
        self.start(LOG_PDSCH_STAT, unix_s);
        let p = &mut self.packet;
        p.extend_from_slice(&[24, 1, 0, 0]);
        p.extend_from_slice(&(u16::from(m.subframe_num & 0x0F) | (m.frame_num & 0x0FFF) << 4).to_le_bytes());
        p.extend_from_slice(&[m.num_rbs, m.num_layers, u8::from(m.transport_block.is_some()), 0]);
        match &m.transport_block {
            Some(tb) => {
                let b0 = (tb.harq_id & 0x0F) | (tb.rv & 3) << 4 | (tb.ndi & 1) << 6 | u8::from(tb.crc_pass) << 7;
                // C-RNTI, TB index 0, no discarded reTx; a retransmission is recombined.
                let b1 = u8::from(tb.rv != 0) << 6;
                let size = tb.tb_size_bytes.saturating_add(TB_CRC_BYTES).min(0xFFFF) as u16;
                let modulation = match tb.modulation_type() {
                    "QPSK" => 2,
                    "16QAM" => 4,
                    _ => 6,
                };
                p.extend_from_slice(&[b0, b1]);
                p.extend_from_slice(&size.to_le_bytes());
                p.extend_from_slice(&[tb.mcs, tb.num_rbs, modulation, 0]);
            }
            None => p.extend_from_slice(&[0; 8]),
        }
        p.extend_from_slice(&[0; 8]); // the second TB slot
        p.extend_from_slice(&[0, 0]); // PMCH ID, Area ID
        self.finish(out);
    }

    /// 0xB193 v1, one Serving_Cell_Measurement_Result sub-packet of version 22.
    pub fn serv_cell(&mut self, out: &mut Vec<u8>, unix_s: f64, m: &ServCellMeasurement) {
        self.start(LOG_SERV_CELL_MEAS, unix_s);
        let p = &mut self.packet;
        p.extend_from_slice(&[1, 1, 0, 0, 25, 22]);
        p.extend_from_slice(&(B193_SUBPACKET_BYTES as u16).to_le_bytes());
        let at = p.len();
        p.resize(at + B193_SUBPACKET_BYTES - 4, 0);
        let b = &mut p[at..];
        put_u16(b, 4, 1); // Num-of-cells
        put_u16(b, 8, 1 << 12); // PCI 0, PCell, serving cell
        put_u16(b, 12, (m.current_sfn & 0x3FF) | u16::from(m.current_subframe & 0x0F) << 10);
        let rsrp = quantise(Some(m.rsrp_dbm), -180.0, 0.0625, 12);
        let rsrq = quantise(Some(m.rsrq_db), -30.0, 0.0625, 10);
        let rssi = quantise(Some(m.rssi_dbm), -110.0, 0.0625, 11);
        let snr = quantise(m.snr_db, -20.0, 0.1, 9);
        or_u32(b, 24, rsrp << 10); // RSRP Rx[0]
        or_u32(b, 28, rsrp << 12); // RSRP Rx[1]
        or_u32(b, 36, rsrp << 12); // RSRP
        or_u32(b, 40, rsrq << 12); // RSRQ Rx[0]
        or_u32(b, 44, rsrq | rsrq << 10); // RSRQ Rx[1], RSRQ
        or_u32(b, 60, rssi); // RSSI
        or_u32(b, 84, snr | snr << 9); // FTL SNR Rx[0], Rx[1]
        self.finish(out);
    }

    /// 0xB063 v1, one sub-packet (id 7) of version 4 with 0 or 1 sample.
    pub fn mac(&mut self, out: &mut Vec<u8>, unix_s: f64, m: &MacDlTransportBlock) {
        self.start(LOG_MAC_DL_TB, unix_s);
        let p = &mut self.packet;
        let n = u8::from(m.sample.is_some());
        p.extend_from_slice(&[1, 1, 0, 0, 7, 4]);
        p.extend_from_slice(&(5 + 14 * u16::from(n)).to_le_bytes());
        p.push(n);
        if let Some(s) = &m.sample {
            p.extend_from_slice(&[0, 0]); // Sub Id, Cell Id
            p.extend_from_slice(&(u16::from(m.sub_fn & 0x0F) | (m.sfn & 0x0FFF) << 4).to_le_bytes());
            p.extend_from_slice(&[0, s.harq_id, 0, 0]); // C-RNTI, HARQ ID, PMCH ID
            p.extend_from_slice(&(s.dl_tbs_bytes.min(0xFFFF) as u16).to_le_bytes());
            p.push(s.rlc_pdus);
            p.extend_from_slice(&(s.padding_bytes.min(0xFFFF) as u16).to_le_bytes());
            p.push(0); // HDR LEN
        }
        self.finish(out);
    }

    /// 0xB087 v1, one sub-packet 0x42 of version 3 with one bearer.
    pub fn rlc(&mut self, out: &mut Vec<u8>, unix_s: f64, m: &RlcDlStats) {
        self.start(LOG_RLC_DL_STATS, unix_s);
        let p = &mut self.packet;
        p.extend_from_slice(&[1, 1, 0, 0, 0x42, 3]);
        p.extend_from_slice(&(B087_SUBPACKET_BYTES as u16).to_le_bytes());
        let at = p.len();
        p.resize(at + B087_SUBPACKET_BYTES - 4, 0);
        let b = &mut p[at..];
        b[0] = 1; // Num RBs (bearers)
        put_u32(b, 1, counter(m.pdcp_q_full_count));
        b[9] = RB_CFG_IDX;
        b[10] = MODE_AM;
        // The counters, then their "since reset" copies 128 bytes on (never reset).
        for base in [0, 128] {
            put_u32(b, 51 + base, counter(m.num_retx_pdu));
            put_u32(b, 75 + base, counter(m.num_dropped_pdu));
            put_u32(b, 119 + base, counter(m.num_complete_nack));
        }
        self.finish(out);
    }

    /// 0xB0A4 v1, one sub-packet 0xC4 of version 2 with one bearer.
    pub fn pdcp(&mut self, out: &mut Vec<u8>, unix_s: f64, m: &PdcpDlStats) {
        self.start(LOG_PDCP_DL_STATS, unix_s);
        let p = &mut self.packet;
        p.extend_from_slice(&[1, 1, 0, 0, 0xC4, 2]);
        p.extend_from_slice(&(B0A4_SUBPACKET_BYTES as u16).to_le_bytes());
        let at = p.len();
        p.resize(at + B0A4_SUBPACKET_BYTES - 4, 0);
        let b = &mut p[at..];
        b[0] = 1;
        put_u32(b, 5, counter(m.offload_q_full_count));
        b[13] = RB_CFG_IDX;
        b[14] = MODE_AM;
        b[15] = 1; // PDCP Hdr Len
                   // Num PDU Dups and Num PDU Out of Win are 0 (in-order delivery, no duplicates).
        self.finish(out);
    }

    /// The frames of one subframe's record, in the JSON feed's order and selection;
    /// returns how many messages.
    pub fn record(&mut self, out: &mut Vec<u8>, unix_s: f64, r: &DiagRecord, with_stats: bool) -> u64 {
        self.pdsch(out, unix_s, &r.pdsch);
        let mut messages = 2;
        if r.measurement_updated {
            self.serv_cell(out, unix_s, &r.serv_cell);
            messages += 1;
        }
        self.mac(out, unix_s, &r.mac);
        if with_stats {
            self.rlc(out, unix_s, &r.rlc);
            self.pdcp(out, unix_s, &r.pdcp);
            messages += 2;
        }
        messages
    }
}

/// Counters of one UE's mi2log feed.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Mi2logCounters {
    /// Messages encoded: 0 when nothing took the feed (no `.mi2log` file, no subscriber,
    /// no pty), as the encoder runs only for a taker.
    pub encoded_messages: u64,
    /// Bytes produced.
    pub bytes: u64,
    /// Subscribers that connected to the TCP port.
    pub subscribers_accepted: u64,
    /// Subscribers disconnected for falling too far behind.
    pub subscribers_dropped_slow: u64,
    /// Times the pty reader fell too far behind and its backlog was dropped.
    pub pty_backlog_dropped: u64,
}

/// One UE's mi2log feed: its file, listener, subscribers and pty.
pub struct Mi2logFeed {
    listener: Option<TcpListener>,
    subscribers: Vec<Subscriber>,
    file: Option<BufWriter<File>>,
    pty: Option<Pty>,
    encoder: Encoder,
    frames: Vec<u8>,
    /// Whether frames for subscribers and the pty are held until [`Mi2logFeed::release`]
    /// (the phone's feed timing, `phone.rs`).
    hold: bool,
    /// The frames held.
    held: Vec<u8>,
    /// Counters.
    pub counters: Mi2logCounters,
}

/// Where one UE's mi2log feed is served.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Mi2logEndpoint {
    /// TCP port on 127.0.0.1 in the UE's namespace, if served.
    pub port: Option<u16>,
    /// The pseudo-terminal's path, if served.
    pub pty: Option<PathBuf>,
}

impl Mi2logFeed {
    /// Opens UE `ue`'s feed: the listener (in `ns`, port `diag_port + 1` or any when
    /// `diag_port` is 0), the file (if `file` and the config says so) and the pty.
    pub fn open(
        ue: usize,
        ns: &Namespace,
        diag_port: u16,
        output_dir: &Path,
        file: bool,
        config: &Mi2logConfig,
    ) -> Result<(Mi2logFeed, Mi2logEndpoint)> {
        let mut endpoint = Mi2logEndpoint::default();
        let listener = if config.tcp {
            let port = if diag_port == 0 { 0 } else { diag_port.checked_add(1).unwrap_or(0) };
            let listener = ns.run_in(|| {
                TcpListener::bind((Ipv4Addr::LOCALHOST, port)).context(|| {
                    format!("listening for the UE {ue} mi2log feed on 127.0.0.1:{port} in namespace {ns} (the JSON feed's port + 1)")
                })
            })?;
            listener.set_nonblocking(true).context(|| format!("making the UE {ue} mi2log listener non-blocking"))?;
            endpoint.port = Some(listener.local_addr().context(|| format!("reading the UE {ue} mi2log port"))?.port());
            Some(listener)
        } else {
            None
        };
        let file = if file && config.file {
            let path = output_dir.join(format!("diag-ue{ue}.mi2log"));
            let f = File::create(&path).context(|| format!("creating {}", path.display()))?;
            Some(BufWriter::with_capacity(1 << 16, f))
        } else {
            None
        };
        let pty = if config.pty {
            let pty = Pty::open().context(|| format!("opening a pseudo-terminal for the UE {ue} mi2log feed"))?;
            let link = output_dir.join(format!("diag-ue{ue}.pty"));
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&pty.path, &link).context(|| format!("creating {}", link.display()))?;
            endpoint.pty = Some(pty.path.clone());
            Some(pty)
        } else {
            None
        };
        let feed = Mi2logFeed {
            listener,
            subscribers: Vec::new(),
            file,
            pty,
            encoder: Encoder::default(),
            frames: Vec::with_capacity(4096),
            hold: false,
            held: Vec::new(),
            counters: Mi2logCounters::default(),
        };
        Ok((feed, endpoint))
    }

    /// The listener's descriptor, to watch for connections.
    pub fn listener_fd(&self) -> Option<libc::c_int> {
        self.listener.as_ref().map(|l| l.as_raw_fd())
    }

    /// Whether this feed holds a pty (a standing reader for the cell's hand-over).
    pub fn has_pty(&self) -> bool {
        self.pty.is_some()
    }

    /// Whether anything takes the bytes now.
    fn wanted(&self) -> bool {
        self.file.is_some() || !self.subscribers.is_empty() || self.pty.is_some()
    }

    /// Holds the live feed's frames until [`Mi2logFeed::release`] (`true`), or hands them
    /// over as each subframe comes (`false`, the default).
    pub fn set_held(&mut self, hold: bool) {
        self.hold = hold;
    }

    /// Encodes one subframe's record and hands the frames to the file, and to the
    /// subscribers and pty (or holds them for them).
    pub fn push_record(&mut self, unix_s: f64, record: &DiagRecord, with_stats: bool) {
        if !self.wanted() {
            return;
        }
        self.frames.clear();
        self.counters.encoded_messages += self.encoder.record(&mut self.frames, unix_s, record, with_stats);
        self.counters.bytes += self.frames.len() as u64;
        if let Some(file) = &mut self.file {
            let _ = file.write_all(&self.frames);
        }
        if self.hold {
            if !self.subscribers.is_empty() || self.pty.is_some() {
                self.held.extend_from_slice(&self.frames);
            }
        } else {
            let frames = std::mem::take(&mut self.frames);
            self.deliver(&frames);
            self.frames = frames;
        }
    }

    /// Whether frames are held for the subscribers and the pty.
    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// Hands the frames held to the subscribers and the pty.
    pub fn release(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.deliver(&held);
        self.held = held;
        self.held.clear();
    }

    /// Appends `frames` (whole frames) to every subscriber's buffer and the pty's.
    fn deliver(&mut self, frames: &[u8]) {
        if frames.is_empty() {
            return;
        }
        for sub in &mut self.subscribers {
            sub.pending.extend_from_slice(frames);
        }
        if let Some(pty) = &mut self.pty {
            if pty.check_reader() {
                if pty.pending.len() - pty.sent > super::SUBSCRIBER_BUFFER_BYTES {
                    // Too far behind: drop the backlog, start again at this frame boundary.
                    pty.pending.clear();
                    pty.sent = 0;
                    self.counters.pty_backlog_dropped += 1;
                }
                pty.pending.extend_from_slice(frames);
            }
        }
    }

    /// Accepts waiting subscribers; returns how many.
    pub fn accept(&mut self) -> usize {
        let Some(listener) = &self.listener else { return 0 };
        let mut n = 0;
        while let Ok((stream, _)) = listener.accept() {
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = stream.set_nodelay(true);
            self.subscribers.push(Subscriber { stream, pending: Vec::new(), sent: 0 });
            self.counters.subscribers_accepted += 1;
            n += 1;
        }
        n
    }

    /// Sends what the sockets and the pty take; returns how many subscribers left.
    pub fn pump(&mut self) -> usize {
        let before = self.subscribers.len();
        let mut slow = 0;
        self.subscribers.retain_mut(|sub| {
            if sub.pump().is_err() {
                false
            } else if sub.backlog_bytes() > super::SUBSCRIBER_BUFFER_BYTES {
                slow += 1;
                false
            } else {
                true
            }
        });
        self.counters.subscribers_dropped_slow += slow;
        if let Some(pty) = &mut self.pty {
            pty.pump();
        }
        before - self.subscribers.len()
    }

    /// Whether a subscriber or the pty has bytes not yet taken.
    pub fn backlog(&self) -> bool {
        self.subscribers.iter().any(|s| s.backlog_bytes() > 0)
            || self.pty.as_ref().is_some_and(|p| p.sent < p.pending.len())
    }

    /// Flushes the file.
    pub fn flush(&mut self) {
        if let Some(file) = &mut self.file {
            let _ = file.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_x25_check_value() {
        assert_eq!(crc16_x25(b"123456789"), 0x906E);
    }

    #[test]
    fn frames_escape_flag_and_escape_bytes() {
        let mut out = Vec::new();
        push_frame(&mut out, &[0x7E, 0x01, 0x7D]);
        assert_eq!(&out[..5], &[0x7D, 0x5E, 0x01, 0x7D, 0x5D]);
        assert_eq!(*out.last().unwrap(), 0x7E);
        assert_eq!(out.iter().filter(|&&b| b == 0x7E).count(), 1);
    }

    /// The byte-at-a-time CRC and framing, as the format defines them: the reference the
    /// fast ones are held to.
    fn crc_bytewise(data: &[u8]) -> u16 {
        let mut crc = 0xFFFFu16;
        for &b in data {
            crc = (crc >> 8) ^ CRC_TABLES[0][usize::from((crc ^ u16::from(b)) as u8)];
        }
        crc ^ 0xFFFF
    }

    fn frame_bytewise(payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in payload.iter().chain(crc_bytewise(payload).to_le_bytes().iter()) {
            if b == FLAG || b == ESCAPE {
                out.extend_from_slice(&[ESCAPE, b ^ 0x20]);
            } else {
                out.push(b);
            }
        }
        out.push(FLAG);
        out
    }

    #[test]
    fn fast_crc_and_framing_equal_the_bytewise_ones() {
        // Payloads of every length up to 600 (the largest sub-packet is 492 bytes) and a few
        // longer (zero runs beyond the run tables' largest step), of zeros, of random bytes,
        // of random bytes rich in flags and escapes, and of sparse bytes among zeros.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for len in (0..600).chain([4_095, 65_536, 70_001]) {
            let zeros = vec![0u8; len];
            let random: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let specials: Vec<u8> = (0..len).map(|_| [FLAG, ESCAPE, 0, next() as u8][(next() % 4) as usize]).collect();
            // Mostly zeros, as the padded sub-packets: runs of zero words of every length.
            let sparse: Vec<u8> = (0..len).map(|_| if next() % 61 == 0 { next() as u8 } else { 0 }).collect();
            for payload in [&zeros, &random, &specials, &sparse] {
                assert_eq!(crc16_x25(payload), crc_bytewise(payload), "length {len}");
                let mut out = vec![1, 2, 3];
                push_frame(&mut out, payload);
                assert_eq!(out[..3], [1, 2, 3]);
                assert_eq!(out[3..], frame_bytewise(payload), "length {len}");
            }
        }
    }

    #[test]
    fn quantise_rounds_half_up_and_clamps() {
        assert_eq!(quantise(Some(-11.5625), -30.0, 0.0625, 10), 295);
        assert_eq!(quantise(Some(-34.0), -30.0, 0.0625, 10), 0);
        assert_eq!(quantise(Some(100.0), -30.0, 0.0625, 10), 1023);
        assert_eq!(quantise(None, -20.0, 0.1, 9), 0);
        assert_eq!(quantise(Some(f64::INFINITY), -20.0, 0.1, 9), 0);
        assert_eq!(quantise(Some(14.0), -20.0, 0.1, 9), 340);
    }
}

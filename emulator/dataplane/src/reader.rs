//! The I/O thread: reads packets from every TUN device into pooled buffers and hands them
//! to the cell thread.
//!
//! One thread waits on all TUN descriptors with `epoll` and drains each ready device in
//! batches of up to [`READ_BATCH`] packets, round-robin, so a flood on one device cannot
//! starve the others. A device whose packets come one at a time (a paced flow: each wakes
//! the thread alone) is read one packet per wake-up instead: the read that would only say
//! "nothing more" is a third of the system calls per packet there, and `epoll` (level-
//! triggered) reports the device again at once if more was waiting. Each read lands in one scratch buffer large enough for a super-packet
//! and is copied into a pooled buffer of the packet's size; a TCP super-packet (segmentation
//! offload on, `crate::offload`) is split into its MSS segments on the way. Downlink packets
//! (from the core TUN) are sent to the UE their IPv4 destination belongs to. Only IPv4 is
//! forwarded: anything else (IPv6 router solicitations, MLD) is dropped and counted per
//! device. Nothing here blocks on the cell thread: a full hand-over queue or an exhausted
//! buffer pool drops the packet and counts it.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;

use crate::clock::{monotonic_now_ns, Nanos};
use crate::doorbell::Doorbell;
use crate::error::{is_transient, Context, Result};
use crate::handover::Handover;
use crate::offload::{split_tcp4, Offload, VnetHdr, VNET_HDR_BYTES};
use crate::pool::{Packet, Pool};
use crate::sys;
use crate::tun::Tun;

/// Packets read from one device before looking at the others.
pub const READ_BATCH: usize = 64;

/// Two packets read from a device in one-at-a-time mode closer together than this mean a
/// backlog: back to batches, ns.
const BACKLOG_GAP_NS: Nanos = 20_000;

/// Size of the read buffer: a virtio header and the largest IPv4 packet.
const READ_BUFFER_BYTES: usize = VNET_HDR_BYTES + 65_536;

/// How long `epoll_wait` blocks before the thread checks whether it should stop, ms.
const STOP_POLL_MS: i32 = 20;

/// Which way a packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Core → UE.
    Downlink = 0,
    /// UE → core.
    Uplink = 1,
}

/// A packet read from a TUN device.
#[derive(Debug)]
pub struct Arrival {
    /// The packet.
    pub packet: Packet,
    /// How it goes back to a TUN (checksum state, super-packet segment).
    pub offload: Offload,
    /// The UE it comes from (uplink) or goes to (downlink).
    pub ue: u16,
    /// Its direction.
    pub direction: Direction,
    /// When it was read, ns on the monotonic clock.
    pub read_at_mono_ns: Nanos,
}

/// The emulator's TUN devices: the core's and one per UE (index = UE number).
#[derive(Debug)]
pub struct Devices {
    /// The core network side.
    pub core: Tun,
    /// The UE side, one per UE.
    pub ues: Vec<Tun>,
}

/// What the I/O thread dropped, and why.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReaderCounters {
    /// Non-IPv4 packets dropped from the core TUN.
    pub non_ipv4_core: u64,
    /// Non-IPv4 packets dropped from each UE's TUN.
    pub non_ipv4_ue: Vec<u64>,
    /// Downlink packets whose destination is no UE's address.
    pub unroutable_downlink: u64,
    /// Packets dropped because every pooled buffer was in flight (a super-packet's
    /// segments count one by one).
    pub pool_exhausted: u64,
    /// Packets dropped because the hand-over queue to the cell thread was full (the cell
    /// thread is paused or cannot keep up).
    pub handover_full: u64,
    /// Reads that failed with something other than "nothing waiting".
    pub read_errors: u64,
    /// Super-packets read (segmentation offload).
    pub super_packets: u64,
    /// Segments they were split into.
    pub segments: u64,
    /// Packets dropped because their offload header could not be honoured (a segmentation
    /// type the emulator did not ask for, or a super-packet whose lengths disagree).
    pub offload_malformed: u64,
}

/// Maps a downlink destination address to its UE.
#[derive(Debug, Clone)]
pub struct Demux {
    /// (address, UE), sorted by address.
    by_addr: Vec<(u32, u16)>,
}

impl Demux {
    /// From each UE's address (index = UE number).
    pub fn new(ue_addrs: &[Ipv4Addr]) -> Demux {
        let mut by_addr: Vec<(u32, u16)> =
            ue_addrs.iter().enumerate().map(|(i, a)| (u32::from(*a), i as u16)).collect();
        by_addr.sort_unstable();
        Demux { by_addr }
    }

    /// The UE an IPv4 packet is addressed to.
    fn ue_of(&self, packet: &[u8]) -> Option<u16> {
        let dst = u32::from_be_bytes(packet.get(16..20)?.try_into().ok()?);
        self.by_addr.binary_search_by_key(&dst, |&(a, _)| a).ok().map(|i| self.by_addr[i].1)
    }
}

/// Whether `packet` is an IPv4 packet (version nibble 4, at least a minimal header).
fn is_ipv4(packet: &[u8]) -> bool {
    packet.len() >= 20 && packet[0] >> 4 == 4
}

/// An epoll instance watching every device for input.
pub struct Reader {
    epoll: OwnedFd,
    devices: Arc<Devices>,
    demux: Demux,
    pool: &'static Pool,
    out: Arc<Handover<Arrival>>,
    /// Rung after packets were handed over (it wakes an idle cell thread).
    bell: Arc<Doorbell>,
    /// Number of the next super-packet (segments carry it, so the writer can merge them).
    next_train: u32,
    /// Per device (token): read one packet per wake-up (its packets come one at a time).
    one_at_a_time: Vec<bool>,
    /// Per device: when its last packet was read, monotonic ns.
    last_read_ns: Vec<Nanos>,
    counters: ReaderCounters,
}

impl Reader {
    /// Registers every device with a new epoll instance; packets go to `out`, and `bell`
    /// rings after each batch handed over.
    pub fn new(
        devices: Arc<Devices>,
        demux: Demux,
        pool: &'static Pool,
        out: Arc<Handover<Arrival>>,
        bell: Arc<Doorbell>,
    ) -> Result<Reader> {
        let epoll = sys::epoll_create().context(|| "creating the epoll instance of the I/O thread".into())?;
        let all = std::iter::once(&devices.core).chain(devices.ues.iter());
        for (token, tun) in all.enumerate() {
            sys::epoll_watch(&epoll, tun.as_raw_fd(), token as u64)
                .context(|| format!("watching TUN {} for input", tun.name()))?;
        }
        let n_devices = 1 + devices.ues.len();
        let counters = ReaderCounters { non_ipv4_ue: vec![0; devices.ues.len()], ..ReaderCounters::default() };
        Ok(Reader {
            epoll,
            devices,
            demux,
            pool,
            out,
            bell,
            next_train: 0,
            one_at_a_time: vec![false; n_devices],
            last_read_ns: vec![0; n_devices],
            counters,
        })
    }

    /// Reads until `stop` is set; returns the counters.
    pub fn run(mut self, stop: &AtomicBool) -> ReaderCounters {
        let n_devices = 1 + self.devices.ues.len();
        let mut events = sys::epoll_events(n_devices);
        let mut ready: Vec<usize> = Vec::with_capacity(n_devices);
        let mut buffer = vec![0u8; READ_BUFFER_BYTES];
        while !stop.load(Ordering::Relaxed) {
            let n = sys::epoll_wait(&self.epoll, &mut events, STOP_POLL_MS);
            if n == 0 {
                continue; // timeout or EINTR: look at `stop` again
            }
            ready.clear();
            ready.extend(events[..n].iter().map(|e| e.u64 as usize));
            // Round-robin batches until every ready device is drained.
            while !ready.is_empty() {
                ready.retain(|&token| self.read_batch(token, &mut buffer));
                // Costs an atomic increment unless the cell thread sleeps idle.
                self.bell.ring();
            }
        }
        self.counters
    }

    /// Reads up to [`READ_BATCH`] packets from device `token` (0 = core, 1 + i = UE i).
    /// Returns whether the device may have more.
    fn read_batch(&mut self, token: usize, buffer: &mut [u8]) -> bool {
        let devices = Arc::clone(&self.devices);
        let tun = if token == 0 { &devices.core } else { &devices.ues[token - 1] };
        let limit = if self.one_at_a_time[token] { 1 } else { READ_BATCH };
        for n_read in 0..limit {
            let len = match tun.read(buffer) {
                Ok(len) => len,
                Err(e) => {
                    if !is_transient(&e) {
                        self.counters.read_errors += 1;
                    }
                    // A batch that found at most one packet: they come one at a time.
                    self.one_at_a_time[token] = n_read <= 1;
                    return false;
                }
            };
            let read_at_mono_ns = monotonic_now_ns();
            if self.one_at_a_time[token] && read_at_mono_ns - self.last_read_ns[token] < BACKLOG_GAP_NS {
                self.one_at_a_time[token] = false;
            }
            self.last_read_ns[token] = read_at_mono_ns;
            let (hdr, packet) = if tun.offload() {
                match VnetHdr::parse(&buffer[..len]) {
                    Some(hdr) => (Some(hdr), &buffer[VNET_HDR_BYTES..len]),
                    None => {
                        self.counters.offload_malformed += 1;
                        continue;
                    }
                }
            } else {
                (None, &buffer[..len])
            };
            let Some((ue, direction)) = self.route(token, packet) else { continue };
            let arrival = |packet: Packet, offload: Offload, counters: &mut ReaderCounters| match self
                .out
                .push(Arrival { packet, offload, ue, direction, read_at_mono_ns })
            {
                Ok(()) => true,
                Err(_) => {
                    counters.handover_full += 1;
                    false
                }
            };
            match hdr {
                Some(hdr) if hdr.is_tcp4_gso() => {
                    self.counters.super_packets += 1;
                    let train = self.next_train;
                    self.next_train = self.next_train.wrapping_add(1);
                    let (pool, counters) = (self.pool, &mut self.counters);
                    let split = split_tcp4(packet, &hdr, train, |headers, payload, offload| {
                        let Some(mut segment) = pool.take(headers.len() + payload.len()) else {
                            counters.pool_exhausted += 1;
                            return true;
                        };
                        let buf = segment.buffer_mut();
                        buf[..headers.len()].copy_from_slice(headers);
                        buf[headers.len()..headers.len() + payload.len()].copy_from_slice(payload);
                        segment.set_len(headers.len() + payload.len());
                        counters.segments += 1;
                        arrival(segment, offload, counters)
                    });
                    if split.is_err() {
                        self.counters.offload_malformed += 1;
                    }
                }
                Some(hdr) if !hdr.is_single() => self.counters.offload_malformed += 1,
                _ => match self.pool.copy_of(packet) {
                    Some(copy) => {
                        let offload = hdr.as_ref().map(Offload::of_single).unwrap_or_default();
                        arrival(copy, offload, &mut self.counters);
                    }
                    None => self.counters.pool_exhausted += 1,
                },
            }
        }
        // One at a time: epoll says whether more is waiting. A full batch: maybe more.
        !self.one_at_a_time[token] || limit == READ_BATCH
    }

    /// Where a packet read from device `token` goes: (UE, direction), or `None` (counted)
    /// if it is not IPv4 or no UE's.
    fn route(&mut self, token: usize, packet: &[u8]) -> Option<(u16, Direction)> {
        if !is_ipv4(packet) {
            if token == 0 {
                self.counters.non_ipv4_core += 1;
            } else {
                self.counters.non_ipv4_ue[token - 1] += 1;
            }
            return None;
        }
        if token != 0 {
            return Some(((token - 1) as u16, Direction::Uplink));
        }
        let ue = self.demux.ue_of(packet);
        if ue.is_none() {
            self.counters.unroutable_downlink += 1;
        }
        ue.map(|ue| (ue, Direction::Downlink))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_to(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn demux_by_destination() {
        let demux = Demux::new(&[Ipv4Addr::new(10, 0, 0, 9), Ipv4Addr::new(10, 0, 0, 2)]);
        assert_eq!(demux.ue_of(&ipv4_to([10, 0, 0, 2])), Some(1));
        assert_eq!(demux.ue_of(&ipv4_to([10, 0, 0, 9])), Some(0));
        assert_eq!(demux.ue_of(&ipv4_to([10, 0, 0, 3])), None);
        assert!(is_ipv4(&ipv4_to([1, 2, 3, 4])));
        let mut v6 = vec![0u8; 40];
        v6[0] = 0x60;
        assert!(!is_ipv4(&v6));
    }
}

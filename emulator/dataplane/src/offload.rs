//! TUN segmentation offload: super-packets in, MSS segments through the cell, merged writes
//! out.
//!
//! With `IFF_VNET_HDR` and `TUNSETOFFLOAD` (checksum + TCPv4 segmentation) the kernel hands
//! the emulator a bulk TCP flow as super-packets of up to 64 KB, each behind a
//! `virtio_net_hdr`, instead of one read per 1500-byte packet; checksums are left partial
//! (the TCP/UDP checksum field holds the pseudo-header sum, the receiver's kernel trusts
//! it, as for any locally generated packet). The cell must stay byte-accurate, so a
//! super-packet is split at once into the MSS segments the kernel would have sent, each a
//! packet of its own with its own headers: IP total length, ID (+1 per segment) and header
//! checksum, TCP sequence number, CWR only on the first segment and FIN/PSH only on the
//! last, as the kernel's own segmentation does. Everything after the reader sees ordinary
//! IP packets.
//!
//! On the way out, consecutive segments of one super-packet that are due at the same
//! instant on the same device are written as one merged packet with a GSO header: the
//! receiving stack takes it as the kernel's GRO would have merged those segments on a
//! real receiver, one pass through the stack instead of one per segment. Every byte still
//! arrives at the time the model gives it; a segment due later is written later.
//!
//! Layout of `virtio_net_hdr` (10 bytes, the host's byte order, which is the TUN's unless
//! `TUNSETVNETBE` is used): flags u8, gso_type u8, hdr_len u16, gso_size u16, csum_start
//! u16, csum_offset u16.

/// Bytes of the `virtio_net_hdr` in front of every packet on an offloading TUN.
pub const VNET_HDR_BYTES: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` is partial.
const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksum was already verified.
const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_NONE`.
const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`: datagrams of one flow, split by the receiving kernel.
const GSO_UDP_L4: u8 = 5;
/// Most datagrams the kernel splits one UDP super-packet into (`UDP_MAX_SEGMENTS`).
const MAX_UDP_SEGMENTS: usize = 64;
/// IPv4 (no options) + UDP header bytes.
const UDP4_HEADER_BYTES: usize = 28;

/// Largest IPv4 packet: the total-length field is 16 bits.
const MAX_IPV4_BYTES: usize = 65_535;
/// Longest IPv4 + TCP header, bytes (60 + 60).
pub const MAX_HEADER_BYTES: usize = 120;
/// Offset of the checksum in a TCP header.
const TCP_CHECKSUM_OFFSET: u16 = 16;
/// Offset of the checksum in a UDP header.
const UDP_CHECKSUM_OFFSET: u16 = 6;

/// TCP flag bits (header byte 13).
const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_PSH: u8 = 0x08;
const TCP_URG: u8 = 0x20;
const TCP_CWR: u8 = 0x80;

/// A `virtio_net_hdr`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `F_NEEDS_CSUM`, `F_DATA_VALID`.
    pub flags: u8,
    /// `GSO_*`.
    pub gso_type: u8,
    /// Bytes of headers in front of the segmented payload (a hint).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the partially checksummed range starts, bytes from the IP header.
    pub csum_start: u16,
    /// Where the checksum field is, bytes from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Reads the header at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Option<VnetHdr> {
        let b = bytes.get(..VNET_HDR_BYTES)?;
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        })
    }

    /// The 10 bytes of the header.
    pub fn to_bytes(self) -> [u8; VNET_HDR_BYTES] {
        let mut b = [0u8; VNET_HDR_BYTES];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }

    /// Whether this is a TCPv4 super-packet to split.
    pub fn is_tcp4_gso(&self) -> bool {
        self.gso_type == GSO_TCPV4
    }

    /// Whether the packet is a single packet (no segmentation asked for).
    pub fn is_single(&self) -> bool {
        self.gso_type == GSO_NONE
    }
}

/// What travels with a packet read from an offloading TUN, to write it back the same way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offload {
    /// The header's checksum flags (`F_NEEDS_CSUM`, `F_DATA_VALID`).
    pub csum_flags: u8,
    /// Start of the partially checksummed range, bytes from the IP header.
    pub csum_start: u16,
    /// Offset of its checksum field from `csum_start`.
    pub csum_offset: u16,
    /// The packet is a segment of a super-packet.
    pub segment: Option<Segment>,
}

impl Offload {
    /// The offload state of a single (not segmented) packet read behind `hdr`.
    pub fn of_single(hdr: &VnetHdr) -> Offload {
        Offload {
            csum_flags: hdr.flags & (F_NEEDS_CSUM | F_DATA_VALID),
            csum_start: hdr.csum_start,
            csum_offset: hdr.csum_offset,
            segment: None,
        }
    }

    /// Completes a partial checksum of `packet` (this packet's, `F_NEEDS_CSUM`) as the
    /// kernel would (the field holds the pseudo-header sum; the checksum covers it and every
    /// byte from `csum_start`), and returns the header to write it behind: no flags, so the
    /// receiving kernel verifies it like any packet from a wire. A packet capture at the
    /// receiver then sees a valid checksum (a partial one reads as corrupt). Packets without
    /// a partial checksum, or whose offsets do not fit, keep their header as read.
    pub fn complete_checksum(&self, packet: &mut [u8]) -> VnetHdr {
        // In usize: the header's offsets are whatever the kernel (or a corrupt header) says.
        let (start, field) =
            (usize::from(self.csum_start), usize::from(self.csum_start) + usize::from(self.csum_offset));
        if self.csum_flags & F_NEEDS_CSUM == 0 || field + 2 > packet.len() {
            return self.single_hdr();
        }
        let mut sum = !fold(ones_sum(&packet[start..], 0));
        // A UDP checksum of 0 means "none": the same value is sent as its other zero.
        if sum == 0 && self.csum_offset == UDP_CHECKSUM_OFFSET {
            sum = 0xffff;
        }
        packet[field..field + 2].copy_from_slice(&sum.to_be_bytes());
        VnetHdr::default()
    }

    /// The header to write this packet alone behind, as read.
    pub fn single_hdr(&self) -> VnetHdr {
        VnetHdr {
            flags: self.csum_flags,
            gso_type: GSO_NONE,
            hdr_len: 0,
            gso_size: 0,
            csum_start: self.csum_start,
            csum_offset: self.csum_offset,
        }
    }
}

/// Where a segment came from: its super-packet (`train`, numbered by the reader) and its
/// place in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The super-packet's number.
    pub train: u32,
    /// The segment's index in it, from 0.
    pub index: u16,
}

/// Why a super-packet could not be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitError {
    /// Not a well-formed, unfragmented TCP/IPv4 packet whose lengths agree.
    Malformed,
}

/// Lengths of a TCP/IPv4 packet's headers.
#[derive(Debug, Clone, Copy)]
struct Tcp4 {
    /// IPv4 header, bytes.
    ip_hl: usize,
    /// IPv4 + TCP headers, bytes.
    hl: usize,
}

/// Checks that `packet` is a complete, unfragmented TCP/IPv4 packet and returns its header
/// lengths.
fn tcp4(packet: &[u8]) -> Option<Tcp4> {
    let (&version_ihl, _) = packet.split_first()?;
    let ip_hl = usize::from(version_ihl & 0x0f) * 4;
    if version_ihl >> 4 != 4 || ip_hl < 20 || packet.len() < ip_hl + 20 || packet[9] != 6 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    // More-fragments set or a fragment offset: not a whole segment.
    let fragment = u16::from_be_bytes([packet[6], packet[7]]) & 0x3fff != 0;
    let hl = ip_hl + usize::from(packet[ip_hl + 12] >> 4) * 4;
    if total != packet.len() || fragment || hl < ip_hl + 20 || hl > packet.len() {
        return None;
    }
    Some(Tcp4 { ip_hl, hl })
}

/// The Internet checksum's one's-complement sum of `bytes` (16-bit big-endian words, from
/// an even offset), added to `sum` and not folded. Four bytes at a time: the sum of 32-bit
/// words folds to the same 16-bit sum, since 2^16 ≡ 1 modulo 2^16 − 1.
fn ones_sum(bytes: &[u8], mut sum: u64) -> u64 {
    let mut quads = bytes.chunks_exact(4);
    for q in &mut quads {
        sum += u64::from(u32::from_be_bytes([q[0], q[1], q[2], q[3]]));
    }
    let rest = quads.remainder();
    let mut pairs = rest.chunks_exact(2);
    for w in &mut pairs {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = pairs.remainder() {
        sum += u64::from(*last) << 8;
    }
    sum
}

/// Folds a one's-complement sum to 16 bits.
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Rewrites the IPv4 header checksum of the header `ip` (of length `ip.len()`).
fn set_ip_checksum(ip: &mut [u8]) {
    ip[10..12].copy_from_slice(&[0, 0]);
    let sum = !fold(ones_sum(ip, 0));
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// Sets the TCP checksum field of `headers` (IPv4 + TCP) to the partial checksum of a TCP
/// segment of `tcp_len` bytes (header + payload): the folded pseudo-header sum, which the
/// kernel completes over the segment (or trusts, delivering it locally).
fn set_tcp_pseudo_checksum(headers: &mut [u8], ip_hl: usize, tcp_len: usize) {
    set_pseudo_checksum(headers, ip_hl + usize::from(TCP_CHECKSUM_OFFSET), 6, tcp_len);
}

/// Sets the 16-bit field at `at` of `headers` to the folded pseudo-header sum of a
/// `protocol` datagram of `l4_len` bytes (its source and destination from the IPv4 header).
fn set_pseudo_checksum(headers: &mut [u8], at: usize, protocol: u8, l4_len: usize) {
    let sum = ones_sum(&headers[12..20], u64::from(protocol) + l4_len as u64);
    headers[at..at + 2].copy_from_slice(&fold(sum).to_be_bytes());
}

/// Checks that `packet` is a whole UDP/IPv4 datagram without IP options whose lengths agree
/// and that carries data: one a UDP super-packet can hold.
fn udp4(packet: &[u8]) -> bool {
    let Some(h) = packet.get(..UDP4_HEADER_BYTES) else { return false };
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let udp_len = usize::from(u16::from_be_bytes([h[24], h[25]]));
    let fragment = u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0;
    h[0] == 0x45
        && h[9] == 17
        && total == packet.len()
        && udp_len == packet.len() - 20
        && !fragment
        && packet.len() > UDP4_HEADER_BYTES
}

/// Splits the TCP/IPv4 super-packet `packet` (read behind `hdr`) into segments of
/// `hdr.gso_size` payload bytes, as the kernel's segmentation would, calling `emit` with
/// each segment's headers, its payload and its [`Offload`] (partial checksum, `train` and
/// index). `emit` returns false to stop (e.g. no buffer left).
pub fn split_tcp4(
    packet: &[u8],
    hdr: &VnetHdr,
    train: u32,
    mut emit: impl FnMut(&[u8], &[u8], Offload) -> bool,
) -> Result<(), SplitError> {
    let Tcp4 { ip_hl, hl } = tcp4(packet).ok_or(SplitError::Malformed)?;
    let mss = usize::from(hdr.gso_size);
    let payload = &packet[hl..];
    if mss == 0 || payload.is_empty() {
        return Err(SplitError::Malformed);
    }
    let n = payload.len().div_ceil(mss);
    if n > usize::from(u16::MAX) {
        return Err(SplitError::Malformed);
    }
    let id = u16::from_be_bytes([packet[4], packet[5]]);
    let seq = u32::from_be_bytes([packet[ip_hl + 4], packet[ip_hl + 5], packet[ip_hl + 6], packet[ip_hl + 7]]);
    let flags = packet[ip_hl + 13];
    let mut headers = [0u8; MAX_HEADER_BYTES];
    for (k, chunk) in payload.chunks(mss).enumerate() {
        let h = &mut headers[..hl];
        h.copy_from_slice(&packet[..hl]);
        h[2..4].copy_from_slice(&((hl + chunk.len()) as u16).to_be_bytes());
        h[4..6].copy_from_slice(&id.wrapping_add(k as u16).to_be_bytes());
        set_ip_checksum(&mut h[..ip_hl]);
        h[ip_hl + 4..ip_hl + 8].copy_from_slice(&seq.wrapping_add((k * mss) as u32).to_be_bytes());
        let mut f = flags;
        if k > 0 {
            f &= !TCP_CWR;
        }
        if k + 1 < n {
            f &= !(TCP_FIN | TCP_PSH);
        }
        h[ip_hl + 13] = f;
        set_tcp_pseudo_checksum(h, ip_hl, hl - ip_hl + chunk.len());
        let offload = Offload {
            csum_flags: F_NEEDS_CSUM,
            csum_start: ip_hl as u16,
            csum_offset: TCP_CHECKSUM_OFFSET,
            segment: Some(Segment { train, index: k as u16 }),
        };
        if !emit(h, chunk, offload) {
            break;
        }
    }
    Ok(())
}

/// What a merge is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Consecutive segments of one TCP super-packet (`train`), the next expected at
    /// `next_index`.
    TcpTrain { train: u32, next_index: u16 },
    /// Consecutive datagrams of one UDP flow (same addresses, ports, TOS, TTL), all the
    /// size of the first but the last.
    Udp,
}

/// A merged write being built from consecutive packets of one lane due at the same
/// instant: segments of one TCP super-packet (written as a TCPv4 GSO packet, which the
/// receiving stack takes as GRO's work) or datagrams of one UDP flow (written as a UDP GSO
/// packet, which the receiving kernel splits back into the datagrams before any socket sees
/// them).
#[derive(Debug)]
pub struct Merge {
    /// The merged packet's headers (those of its first packet, rewritten).
    headers: [u8; MAX_HEADER_BYTES],
    ip_hl: usize,
    hl: usize,
    kind: Kind,
    /// Payload bytes of the first packet: every packet but the last has as many.
    gso_size: usize,
    payload_bytes: usize,
    segments: usize,
}

impl Merge {
    /// Starts a merge at `packet` (read with `offload`) if it may take followers: a TCP
    /// segment not carrying CWR, SYN, RST or URG (a receiver's GRO would not merge those
    /// either), or a UDP/IPv4 datagram without options. `None` otherwise.
    pub fn start(packet: &[u8], offload: &Offload) -> Option<Merge> {
        let (ip_hl, hl, kind) = match offload.segment {
            Some(segment) => {
                let Tcp4 { ip_hl, hl } = tcp4(packet)?;
                if packet[ip_hl + 13] & (TCP_CWR | TCP_SYN | TCP_RST | TCP_URG) != 0 || packet.len() == hl {
                    return None;
                }
                (ip_hl, hl, Kind::TcpTrain { train: segment.train, next_index: segment.index.wrapping_add(1) })
            }
            None if udp4(packet) => (20, UDP4_HEADER_BYTES, Kind::Udp),
            None => return None,
        };
        let mut headers = [0u8; MAX_HEADER_BYTES];
        headers[..hl].copy_from_slice(&packet[..hl]);
        Some(Merge {
            headers,
            ip_hl,
            hl,
            kind,
            gso_size: packet.len() - hl,
            payload_bytes: packet.len() - hl,
            segments: 1,
        })
    }

    /// Whether `packet` may be the merge's next packet: the next segment of the same
    /// super-packet, or the next datagram of the same flow, after full-sized ones, keeping
    /// the merged packet within the IPv4 size limit.
    pub fn follows(&self, packet: &[u8], offload: &Offload) -> bool {
        self.payload_of(packet, offload).is_some()
    }

    fn payload_of<'p>(&self, packet: &'p [u8], offload: &Offload) -> Option<&'p [u8]> {
        // A packet shorter than the first is the last: nothing may follow it.
        if self.payload_bytes != self.gso_size * self.segments {
            return None;
        }
        match self.kind {
            Kind::TcpTrain { train, next_index } => {
                let segment = offload.segment?;
                if segment.train != train || segment.index != next_index {
                    return None;
                }
            }
            Kind::Udp => {
                let h = &self.headers;
                // Version, IHL, TOS; flags, TTL, protocol; addresses and ports: the same flow.
                let same = |r: std::ops::Range<usize>| packet.get(r.clone()) == h.get(r);
                if offload.segment.is_some()
                    || self.segments >= MAX_UDP_SEGMENTS
                    || !udp4(packet)
                    || !(same(0..2) && same(6..10) && same(12..24))
                {
                    return None;
                }
            }
        }
        let payload = packet.get(self.hl..).filter(|p| !p.is_empty() && p.len() <= self.gso_size)?;
        (self.hl + self.payload_bytes + payload.len() <= MAX_IPV4_BYTES).then_some(payload)
    }

    /// Takes `packet` as the merge's next packet if it [follows](Merge::follows); returns
    /// its payload (to write after the others') or `None`.
    pub fn extend<'p>(&mut self, packet: &'p [u8], offload: &Offload) -> Option<&'p [u8]> {
        let payload = self.payload_of(packet, offload)?;
        if let Kind::TcpTrain { next_index, .. } = &mut self.kind {
            *next_index = next_index.wrapping_add(1);
            // FIN and PSH of the last segment belong to the merged packet.
            self.headers[self.ip_hl + 13] |= packet[self.ip_hl + 13] & (TCP_FIN | TCP_PSH);
        }
        self.payload_bytes += payload.len();
        self.segments += 1;
        Some(payload)
    }

    /// Bytes of headers (IPv4 + TCP, or IPv4 + UDP) in front of each packet's payload.
    pub fn header_len(&self) -> usize {
        self.hl
    }

    /// The merged packet's virtio header and headers (its payloads follow, in order): the
    /// lengths, the IPv4 header checksum and the partial (pseudo-header) TCP or UDP
    /// checksum of the whole, as the kernel's own GSO packets have them.
    pub fn finish(&mut self) -> ([u8; VNET_HDR_BYTES], &[u8]) {
        let (ip_hl, hl) = (self.ip_hl, self.hl);
        let l4_len = hl - ip_hl + self.payload_bytes;
        let h = &mut self.headers[..hl];
        h[2..4].copy_from_slice(&((hl + self.payload_bytes) as u16).to_be_bytes());
        set_ip_checksum(&mut h[..ip_hl]);
        let (gso_type, csum_offset) = match self.kind {
            Kind::TcpTrain { .. } => {
                set_tcp_pseudo_checksum(h, ip_hl, l4_len);
                (GSO_TCPV4, TCP_CHECKSUM_OFFSET)
            }
            Kind::Udp => {
                h[ip_hl + 4..ip_hl + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
                set_pseudo_checksum(h, ip_hl + usize::from(UDP_CHECKSUM_OFFSET), 17, l4_len);
                (GSO_UDP_L4, UDP_CHECKSUM_OFFSET)
            }
        };
        let merged = self.segments > 1;
        let vnet = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: if merged { gso_type } else { GSO_NONE },
            hdr_len: if merged { hl as u16 } else { 0 },
            gso_size: if merged { self.gso_size as u16 } else { 0 },
            csum_start: ip_hl as u16,
            csum_offset,
        };
        (vnet.to_bytes(), h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP/IPv4 packet 10.0.0.1:1000 → 10.0.0.2:2000 with `payload`, timestamps option
    /// (12 bytes), sequence `seq`, flags `flags`, IP ID 7, full checksums.
    fn tcp_packet(payload: &[u8], seq: u32, flags: u8) -> Vec<u8> {
        let (ip_hl, tcp_hl) = (20, 32);
        let mut p = vec![0u8; ip_hl + tcp_hl];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((ip_hl + tcp_hl + payload.len()) as u16).to_be_bytes());
        p[4..6].copy_from_slice(&7u16.to_be_bytes());
        p[6] = 0x40; // DF
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&1000u16.to_be_bytes());
        p[22..24].copy_from_slice(&2000u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..32].copy_from_slice(&99u32.to_be_bytes());
        p[32] = ((tcp_hl / 4) as u8) << 4;
        p[33] = flags;
        p[34..36].copy_from_slice(&500u16.to_be_bytes());
        p[40..52].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        p.extend_from_slice(payload);
        set_ip_checksum(&mut p[..ip_hl]);
        let tcp_len = p.len() - ip_hl;
        let full = !fold(ones_sum(&p[ip_hl..], ones_sum(&p[12..20], 6 + tcp_len as u64)));
        p[ip_hl + 16..ip_hl + 18].copy_from_slice(&full.to_be_bytes());
        p
    }

    /// Completes a partial TCP checksum as the kernel would: the sum over the TCP bytes
    /// (whose checksum field holds the pseudo-header sum), complemented.
    fn complete_checksum(p: &mut [u8]) {
        let sum = !fold(ones_sum(&p[20..], 0));
        p[36..38].copy_from_slice(&sum.to_be_bytes());
    }

    fn gso_hdr(mss: u16) -> VnetHdr {
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 52,
            gso_size: mss,
            csum_start: 20,
            csum_offset: 16,
        }
    }

    #[test]
    fn vnet_header_round_trip() {
        let hdr = gso_hdr(1448);
        assert_eq!(VnetHdr::parse(&hdr.to_bytes()), Some(hdr));
        assert!(VnetHdr::parse(&[0u8; 9]).is_none());
    }

    #[test]
    fn split_matches_the_segments_the_kernel_would_send() {
        let payload: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let flags = TCP_CWR | TCP_PSH | 0x10;
        let mut super_packet = tcp_packet(&payload, 1_000_000, flags);
        // The kernel hands over a partial checksum: the pseudo-header sum.
        let tcp_len = super_packet.len() - 20;
        set_tcp_pseudo_checksum(&mut super_packet, 20, tcp_len);
        let mut segments = Vec::new();
        split_tcp4(&super_packet, &gso_hdr(1000), 5, |h, p, o| {
            segments.push(([h, p].concat(), o));
            true
        })
        .expect("splits");
        assert_eq!(segments.len(), 3);
        for (k, (seg, offload)) in segments.iter().enumerate() {
            let chunk = &payload[k * 1000..(k * 1000 + 1000).min(2500)];
            let seg_flags = match k {
                0 => 0x10 | TCP_CWR,
                1 => 0x10,
                _ => 0x10 | TCP_PSH,
            };
            let mut expected = tcp_packet(chunk, 1_000_000 + 1000 * k as u32, seg_flags);
            expected[4..6].copy_from_slice(&(7 + k as u16).to_be_bytes());
            set_ip_checksum(&mut expected[..20]);
            // The IP ID is not covered by the TCP checksum: `expected`'s stays valid.
            let mut completed = seg.clone();
            complete_checksum(&mut completed);
            assert_eq!(completed, expected, "segment {k}");
            assert_eq!(offload.segment, Some(Segment { train: 5, index: k as u16 }));
            assert_eq!((offload.csum_flags, offload.csum_start, offload.csum_offset), (F_NEEDS_CSUM, 20, 16));
        }
    }

    #[test]
    fn merged_segments_equal_the_super_packet() {
        let payload: Vec<u8> = (0..4000u32).map(|i| (i * 7) as u8).collect();
        let mut super_packet = tcp_packet(&payload, 42, TCP_PSH | TCP_FIN | 0x10);
        let tcp_len = super_packet.len() - 20;
        set_tcp_pseudo_checksum(&mut super_packet, 20, tcp_len);
        let mut segments = Vec::new();
        split_tcp4(&super_packet, &gso_hdr(1448), 1, |h, p, o| {
            segments.push(([h, p].concat(), o));
            true
        })
        .expect("splits");
        // Segments 1 and 2 (the rest of the super-packet) merge into one packet.
        let (first, first_off) = &segments[1];
        let mut merge = Merge::start(first, first_off).expect("a merge");
        let mut bytes = first[52..].to_vec();
        bytes.extend_from_slice(merge.extend(&segments[2].0, &segments[2].1).expect("next segment"));
        assert!(merge.extend(&segments[0].0, &segments[0].1).is_none(), "only the next index");
        let (vnet, headers) = merge.finish();
        let merged = [headers, &bytes].concat();
        assert_eq!(&merged[52..], &payload[1448..]);
        assert_eq!(u16::from_be_bytes([merged[2], merged[3]]) as usize, merged.len());
        assert_eq!(merged[33] & (TCP_FIN | TCP_PSH), TCP_FIN | TCP_PSH, "the last segment's flags");
        assert_eq!(u32::from_be_bytes([merged[24], merged[25], merged[26], merged[27]]), 42 + 1448);
        assert_eq!(fold(ones_sum(&merged[..20], 0)), 0xffff, "valid IP header checksum");
        let vnet = VnetHdr::parse(&vnet).expect("header");
        assert_eq!((vnet.gso_type, vnet.gso_size, vnet.hdr_len), (GSO_TCPV4, 1448, 52));
        // The partial checksum completes to a valid one.
        let mut done = merged.clone();
        complete_checksum(&mut done);
        let check = fold(ones_sum(&done[20..], ones_sum(&done[12..20], 6 + (done.len() - 20) as u64)));
        assert_eq!(check, 0xffff);
    }

    #[test]
    fn a_single_segment_is_written_with_its_checksum_complete() {
        let payload: Vec<u8> = (0..1001u32).map(|i| (i * 13) as u8).collect();
        let expected = tcp_packet(&payload, 77, TCP_PSH | 0x10);
        let mut partial = expected.clone();
        let tcp_len = partial.len() - 20;
        set_tcp_pseudo_checksum(&mut partial, 20, tcp_len);
        let offload = Offload { csum_flags: F_NEEDS_CSUM, csum_start: 20, csum_offset: 16, segment: None };
        let hdr = offload.complete_checksum(&mut partial);
        assert_eq!(partial, expected, "the checksum the sender's stack would have computed");
        assert_eq!(hdr, VnetHdr::default(), "no flags: the receiver verifies it");
        let plain = Offload::default();
        assert_eq!(plain.complete_checksum(&mut partial), plain.single_hdr());
    }

    /// A UDP/IPv4 datagram 10.0.0.1:1000 → 10.0.0.2:2000 with `payload`, IP ID `id`.
    fn udp_packet(payload: &[u8], id: u16) -> Vec<u8> {
        let mut p = vec![0u8; UDP4_HEADER_BYTES];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((UDP4_HEADER_BYTES + payload.len()) as u16).to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&1000u16.to_be_bytes());
        p[22..24].copy_from_slice(&2000u16.to_be_bytes());
        p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(payload);
        set_ip_checksum(&mut p[..20]);
        p
    }

    #[test]
    fn datagrams_of_one_flow_merge_into_a_udp_super_packet() {
        let single = Offload::default();
        let a = udp_packet(&[1u8; 100], 7);
        let b = udp_packet(&[2u8; 100], 8);
        let c = udp_packet(&[3u8; 40], 9);
        let mut merge = Merge::start(&a, &single).expect("a UDP datagram starts a merge");
        let mut other_port = b.clone();
        other_port[23] ^= 1;
        assert!(!merge.follows(&other_port, &single), "another flow");
        assert!(!merge.follows(&udp_packet(&[2u8; 101], 8), &single), "larger than the first");
        assert_eq!(merge.extend(&b, &single), Some(&b[28..]));
        assert_eq!(merge.extend(&c, &single), Some(&c[28..]));
        assert!(!merge.follows(&udp_packet(&[4u8; 40], 10), &single), "nothing after a short one");
        let (vnet, headers) = merge.finish();
        let vnet = VnetHdr::parse(&vnet).expect("header");
        assert_eq!((vnet.gso_type, vnet.gso_size, vnet.hdr_len, vnet.csum_offset), (GSO_UDP_L4, 100, 28, 6));
        assert_eq!(u16::from_be_bytes([headers[2], headers[3]]), 28 + 240);
        assert_eq!(u16::from_be_bytes([headers[24], headers[25]]), 8 + 240, "UDP length of the whole");
        assert_eq!(fold(ones_sum(&headers[..20], 0)), 0xffff, "valid IP header checksum");
        let pseudo = fold(ones_sum(&headers[12..20], 17 + 248));
        assert_eq!(u16::from_be_bytes([headers[26], headers[27]]), pseudo);
        let mut fragment = udp_packet(&[1u8; 100], 7);
        fragment[6] = 0x20;
        assert!(Merge::start(&fragment, &single).is_none(), "a fragment does not merge");
    }

    #[test]
    fn checksum_offsets_past_the_packet_leave_it_alone() {
        // A header whose offsets overflow 16 bits, or point past the packet (a fuzz find).
        for (csum_start, csum_offset) in [(u16::MAX, 10), (200, 16), (90, 9)] {
            let offload = Offload { csum_flags: F_NEEDS_CSUM, csum_start, csum_offset, segment: None };
            let mut packet = [7u8; 100];
            assert_eq!(offload.complete_checksum(&mut packet), offload.single_hdr());
            assert_eq!(packet, [7u8; 100]);
        }
    }

    #[test]
    fn what_does_not_merge() {
        let seg = tcp_packet(&[1u8; 100], 1, TCP_CWR | 0x10);
        let offload = Offload { segment: Some(Segment { train: 1, index: 0 }), ..Offload::default() };
        assert!(Merge::start(&seg, &offload).is_none(), "CWR is not merged");
        let plain = tcp_packet(&[1u8; 100], 1, 0x10);
        assert!(Merge::start(&plain, &Offload::default()).is_none(), "not a segment");
        let short = tcp_packet(&[1u8; 50], 1, 0x10);
        let mut merge = Merge::start(&short, &offload).expect("a merge");
        let next = Offload { segment: Some(Segment { train: 1, index: 1 }), ..Offload::default() };
        assert!(merge.extend(&plain, &next).is_none(), "nothing follows a shorter (last) segment");
        assert!(split_tcp4(&plain[..60], &gso_hdr(10), 0, |_, _, _| true).is_err(), "lengths disagree");
    }
}

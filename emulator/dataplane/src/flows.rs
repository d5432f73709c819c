//! TCP flows toward the UEs, followed from both TUNs for the scripted drops' triggers
//! (`cell::events`): where a downlink segment sits in its flow, and how many bytes the flow
//! has in flight.
//!
//! A flow is a UE's 4-tuple. Its byte 0 is the first payload byte: the one after the SYN
//! when the SYN (the server's SYN-ACK) passed, else the first segment's first byte.
//! Sequence numbers are unwrapped to 64 bits around the highest seen, so a flow longer than
//! 4 GiB keeps counting. Bytes in flight: the highest sequence end sent toward the UE (FIN
//! counted) minus the highest acknowledgment number the UE sent on the flow (0 before its
//! first ACK), as the emulator reads them: the segment where it enters from the core, the
//! ACK where it leaves the UE.
//!
//! Followed only while a drop event exists (the cell thread then looks up one hash map entry
//! per packet); the table is emptied if it ever holds [`MAX_FLOWS`] flows.

use std::collections::HashMap;

use cell::events::TcpSegment;

/// Flows kept at most; beyond, the table starts afresh (a flow seen again restarts at its
/// next segment).
pub const MAX_FLOWS: usize = 1 << 16;

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

/// A flow: the UE, the far end's address and port, the UE's port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FlowKey {
    ue: u16,
    far_address: [u8; 4],
    far_port: u16,
    ue_port: u16,
}

#[derive(Clone, Copy, Debug)]
struct Flow {
    /// Sequence number of byte 0.
    base: u32,
    /// Highest sequence end sent toward the UE, relative to byte 0.
    sent_end: i64,
    /// Highest acknowledgment from the UE, relative to byte 0.
    acked: i64,
}

impl Flow {
    /// `seq` relative to byte 0, unwrapped near the highest sequence end sent.
    fn relative(&self, seq: u32) -> i64 {
        let near = self.base.wrapping_add(self.sent_end as u32);
        self.sent_end + i64::from(seq.wrapping_sub(near) as i32)
    }
}

/// The header fields of an IPv4 TCP segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tcp {
    source: [u8; 4],
    destination: [u8; 4],
    source_port: u16,
    destination_port: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    payload_bytes: u32,
}

/// Reads an IPv4 TCP segment's header; `None` for anything else (other protocols, a
/// fragment after the first, a header that does not fit).
fn parse(packet: &[u8]) -> Option<Tcp> {
    let version_ihl = *packet.first()?;
    let ip_hl = usize::from(version_ihl & 0x0f) * 4;
    if version_ihl >> 4 != 4 || ip_hl < 20 || *packet.get(9)? != 6 {
        return None;
    }
    let fragment_offset = u16::from_be_bytes([*packet.get(6)?, *packet.get(7)?]) & 0x1fff;
    if fragment_offset != 0 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([*packet.get(2)?, *packet.get(3)?])).min(packet.len());
    let tcp = packet.get(ip_hl..total)?;
    let tcp_hl = usize::from(*tcp.get(12)? >> 4) * 4;
    if tcp_hl < 20 || tcp_hl > tcp.len() {
        return None;
    }
    let word = |at: usize| u32::from_be_bytes([tcp[at], tcp[at + 1], tcp[at + 2], tcp[at + 3]]);
    Some(Tcp {
        source: packet.get(12..16)?.try_into().ok()?,
        destination: packet.get(16..20)?.try_into().ok()?,
        source_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        destination_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        seq: word(4),
        ack: word(8),
        flags: tcp[13],
        payload_bytes: (tcp.len() - tcp_hl) as u32,
    })
}

/// The flows of every UE.
#[derive(Debug, Default)]
pub struct Flows {
    flows: HashMap<FlowKey, Flow>,
}

impl Flows {
    /// An empty table.
    pub fn new() -> Flows {
        Flows::default()
    }

    /// Flows followed.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether no flow is followed.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// A downlink IP packet toward UE `ue`: its place in its flow, if it is TCP.
    pub fn downlink(&mut self, ue: u16, packet: &[u8]) -> Option<TcpSegment> {
        let tcp = parse(packet)?;
        let key = FlowKey { ue, far_address: tcp.source, far_port: tcp.source_port, ue_port: tcp.destination_port };
        let syn = tcp.flags & TCP_SYN != 0;
        if self.flows.len() >= MAX_FLOWS && !self.flows.contains_key(&key) {
            self.flows.clear();
        }
        let base = if syn { tcp.seq.wrapping_add(1) } else { tcp.seq };
        let flow = self.flows.entry(key).or_insert(Flow { base, sent_end: 0, acked: 0 });
        if syn {
            // A new connection on the same 4-tuple starts afresh.
            *flow = Flow { base, sent_end: 0, acked: 0 };
            return Some(TcpSegment { first_byte: 0, payload_bytes: 0, in_flight_bytes: 0 });
        }
        let start = flow.relative(tcp.seq);
        let end = start + i64::from(tcp.payload_bytes) + i64::from(tcp.flags & TCP_FIN != 0);
        flow.sent_end = flow.sent_end.max(end);
        Some(TcpSegment {
            first_byte: start.max(0) as u64,
            payload_bytes: tcp.payload_bytes,
            in_flight_bytes: (flow.sent_end - flow.acked).max(0) as u64,
        })
    }

    /// An uplink IP packet from UE `ue`: an acknowledgment moves its flow's.
    pub fn uplink(&mut self, ue: u16, packet: &[u8]) {
        let Some(tcp) = parse(packet).filter(|t| t.flags & TCP_ACK != 0) else { return };
        let key =
            FlowKey { ue, far_address: tcp.destination, far_port: tcp.destination_port, ue_port: tcp.source_port };
        if let Some(flow) = self.flows.get_mut(&key) {
            let acked = flow.relative(tcp.ack);
            flow.acked = flow.acked.max(acked);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: [u8; 4] = [10, 200, 0, 1];
    const UE: [u8; 4] = [10, 200, 1, 2];

    /// An IPv4 TCP packet from `from` to `to` (ports 443 at the server, 40000 at the UE).
    fn packet(from: [u8; 4], to: [u8; 4], seq: u32, ack: u32, flags: u8, payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + payload];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        p[9] = 6;
        p[12..16].copy_from_slice(&from);
        p[16..20].copy_from_slice(&to);
        let (sport, dport) = if from == SERVER { (443u16, 40000u16) } else { (40000, 443) };
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..32].copy_from_slice(&ack.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = flags;
        p
    }

    #[test]
    fn bytes_in_flight_follow_the_segments_and_the_acks() {
        let mut flows = Flows::new();
        let isn = u32::MAX - 1000; // wraps inside the flow
        let syn_ack = flows.downlink(0, &packet(SERVER, UE, isn, 1, TCP_SYN | TCP_ACK, 0)).expect("tcp");
        assert_eq!(syn_ack.payload_bytes, 0);
        let mut seq = isn.wrapping_add(1);
        for i in 0..10u64 {
            let s = flows.downlink(0, &packet(SERVER, UE, seq, 1, TCP_ACK, 1448)).expect("tcp");
            assert_eq!(s.first_byte, i * 1448);
            assert_eq!(s.in_flight_bytes, (i + 1) * 1448);
            seq = seq.wrapping_add(1448);
        }
        // The UE acknowledges 4 segments: 6 remain in flight.
        flows.uplink(0, &packet(UE, SERVER, 1, isn.wrapping_add(1 + 4 * 1448), TCP_ACK, 0));
        let s = flows.downlink(0, &packet(SERVER, UE, seq, 1, TCP_ACK, 1448)).expect("tcp");
        assert_eq!((s.first_byte, s.in_flight_bytes), (10 * 1448, 7 * 1448));
        // A retransmission of byte 0 is where it was, and changes nothing in flight.
        let r = flows.downlink(0, &packet(SERVER, UE, isn.wrapping_add(1), 1, TCP_ACK, 1448)).expect("tcp");
        assert_eq!((r.first_byte, r.in_flight_bytes), (0, 7 * 1448));
        // An old ACK does not move it back; another UE's flow is another flow.
        flows.uplink(0, &packet(UE, SERVER, 1, isn.wrapping_add(1), TCP_ACK, 0));
        assert_eq!(flows.downlink(0, &packet(SERVER, UE, seq, 1, TCP_ACK, 0)).expect("tcp").in_flight_bytes, 7 * 1448);
        assert_eq!(flows.downlink(1, &packet(SERVER, UE, seq, 1, TCP_ACK, 100)).expect("tcp").first_byte, 0);
        assert_eq!(flows.len(), 2);
    }

    #[test]
    fn a_flow_seen_without_its_syn_starts_at_its_first_segment() {
        let mut flows = Flows::new();
        let s = flows.downlink(0, &packet(SERVER, UE, 5000, 1, TCP_ACK, 100)).expect("tcp");
        assert_eq!((s.first_byte, s.in_flight_bytes), (0, 100));
    }

    #[test]
    fn anything_but_tcp_over_ipv4_is_no_segment() {
        let mut flows = Flows::new();
        let mut udp = packet(SERVER, UE, 0, 0, 0, 10);
        udp[9] = 17;
        assert_eq!(flows.downlink(0, &udp), None);
        let mut fragment = packet(SERVER, UE, 0, 0, TCP_ACK, 10);
        fragment[6] = 0x00;
        fragment[7] = 0x10;
        assert_eq!(flows.downlink(0, &fragment), None);
        assert_eq!(flows.downlink(0, &[0x45, 0, 0]), None);
        let mut short_header = packet(SERVER, UE, 0, 0, TCP_ACK, 0);
        short_header[32] = 15 << 4; // claims 60 bytes of TCP header in a 20-byte one
        assert_eq!(flows.downlink(0, &short_header), None);
        assert!(flows.is_empty());
    }
}

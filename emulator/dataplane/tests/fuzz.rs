//! Property tests of the data plane's parsers of outside input: the packet headers of the
//! offload path (what the kernel hands over from a TUN, whatever an application sent), the
//! config file's text and the command line. Every input gives a result or an error with a
//! message, never a panic. Bounded case counts: seconds inside `cargo test`.

use std::path::Path;

use clap::Parser;
use emulator::config::{parse_rate_bps, Cli, Config};
use emulator::offload::{split_tcp4, Merge, Offload, Segment, VnetHdr, VNET_HDR_BYTES};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

/// A TCP/IPv4 packet: IHL `ihl` words, TCP data offset `doff` words, `payload`, with the
/// given flags; the total length field is right unless `total` overrides it.
fn tcp_packet(ihl: u8, doff: u8, flags: u8, total: Option<u16>, frag: u16, payload: &[u8]) -> Vec<u8> {
    let ip_hl = usize::from(ihl) * 4;
    let tcp_hl = usize::from(doff) * 4;
    let mut p = vec![0u8; ip_hl + tcp_hl.max(20)];
    p[0] = 0x40 | (ihl & 0x0f);
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&[10, 200, 0, 1]);
    p[16..20].copy_from_slice(&[10, 200, 1, 2]);
    if p.len() >= ip_hl + 14 {
        p[ip_hl + 12] = doff << 4;
        p[ip_hl + 13] = flags;
    }
    p.extend_from_slice(payload);
    let len = total.unwrap_or(p.len().min(65_535) as u16);
    p[2..4].copy_from_slice(&len.to_be_bytes());
    p
}

fn any_offload() -> impl Strategy<Value = Offload> {
    (any::<u8>(), any::<u16>(), any::<u16>(), proptest::option::of((any::<u32>(), any::<u16>()))).prop_map(
        |(csum_flags, csum_start, csum_offset, segment)| Offload {
            csum_flags,
            csum_start,
            csum_offset,
            segment: segment.map(|(train, index)| Segment { train, index }),
        },
    )
}

/// Runs every offload-path function over `packets` read behind `hdr`, as the reader and
/// the writer would; panics are the failure.
fn exercise(hdr: &VnetHdr, packets: &[Vec<u8>], offloads: &[Offload]) {
    for packet in packets {
        let mut segments: Vec<(Vec<u8>, Offload)> = Vec::new();
        let result = split_tcp4(packet, hdr, 7, |headers, payload, offload| {
            let mut segment = headers.to_vec();
            segment.extend_from_slice(payload);
            segments.push((segment, offload));
            segments.len() < 100
        });
        if result.is_ok() {
            assert!(!segments.is_empty(), "a split gives segments");
        }
        let mut copy = packet.clone();
        for offload in offloads {
            let _ = offload.complete_checksum(&mut copy);
            let _ = offload.single_hdr();
        }
        // Merge the segments back, and the raw packets with any offload state.
        let mut items: Vec<(Vec<u8>, Offload)> = segments;
        items.extend(packets.iter().cloned().zip(offloads.iter().copied()));
        let mut merge: Option<Merge> = None;
        for (packet, offload) in &items {
            match merge.as_mut() {
                Some(m) if m.follows(packet, offload) => {
                    assert!(m.extend(packet, offload).is_some(), "a follower extends");
                }
                _ => {
                    if let Some(mut m) = merge.take() {
                        let (vnet, headers) = m.finish();
                        assert_eq!(vnet.len(), VNET_HDR_BYTES);
                        assert!(headers.len() >= 20);
                    }
                    merge = Merge::start(packet, offload);
                }
            }
        }
        if let Some(mut m) = merge {
            let _ = m.finish();
            let _ = m.header_len();
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn vnet_headers_of_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
        match VnetHdr::parse(&bytes) {
            Some(hdr) => {
                prop_assert!(bytes.len() >= VNET_HDR_BYTES);
                prop_assert_eq!(&hdr.to_bytes()[..], &bytes[..VNET_HDR_BYTES]);
            }
            None => prop_assert!(bytes.len() < VNET_HDR_BYTES),
        }
    }

    #[test]
    fn arbitrary_packets_through_the_offload_path(
        hdr in proptest::collection::vec(any::<u8>(), VNET_HDR_BYTES),
        packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..4),
        offloads in proptest::collection::vec(any_offload(), 1..4),
    ) {
        let hdr = VnetHdr::parse(&hdr).unwrap_or_default();
        exercise(&hdr, &packets, &offloads);
    }

    #[test]
    fn tcp_super_packets_of_any_header_fields(
        ihl in 0u8..16, doff in 0u8..16, flags in any::<u8>(), frag in prop::sample::select(vec![0u16, 0x4000, 0x2000, 1]),
        wrong_total in proptest::option::of(any::<u16>()),
        payload_len in 0usize..3000, gso_size in prop::sample::select(vec![0u16, 1, 7, 536, 1448, 65535]),
        offloads in proptest::collection::vec(any_offload(), 1..3),
    ) {
        let payload: Vec<u8> = (0..payload_len).map(|i| i as u8).collect();
        let packet = tcp_packet(ihl, doff, flags, wrong_total, frag, &payload);
        let hdr = VnetHdr { flags: 1, gso_type: 1, hdr_len: 40, gso_size, csum_start: 20, csum_offset: 16 };
        exercise(&hdr, std::slice::from_ref(&packet), &offloads);
        // A well-formed super-packet splits into segments that carry its payload, in order.
        let well_formed = (5..=15).contains(&ihl) && (5..=15).contains(&doff) && wrong_total.is_none() && frag & 0x3fff == 0;
        if well_formed && gso_size > 0 && payload_len > 0 {
            let mut carried = Vec::new();
            split_tcp4(&packet, &hdr, 1, |_, chunk, _| { carried.extend_from_slice(chunk); true })
                .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            prop_assert_eq!(carried, payload);
        }
    }

    #[test]
    fn config_text_of_any_shape(text in "[a-z_\\[\\]=\"0-9., \\n{}:-]{0,200}") {
        for json in [false, true] {
            if let Err(e) = Config::from_text(&text, json, Path::new("/nonexistent")) {
                prop_assert!(!e.to_string().is_empty());
                prop_assert_eq!(e.exit_code(), 2);
            }
        }
    }

    #[test]
    fn config_files_with_any_values(
        entries in proptest::collection::vec((
            prop::sample::select(vec![
                "mode", "seed", "output_dir", "duration_s", "loop_trace", "realtime_priority", "tun_offload",
                "max_packets", "mtu_bytes", "delays.core_down_ms", "delays.air_ms", "delays.sr_period_ms",
                "delays.grant_delay_ms", "delays.core_delay_trace", "core.netns", "core.tun", "core.address",
                "core.routes", "diag.stats_period_ms", "affinity.cell", "cell.n_rb", "cell.n_antennas",
                "cell.scheduler", "cell.loss", "cell.default_other_users", "cell.harq.max_tx", "cell.harq.bler",
                "cell.rlc.max_retx", "cell.rsrq.hold_ms", "cell.rrc.tail_ms",
            ]),
            prop::sample::select(vec![
                "0", "1", "-1", "7", "50", "255", "65536", "18446744073709551615", "1e308", "-0.5", "0.5", "nan", "inf",
                "true", "\"\"", "\"cell\"", "\"rate\"", "\"round-robin\"", "\"fifo\"", "\"10.200.0.1\"", "\"x/y\"",
                "[1, 2]", "[\"default\", \"10.0.0.0/8\", \"10.1.2.3/33\"]", "[99999]",
                "{ kind = \"fixed\", probability = 0.5 }", "{ kind = \"fixed\", probability = 7 }",
                "{ kind = \"correlated\", x = 1 }", "{ name = 1 }",
            ]),
        ), 0..10),
        events in proptest::collection::vec(prop::sample::select(vec![
            "kind = \"drop\"\nin_flight_bytes = 300000", "kind = \"drop\"", "kind = \"drop\"\nat_ms = 1\npacket = 2",
            "kind = \"drop\"\nseq_byte = -1", "kind = \"outage\"\nat_ms = 3000\nms = 500", "kind = \"outage\"\nms = 1",
            "kind = \"capacity\"\nat_ms = 1\nfactor = 0.5", "kind = \"capacity\"\nat_ms = 1\nfactor = nan",
            "kind = \"burst\"\nat_ms = 0\nms = 5\nshare = 1.5", "kind = \"burst\"\nat_ms = 0\nms = 5\nshare = 0.6\nue = 3",
            "kind = \"nope\"", "at_ms = 5", "kind = 5", "kind = \"outage\"\nue = 99\nat_ms = 1\nms = 1",
        ]), 0..4),
        ues in proptest::collection::vec(prop::sample::select(vec![
            "netns = \"a\"", "netns = \"a\"\nrate = \"5mbit\"", "netns = \"b\"\nrate = \"1gbit\"\naddress = \"10.200.0.1\"",
            "netns = \"/proc/1/ns/net\"\nrate = \"1\"", "netns = \"\"", "netns = \"c\"\nuplink_rate = \"1mbps\"\nrate = \"1mbit\"",
            "netns = \"d\"\nrate = \"2mbit\"\ndiag_port = 0\n[ues.cell]\nqueue = \"drop-tail\"\nqueue_limit_bytes = 0",
        ]), 0..4),
    ) {
        let mut text = String::new();
        let mut tables: std::collections::BTreeMap<&str, Vec<String>> = std::collections::BTreeMap::new();
        for (key, value) in &entries {
            let (table, leaf) = key.rsplit_once('.').unwrap_or(("", key));
            tables.entry(table).or_default().push(format!("{leaf} = {value}"));
        }
        for line in tables.remove("").unwrap_or_default() {
            text += &line;
            text.push('\n');
        }
        for (table, lines) in tables {
            text += &format!("[{table}]\n{}\n", lines.join("\n"));
        }
        for ue in &ues {
            text += &format!("[[ues]]\n{ue}\n");
        }
        for event in &events {
            text += &format!("[[events]]\n{event}\n");
        }
        if let Err(e) = Config::from_text(&text, false, Path::new("/nonexistent")) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn command_lines_of_any_flags(
        args in proptest::collection::vec((
            prop::sample::select(vec![
                "--mode", "--rate", "--uplink-rate", "--seed", "--scheduler", "--policy", "--queue-bytes",
                "--core-delay-ms", "--air-delay-ms", "--sr-period-ms", "--core-netns", "--ue-netns", "--ue-address",
                "--diag-port", "--duration-s", "--realtime-priority", "--max-packets", "--mtu", "--ue-tun", "--event",
            ]),
            prop::sample::select(vec![
                "0", "1", "-1", "1e308", "nan", "12mbit", "12mbps", "rate", "cell", "round-robin", "fifo",
                "loss=fixed,probability=0.1", "loss=fixed,probability=nan", "queue=drop-tail", "scheduler=",
                "=", "x=y,z", "10.200.1.9", "cbxu0", "a-very-long-interface-name", "4294967296",
                "drop:in_flight_bytes=300000", "outage:at_ms=3000,ms=500", "capacity:at_ms=2000,factor=0.5,ms=1000",
                "burst:at_ms=1000,ms=2000,share=0.6", "drop:", "outage:at_ms", ":ms=1", "burst:share=x",
                "drop:packet=0,ue=1", "capacity:factor=1e400,at_ms=1",
            ]),
        ), 0..8),
    ) {
        let mut argv = vec!["clawbed-emu".to_string()];
        for (flag, value) in &args {
            argv.push((*flag).to_string());
            argv.push((*value).to_string());
        }
        if let Ok(cli) = Cli::try_parse_from(&argv) {
            if let Err(e) = Config::load(&cli) {
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }

    #[test]
    fn rates_of_any_text(text in "[0-9.]{0,8}[a-zA-Z ]{0,5}") {
        match parse_rate_bps(&text) {
            Ok(bps) => prop_assert!((1..=1_000_000_000_000).contains(&bps)),
            Err(e) => prop_assert!(!e.is_empty()),
        }
    }
}

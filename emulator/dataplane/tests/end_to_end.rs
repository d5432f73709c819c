//! End to end: the real binary between two namespaces. Each test makes its own
//! `cbdpt<N>ue` / `cbdpt<N>core`, sends traffic through the emulator, stops it with SIGTERM
//! and checks that it exits cleanly and leaves no device behind. Needs root.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{have_root, run_failing, tcp_connect_in, tcp_listener_in, udp_in, write_trace, Emulator, Namespaces};
use emulator::netns::Namespace;

/// Checks the end of a run: exit code 0 and no TUN left in either namespace.
fn assert_clean_exit(ns: &Namespaces, code: i32) {
    assert_eq!(code, 0, "clean exit");
    assert!(Namespaces::links(&ns.ue).is_empty(), "UE namespace still has {:?}", Namespaces::links(&ns.ue));
    assert!(Namespaces::links(&ns.core).is_empty(), "core namespace still has {:?}", Namespaces::links(&ns.core));
}

#[test]
fn ping_through_a_constant_rate_link() {
    if !have_root() {
        return;
    }
    let ns = Namespaces::create(1);
    let out = ns.path("out");
    let emu = Emulator::start(&[
        "--mode",
        "rate",
        "--rate",
        "12mbit",
        "--core-netns",
        &ns.core,
        "--ue-netns",
        &ns.ue,
        "-o",
        &out,
    ]);
    assert_eq!(emu.ready["ues"][0]["tun"], ns.ue.as_str());
    assert_eq!(Namespaces::links(&ns.ue), std::slice::from_ref(&ns.ue), "the UE TUN exists while serving");

    let ping = Command::new("ip")
        .args(["netns", "exec", &ns.ue, "ping", "-q", "-n", "-c", "5", "-i", "0.2", "-W", "2", "10.200.0.1"])
        .output()
        .expect("ping");
    let text = String::from_utf8_lossy(&ping.stdout);
    assert!(ping.status.success(), "ping failed: {text}");
    // rtt min/avg/max/mdev = a/b/c/d ms
    let avg_ms: f64 = text
        .lines()
        .find(|l| l.contains("rtt"))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|v| v.trim().split('/').nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no rtt in {text}"));
    // Defaults: 2 × 25 ms core, SR wait (≤ 10 ms) + 8 ms grant, air and subframe alignment.
    // Only the model's floor is asserted: how far above it a loaded machine lands is for
    // the benchmark to measure, not for a test to guess.
    assert!(avg_ms >= 55.0, "idle RTT {avg_ms} ms is below the configured delays");

    let (code, counters) = emu.stop();
    assert_clean_exit(&ns, code);
    let ue = &counters["engine"]["ues"][0];
    assert_eq!(ue["uplink"]["delivered"]["packets"], 5);
    assert_eq!(ue["downlink"]["delivered"]["packets"], 5);
    assert_eq!(counters["io"]["non_ipv4_ue"][0], 0, "IPv6 is off on the TUN");
    for file in ["counters.json", "truth.cbcol", "packets.cbcol", "diag-ue0.jsonl"] {
        assert!(ns.dir.join("out").join(file).is_file(), "{file} written");
    }
}

#[test]
fn udp_downlink_through_the_cell_with_diag_feed() {
    if !have_root() {
        return;
    }
    let ns = Namespaces::create(2);
    let trace = ns.path("trace.csv");
    write_trace(std::path::Path::new(&trace), 3000, 20);
    let out = ns.path("out");
    let emu = Emulator::start(&[
        "--trace",
        &trace,
        "--core-netns",
        &ns.core,
        "--ue-netns",
        &ns.ue,
        "--diag-port",
        "0",
        "-o",
        &out,
    ]);
    let port = emu.ready["ues"][0]["diag_port"].as_u64().expect("diag port");

    // A diag subscriber inside the UE namespace.
    let ue_ns = Namespace::open(&ns.ue, "test").expect("ue ns");
    let feed = ue_ns
        .run_in(|| {
            TcpStream::connect(("127.0.0.1", port as u16))
                .map_err(|e| emulator::error::Error::Os { attempted: "connecting".into(), source: e })
        })
        .expect("diag connection");
    feed.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let mut lines = BufReader::new(feed).lines();
    let first: serde_json::Value =
        serde_json::from_str(&lines.next().expect("a line").expect("read")).expect("JSON line");
    assert!(first["type_id"].as_str().is_some_and(|t| t.starts_with("LTE_")), "{first}");
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
    let lag_s = now_s - first["timestamp"].as_f64().expect("timestamp");
    assert!((-0.01..0.5).contains(&lag_s), "the feed is paced in real time (lag {lag_s} s)");

    let rx = udp_in(&ns.ue, "10.200.1.2:9000");
    // Generous: the loop ends at the last packet; the timeout only ends it when packets were
    // lost, and must not end it early on a busy machine.
    rx.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let tx = udp_in(&ns.core, "10.200.0.1:0");
    let start = Instant::now();
    let sent = 200;
    // Sending from another thread while this one reads, so the receive buffer never fills.
    let sender = std::thread::spawn(move || {
        for i in 0..sent {
            tx.send_to(&[i as u8; 1000], "10.200.1.2:9000").expect("send");
            std::thread::sleep(Duration::from_micros(500));
        }
    });
    let mut received = 0;
    let mut first_arrival = None;
    let mut buf = [0u8; 2000];
    let mut last_seq: Option<u8> = None;
    while let Ok(n) = rx.recv(&mut buf) {
        // Whole datagrams, in order, unchanged (several arrive merged into one write).
        assert_eq!(n, 1000);
        assert!(buf[..n].iter().all(|&b| b == buf[0]), "datagram {} intact", buf[0]);
        assert!(last_seq.is_none_or(|last| buf[0] > last), "in order");
        last_seq = Some(buf[0]);
        first_arrival.get_or_insert_with(|| start.elapsed());
        received += 1;
        if received == sent {
            break;
        }
    }
    sender.join().expect("sender");
    // The trace's core_delay_ms column (20 ms) applies, plus at least one subframe and the
    // 1 ms air delay.
    let first_arrival = first_arrival.expect("something arrived");
    assert!(first_arrival >= Duration::from_millis(21), "one-way delay {first_arrival:?}");
    // RLC may lose a few; the calibration puts losses well below 2%.
    assert!(received >= sent - 4, "received {received} of {sent}");

    let (code, counters) = emu.stop();
    assert_clean_exit(&ns, code);
    let dl = &counters["engine"]["ues"][0]["downlink"];
    assert_eq!(dl["received"]["packets"], sent);
    assert_eq!(dl["delivered"]["packets"], received);
    assert_eq!(dl["write_errors"]["packets"], 0);
    assert!(counters["tx"]["merged_writes"].as_u64().expect("count") > 0, "datagrams merged: {}", counters["tx"]);
    assert!(counters["records"]["truth_rows"].as_u64().expect("rows") > 0);
    assert!(counters["diag"]["subscribers_accepted"][0] == 1);
    let truth = std::fs::read(ns.dir.join("out/truth.cbcol")).expect("truth file");
    assert_eq!(&truth[..8], b"CBCOLS\0\0");
}

/// The byte at `offset` of the test stream: a pattern that a lost, repeated or reordered
/// range would break.
fn pattern(offset: u64) -> u8 {
    (offset.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Sends `total` bytes of the pattern on `tx` and reads them from `rx`, checking each.
fn send_and_check(mut tx: std::net::TcpStream, mut rx: std::net::TcpStream, total: u64) {
    let sender = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut sent = 0u64;
        while sent < total {
            let n = (total - sent).min(buf.len() as u64) as usize;
            for (i, b) in buf[..n].iter_mut().enumerate() {
                *b = pattern(sent + i as u64);
            }
            tx.write_all(&buf[..n]).expect("send");
            sent += n as u64;
        }
        tx.shutdown(std::net::Shutdown::Write).expect("shutdown");
    });
    let mut got = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    rx.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    loop {
        let n = rx.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        for (i, &b) in buf[..n].iter().enumerate() {
            assert_eq!(b, pattern(got + i as u64), "byte {} of the stream", got + i as u64);
        }
        got += n as u64;
    }
    sender.join().expect("sender");
    assert_eq!(got, total, "every byte arrived");
}

#[test]
fn tcp_both_ways_through_segmentation_offload() {
    if !have_root() {
        return;
    }
    let ns = Namespaces::create(5);
    let out = ns.path("out");
    let emu = Emulator::start(&[
        "--mode",
        "rate",
        "--rate",
        "2gbit",
        "--uplink-rate",
        "2gbit",
        "--core-delay-ms",
        "1",
        "--sr-period-ms",
        "0",
        "--grant-delay-ms",
        "0",
        "--core-netns",
        &ns.core,
        "--ue-netns",
        &ns.ue,
        "-o",
        &out,
    ]);
    assert_eq!(emu.ready["n_rb"], 50, "the cell's N_rb is in the ready line");
    assert_eq!(emu.ready["start_sfn"], 0);
    let total = 30 << 20;
    // Downlink: the core sends, the UE receives.
    let listener = tcp_listener_in(&ns.ue, "10.200.1.2:9001");
    let tx = tcp_connect_in(&ns.core, "10.200.1.2:9001");
    let (rx, _) = listener.accept().expect("accept");
    send_and_check(tx, rx, total);
    // Uplink: the UE sends, the core receives.
    let listener = tcp_listener_in(&ns.core, "10.200.0.1:9002");
    let tx = tcp_connect_in(&ns.ue, "10.200.0.1:9002");
    let (rx, _) = listener.accept().expect("accept");
    send_and_check(tx, rx, total);

    let (code, counters) = emu.stop();
    assert_clean_exit(&ns, code);
    assert_eq!(counters["tun_offload"], true);
    let io = &counters["io"];
    assert!(io["super_packets"].as_u64().expect("count") > 0, "the kernel handed over super-packets: {io}");
    assert_eq!(io["offload_malformed"], 0);
    assert!(counters["tx"]["merged_writes"].as_u64().expect("count") > 0, "{}", counters["tx"]);
    let ue = &counters["engine"]["ues"][0];
    for direction in ["downlink", "uplink"] {
        let d = &ue[direction];
        assert_eq!(d["write_errors"]["packets"], 0, "{direction}: {d}");
        assert!(d["delivered"]["bytes"].as_u64().expect("bytes") > total, "{direction}: headers included");
    }
    let truth = std::fs::read(ns.dir.join("out/truth.cbcol")).expect("truth file");
    let header_len = u32::from_le_bytes(truth[12..16].try_into().expect("4 bytes")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&truth[16..16 + header_len]).expect("header");
    assert_eq!((&header["start_sfn"], &header["n_rb"], &header["n_antennas"]), (&0.into(), &50.into(), &2.into()));
}

#[test]
fn pause_holds_packets_until_resume() {
    if !have_root() {
        return;
    }
    let ns = Namespaces::create(3);
    let out = ns.path("out");
    let emu = Emulator::start(&[
        "--mode",
        "rate",
        "--rate",
        "50mbit",
        "--core-delay-ms",
        "5",
        "--core-netns",
        &ns.core,
        "--ue-netns",
        &ns.ue,
        "-o",
        &out,
    ]);
    let rx = udp_in(&ns.ue, "10.200.1.2:9000");
    let tx = udp_in(&ns.core, "10.200.0.1:0");
    let mut buf = [0u8; 100];

    emu.signal(libc::SIGUSR1);
    std::thread::sleep(Duration::from_millis(50));
    tx.send_to(b"held", "10.200.1.2:9000").expect("send");
    rx.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
    assert!(rx.recv(&mut buf).is_err(), "nothing is delivered while paused");

    emu.signal(libc::SIGUSR2);
    // Generous, so a busy machine cannot fail it: the packet arrives as soon as time resumes.
    rx.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let n = rx.recv(&mut buf).expect("delivered after resume");
    assert_eq!(&buf[..n], b"held");

    let (code, counters) = emu.stop();
    assert_clean_exit(&ns, code);
    assert!(
        counters["engine"]["paused_ms"].as_f64().expect("paused_ms") >= 250.0,
        "{}",
        counters["engine"]["paused_ms"]
    );
}

#[test]
fn bad_config_exits_2_and_creates_nothing() {
    if !have_root() {
        return;
    }
    let ns = Namespaces::create(4);
    // Should any of these start after all, its files go to the scratch directory.
    let out = ns.path("out");
    let missing_ns = format!("{}x", ns.ue);
    let (code, err) =
        run_failing(&["--rate", "1mbit", "--core-netns", &ns.core, "--ue-netns", &missing_ns, "-o", &out]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ues[0].netns") && err.contains("does not exist"), "{err}");

    let bad_trace = ns.path("bad.csv");
    std::fs::write(&bad_trace, "# clawbed-trace 1\nnot json\n").expect("write");
    let (code, err) = run_failing(&["--trace", &bad_trace, "--core-netns", &ns.core, "--ue-netns", &ns.ue, "-o", &out]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.csv"), "the error names the trace: {err}");

    let (code, err) = run_failing(&["--rate", "12mbps", "--core-netns", &ns.core, "--ue-netns", &ns.ue, "-o", &out]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--rate"), "{err}");

    // A TUN name already taken in the UE namespace: the core TUN made before it is removed.
    common::ip(&["-n", &ns.ue, "tuntap", "add", "dev", &ns.ue, "mode", "tun"]);
    let (code, err) = run_failing(&["--rate", "1mbit", "--core-netns", &ns.core, "--ue-netns", &ns.ue, "-o", &out]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("creating TUN {} in namespace {}", ns.ue, ns.ue)) && err.contains("already exists"),
        "{err}"
    );
    assert!(Namespaces::links(&ns.core).is_empty(), "core TUN removed after the failure");
}

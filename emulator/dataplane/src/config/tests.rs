use clap::Parser;

use super::*;

fn cli(args: &[&str]) -> Cli {
    Cli::parse_from(std::iter::once("clawbed-emu").chain(args.iter().copied()))
}

#[test]
fn rates() {
    assert_eq!(parse_rate_bps("12mbit"), Ok(12_000_000));
    assert_eq!(parse_rate_bps("1.5Mbit"), Ok(1_500_000));
    assert_eq!(parse_rate_bps("800"), Ok(800));
    assert!(parse_rate_bps("12mbps").is_err_and(|e| e.contains("byte units")));
    assert!(parse_rate_bps("fast").is_err());
    assert!(parse_rate_bps("0kbit").is_err());
}

#[test]
fn flags_alone_make_a_rate_config() {
    let c = Config::load(&cli(&[
        "--rate",
        "12mbit",
        "--core-netns",
        "cbxcore",
        "--ue-netns",
        "cbxue0",
        "--ue-netns",
        "cbxue1",
    ]))
    .expect("valid");
    assert_eq!(c.ues.len(), 2);
    assert_eq!(c.ues[1].tun, "cbxue1");
    assert_eq!(c.ues[1].address, Ipv4Addr::new(10, 200, 1, 3));
    assert_eq!(c.mode, Mode::Rate, "a rate and no trace mean mode rate");
    assert!(matches!(c.ues[0].downlink, Downlink::Rate { bps: 12_000_000 }));
    assert_eq!(c.core_routes, ["10.200.1.2", "10.200.1.3"]);
    assert_eq!(c.core_down_ns, 25_000_000);
}

#[test]
fn errors_name_the_field() {
    let e = Config::load(&cli(&["--mode", "rate", "--core-netns", "cbxcore", "--ue-netns", "cbxue0"]))
        .expect_err("no rate");
    assert!(e.to_string().contains("ues[0].rate"), "{e}");
    assert_eq!(e.exit_code(), 2);
    let e = Config::load(&cli(&[
        "--mode",
        "cell",
        "--core-netns",
        "cbxcore",
        "--ue-netns",
        "cbxue0",
        "--trace",
        "/nonexistent.cbt",
    ]))
    .expect_err("missing trace");
    assert!(e.to_string().contains("ues[0].trace") && e.to_string().contains("not a file"), "{e}");
    let e = Config::load(&cli(&[
        "--mode",
        "rate",
        "--rate",
        "1mbit",
        "--core-netns",
        "cbxcore",
        "--ue-netns",
        "cbxue0",
        "--ue-tun",
        "this-name-is-too-long",
    ]))
    .expect_err("long name");
    assert!(e.to_string().contains("ues[0].tun"), "{e}");
    let e = Config::load(&cli(&[
        "--mode",
        "rate",
        "--rate",
        "1mbit",
        "--core-netns",
        "cbxcore",
        "--ue-netns",
        "cbxue0",
        "--scheduler",
        "fifo",
    ]))
    .expect_err("bad scheduler");
    assert!(e.to_string().contains("--scheduler"), "{e}");
}

#[test]
fn policies_from_flags() {
    let base = ["--rate", "1mbit", "--core-netns", "cbxcore", "--ue-netns", "cbxue0", "--ue-netns", "cbxue1"];
    let with = |extra: &[&str]| Config::load(&cli(&[&base[..], extra].concat()));
    let c =
        with(&["--scheduler", "round-robin", "--policy", "loss=fixed,probability=0.25", "--policy", "queue=drop-tail"])
            .expect("valid");
    assert_eq!(c.cell.scheduler, PolicyChoice::named("round-robin"));
    assert_eq!(c.cell.loss, PolicyChoice::parse("fixed,probability=0.25").expect("parses"));
    assert!(c.ues.iter().all(|ue| ue.cell.queue == PolicyChoice::named("drop-tail")));
    for (flag, needle) in [
        ("loss=fixed,probability=2", "probability"),
        ("loss=nope", "one of correlated, fixed"),
        ("fair=round-robin", "unknown policy category"),
        ("round-robin", "CATEGORY=KIND"),
        ("scheduler=round-robin,x", "PARAM=VALUE"),
    ] {
        let e = with(&["--policy", flag]).expect_err(flag).to_string();
        assert!(e.contains("--policy") && e.contains(needle), "{flag}: {e}");
        assert_eq!(with(&["--policy", flag]).expect_err(flag).exit_code(), 2);
    }
}

#[test]
fn the_policy_list_python_reads_is_the_registry() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies.json");
    let expected = list_policies(true);
    if std::env::var_os("CLAWBED_BLESS").is_some() {
        std::fs::write(&path, &expected).expect("writing emulator/policies.json");
    }
    let found = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        found == expected,
        "emulator/policies.json differs from the cell crate's policy registry: regenerate it with \
         `CLAWBED_BLESS=1 cargo test -p emulator --lib config` (or `clawbed-emu --list-policies --json`)"
    );
    assert!(list_policies(false).contains("round-robin"));
}

#[test]
fn the_event_list_python_reads_is_the_registry() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../events.json");
    let expected = list_events();
    if std::env::var_os("CLAWBED_BLESS").is_some() {
        std::fs::write(&path, &expected).expect("writing emulator/events.json");
    }
    let found = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        found == expected,
        "emulator/events.json differs from the cell crate's event registry: regenerate it with \
         `CLAWBED_BLESS=1 cargo test -p emulator --lib config` (or `clawbed-emu --list-events`)"
    );
}

#[test]
fn events_from_flags_and_file_are_checked_naming_the_key() {
    let base = ["--rate", "1mbit", "--core-netns", "cbxcore", "--ue-netns", "cbxue0", "--ue-netns", "cbxue1"];
    let with = |extra: &[&str]| Config::load(&cli(&[&base[..], extra].concat()));
    let c = with(&["--event", "drop:in_flight_bytes=300000", "--event", "capacity:at_ms=1000,ms=2000,factor=0.6"])
        .expect("valid");
    assert_eq!(c.events.len(), 2);
    assert_eq!(c.events[1].kind, "capacity");
    for (flag, needle) in [
        ("outage:at_ms=3000", "ms: an outage event needs it"),
        ("capacity:at_ms=1,factor=0.5,ms=1,x=2", "x: unknown parameter"),
        ("drop", "exactly one of"),
        ("flood:at_ms=1", "kind: unknown `flood`"),
        ("outage at_ms=1", "is not KIND:PARAM=VALUE"),
    ] {
        let e = with(&["--event", flag]).expect_err(flag);
        assert!(e.to_string().contains("--event") && e.to_string().contains(needle), "{flag}: {e}");
        assert_eq!(e.exit_code(), 2);
    }
    let e = with(&["--event", "outage:ue=2,at_ms=1,ms=1"]).expect_err("UE 2 of 2");
    assert!(e.to_string().contains("events[0].ue"), "{e}");
    let e = with(&["--event", "outage:at_ms=1,ms=1", "--event", "burst:at_ms=1,ms=1,share=0.5"])
        .expect_err("no cell to share in mode rate");
    assert!(e.to_string().contains("events[1].kind") && e.to_string().contains("mode cell"), "{e}");
    let e = Config::from_text(
        r#"{"mode": "rate", "core": {"netns": "cbxcore"}, "ues": [{"netns": "cbxue0", "rate": "1mbit"}],
            "events": [{"kind": "outage", "at_ms": 1, "ms": 5}, {"kind": "outage", "at_ms": -3, "ms": 5},
                       {"kind": "burst", "at_ms": 1, "ms": 5, "share": 2}]}"#,
        true,
        Path::new("/"),
    )
    .expect_err("at_ms < 0");
    assert!(e.to_string().contains("events[1].at_ms"), "{e}");
}

#[test]
fn file_keys_are_checked() {
    let dir = std::env::temp_dir().join(format!("cbdp-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("emu.toml");
    std::fs::write(&path, "mode = \"rate\"\n[core]\nnetns = \"cbxcore\"\n[[ues]]\nnetns = \"cbxue0\"\nrate = \"5mbit\"\n[ues.cell]\nqueue_limit_bytes = 100000\n[delays]\nair_ms = 2\n")
        .expect("write");
    let c = Config::load(&cli(&["-c", path.to_str().expect("utf8"), "--air-delay-ms", "0.5"])).expect("valid");
    assert_eq!(c.air_ns, 500_000, "the flag overrides the file");
    assert_eq!(c.ues[0].cell.queue_limit_bytes, 100_000);
    assert_eq!(c.output_dir, dir.join("clawbed-emu-out"), "relative to the file");
    std::fs::write(
        &path,
        "mode = \"rate\"\n[core]\nnetns = \"cbxcore\"\n[[ues]]\nnetns = \"cbxue0\"\nrat = \"5mbit\"\n",
    )
    .expect("write");
    let e = Config::load(&cli(&["-c", path.to_str().expect("utf8")])).expect_err("typo");
    assert!(e.to_string().contains("rat"), "{e}");
    std::fs::write(&path, "[core]\nnetns = \"cbxcore\"\n[[ues]]\nnetns = \"cbxue0\"\n[cell.harq]\nmax_tx = 99\n")
        .expect("write");
    let e = Config::load(&cli(&["-c", path.to_str().expect("utf8"), "--mode", "rate", "--rate", "1mbit"]))
        .expect_err("range");
    assert!(e.to_string().contains("cell.harq.max_tx"), "{e}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn feed_timing_defaults_to_the_phone_and_is_checked() {
    use crate::diag::phone::{FeedTiming, PhoneTiming};
    let base = ["--rate", "1mbit", "--core-netns", "cbxcore", "--ue-netns", "cbxue0"];
    let c = Config::load(&cli(&base)).expect("valid");
    assert_eq!(c.diag_packing(), Some(PhoneTiming::default()));
    let c = Config::load(&cli(&[&base[..], &["--feed-timing", "ideal"]].concat())).expect("valid");
    assert_eq!((c.diag_feed_timing, c.diag_packing()), (FeedTiming::Ideal, None));
    let text = "mode = \"rate\"\n[core]\nnetns = \"cbxcore\"\n[[ues]]\nnetns = \"cbxue0\"\nrate = \"1mbit\"\n";
    let c = Config::from_text(
        &format!("{text}[diag]\nfeed_timing = \"phone\"\nphone = {{ flush_period_ms = 50 }}\n"),
        false,
        Path::new("."),
    )
    .expect("valid");
    assert_eq!(c.diag_packing(), Some(PhoneTiming { records_per_packet: 21, flush_period_ms: 50 }));
    let e = Config::from_text(&format!("{text}[diag.phone]\nrecords_per_packet = 0\n"), false, Path::new("."))
        .expect_err("zero");
    assert!(e.to_string().contains("diag.phone.records_per_packet"), "{e}");
    let e = Config::from_text(&format!("{text}[diag]\nfeed_timing = \"late\"\n"), false, Path::new("."))
        .expect_err("unknown timing");
    assert!(e.to_string().contains("feed_timing") || e.to_string().contains("late"), "{e}");
}

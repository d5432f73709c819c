//! `clawbed-emu`: the emulator process. See `clawbed-emu --help` and `../README.md`.
//!
//! Order of work, so that a mistake leaves nothing behind: validate the config and load
//! every trace (exit code 2 on a problem, nothing created yet), open the namespaces, create
//! and configure the TUN devices, bind the diag listeners, create the output files, start
//! the threads, print `ready {...}`. On SIGINT/SIGTERM (or the end of the run): stop,
//! flush, print `counters {...}`, write `counters.json`, remove the devices.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use clap::Parser;
use serde_json::json;

use emulator::clock::{TimeBase, NANOS_PER_MS};
use emulator::config::{Cli, Config};
use emulator::diag::DiagServer;
use emulator::engine::{Engine, InFlight, Outputs, Timing};
use emulator::error::{Context, Error, Result};
use emulator::netns::Namespace;
use emulator::pool::Pool;
use emulator::reader::{Demux, Devices, Reader};
use emulator::records;
use emulator::signals::Signals;
use emulator::tun::{Ipv4Prefix, LinkSetup, Tun};

/// Capacity of the I/O thread → cell thread queue, packets (a few ms at 10 Gbit/s).
const ARRIVAL_QUEUE_PACKETS: usize = 32_768;
/// Capacity of the cell thread → diag thread queue, subframes (2 s).
const DIAG_QUEUE_SUBFRAMES: usize = 2_000;
/// Capacity of the cell thread → recorder queue, records.
const RECORD_QUEUE_ITEMS: usize = 1 << 17;
/// Time zero is this long after setup ends, so the threads are running by subframe 0.
const START_DELAY_NS: i64 = 20 * NANOS_PER_MS;

fn main() {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("clawbed-emu: {e}");
            std::process::exit(e.exit_code());
        }
    }
}

/// Parses routes already validated by the config.
fn prefixes(routes: &[String], field: &str) -> Result<Vec<Ipv4Prefix>> {
    routes.iter().map(|r| r.parse().map_err(|e: String| Error::config(field, e))).collect()
}

fn run(cli: &Cli) -> Result<()> {
    let config = Config::load(cli)?;
    let (cell, links) = emulator::model::build::<InFlight>(&config)?;
    if cli.check {
        println!("{}", serde_json::to_string_pretty(&config).unwrap_or_default());
        return Ok(());
    }
    let signals = Signals::install()?;

    let core_ns = Namespace::open(&config.core_netns, "core.netns")?;
    let ue_ns = config
        .ues
        .iter()
        .enumerate()
        .map(|(i, ue)| Namespace::open(&ue.netns, &format!("ues[{i}].netns")))
        .collect::<Result<Vec<_>>>()?;

    let core = Tun::create(
        &core_ns,
        &config.core_tun,
        &LinkSetup {
            address: config.core_address,
            mtu_bytes: config.mtu_bytes,
            routes: prefixes(&config.core_routes, "core.routes")?,
        },
    )?;
    let mut ue_tuns = Vec::with_capacity(config.ues.len());
    for (i, (ue, ns)) in config.ues.iter().zip(&ue_ns).enumerate() {
        let setup = LinkSetup {
            address: ue.address,
            mtu_bytes: config.mtu_bytes,
            routes: prefixes(&ue.routes, &format!("ues[{i}].routes"))?,
        };
        ue_tuns.push(Tun::create(ns, &ue.tun, &setup)?);
    }
    let devices = Arc::new(Devices { core, ues: ue_tuns });

    std::fs::create_dir_all(&config.output_dir)
        .context(|| format!("creating the output directory {}", config.output_dir.display()))?;
    let diag_at: Vec<(&Namespace, u16)> = ue_ns.iter().zip(&config.ues).map(|(ns, ue)| (ns, ue.diag_port)).collect();
    let (diag_server, endpoints) = DiagServer::bind(&diag_at, &config.output_dir)?;

    let time = TimeBase::starting_in(START_DELAY_NS);
    let meta = json!({
        "origin_unix_ns": time.origin_unix_ns(),
        "created_by": concat!("clawbed-emu ", env!("CARGO_PKG_VERSION")),
        "mode": config.mode,
        "seed": config.seed,
        "ues": config.ues.iter().map(|u| json!({"netns": u.netns, "address": u.address})).collect::<Vec<_>>(),
    });
    let (truth_out, packets_out) = records::create_files(&config.output_dir, &meta)?;

    let pool = Pool::new(config.max_packets, config.mtu_bytes as usize);
    let reader = Reader::new(
        Arc::clone(&devices),
        Demux::new(&config.ues.iter().map(|u| u.address).collect::<Vec<_>>()),
        Arc::clone(&pool),
    )?;
    let (arrival_tx, arrival_rx) = crossbeam_channel::bounded(ARRIVAL_QUEUE_PACKETS);
    let (diag_tx, diag_rx) = crossbeam_channel::bounded(DIAG_QUEUE_SUBFRAMES);
    let (record_tx, record_rx) = crossbeam_channel::bounded(RECORD_QUEUE_ITEMS);
    let stop_reading = Arc::new(AtomicBool::new(false));

    let stats_period = u64::from(config.diag_stats_period_ms);
    let diag_thread = thread::Builder::new()
        .name("cb-diag".into())
        .spawn(move || diag_server.serve(diag_rx, stats_period))
        .context(|| "starting the diag thread".into())?;
    let record_thread = thread::Builder::new()
        .name("cb-record".into())
        .spawn(move || records::record(record_rx, truth_out, packets_out))
        .context(|| "starting the recorder thread".into())?;
    let stop = Arc::clone(&stop_reading);
    let reader_thread = thread::Builder::new()
        .name("cb-io".into())
        .spawn(move || reader.run(arrival_tx, &stop))
        .context(|| "starting the I/O thread".into())?;

    let engine = Engine::new(
        cell,
        links,
        Arc::clone(&devices),
        arrival_rx,
        Outputs { diag: diag_tx, records: record_tx },
        Timing {
            air_ns: config.air_ns,
            sr_period_ns: config.sr_period_ns,
            grant_delay_ns: config.grant_delay_ns,
            duration_ms: config.duration_ms,
        },
        time,
    );
    let ready = json!({
        "pid": std::process::id(),
        "core": {"netns": config.core_netns, "tun": config.core_tun, "address": config.core_address},
        "ues": config.ues.iter().zip(&endpoints).map(|(u, e)| json!({
            "netns": u.netns, "tun": u.tun, "address": u.address, "diag_port": e.port,
        })).collect::<Vec<_>>(),
        "output_dir": config.output_dir,
        "origin_unix_ns": time.origin_unix_ns(),
    });
    println!("ready {ready}");
    // The control plane waits for this line; a closed stdout must not stop the run.
    let _ = std::io::stdout().flush();

    // The cell thread is this one.
    if let Err(e) = emulator::clock::minimise_timer_slack() {
        eprintln!("clawbed-emu: warning: {e}");
    }
    let mut realtime = json!(null);
    if let Some(priority) = config.realtime_priority {
        realtime = match emulator::clock::set_realtime_priority(priority) {
            Ok(()) => json!(priority),
            Err(e) => {
                eprintln!("clawbed-emu: warning: {e}; running at normal priority");
                json!(format!("refused: {e}"))
            }
        };
    }
    let engine_counters = engine.run(&signals);

    stop_reading.store(true, Ordering::Relaxed);
    let join_failed = |what: &str| Error::Os {
        attempted: format!("joining the {what} thread"),
        source: std::io::Error::other("it panicked"),
    };
    let reader_counters = reader_thread.join().map_err(|_| join_failed("I/O"))?;
    let diag_counters = diag_thread.join().map_err(|_| join_failed("diag"))?;
    let record_counters = record_thread.join().map_err(|_| join_failed("recorder"))?;

    let counters = json!({
        "emulated_ms": engine_counters.subframes,
        "realtime_priority": realtime,
        "engine": engine_counters,
        "io": reader_counters,
        "diag": diag_counters,
        "records": record_counters,
        "pool_buffers_allocated": pool.allocated(),
    });
    println!("counters {counters}");
    let _ = std::io::stdout().flush();
    let path = config.output_dir.join("counters.json");
    std::fs::write(&path, serde_json::to_string_pretty(&counters).unwrap_or_default() + "\n")
        .context(|| format!("writing {}", path.display()))?;
    // Dropping the devices (last reference) removes the TUN devices.
    drop(devices);
    Ok(())
}

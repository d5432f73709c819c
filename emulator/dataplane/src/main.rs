//! `clawbed-emu`: the emulator process. See `clawbed-emu --help` and `../README.md`.
//!
//! Order of work, so that a mistake leaves nothing behind: validate the config and load
//! every trace (exit code 2 on a problem, nothing created yet), open the namespaces, create
//! and configure the TUN devices, bind the diag listeners, create the output files, start
//! the threads, print `ready {...}`. SIGUSR1/SIGUSR2 pause and resume the clock; SIGHUP
//! plays the traces from the trace time in `<output dir>/seek` on (the file is removed once
//! applied). On SIGINT/SIGTERM (or the end of the run): stop,
//! flush, print `counters {...}`, write `counters.json`, remove the devices.

#![forbid(unsafe_code)]

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use clap::Parser;
use serde_json::json;

use emulator::clock::{lock_memory, CpuLatencyRequest, ThreadReport, ThreadSetup, TimeBase, NANOS_PER_MS};
use emulator::config::{Cli, Config};
use emulator::diag::{DiagQueue, DiagServer};
use emulator::doorbell::Doorbell;
use emulator::engine::{Engine, InFlight, Outputs, Timing, SEEK_FILE};
use emulator::error::{Context, Error, Result};
use emulator::handover::Handover;
use emulator::netns::Namespace;
use emulator::pool::Pool;
use emulator::reader::{Demux, Devices, Reader};
use emulator::records::{self, RecordQueues};
use emulator::signals::Signals;
use emulator::tun::{Ipv4Prefix, LinkSetup, Tun};
use emulator::tx::{Lane, TxQueue, Writer};

/// Time zero is this long after setup ends, so the threads are running by subframe 0.
const START_DELAY_NS: i64 = 20 * NANOS_PER_MS;

fn main() {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => {}
        Err(e) => {
            emulator::report!("clawbed-emu: {e}");
            std::process::exit(e.exit_code());
        }
    }
}

/// Parses routes already validated by the config.
fn prefixes(routes: &[String], field: &str) -> Result<Vec<Ipv4Prefix>> {
    routes.iter().map(|r| r.parse().map_err(|e: String| Error::config(field, e))).collect()
}

/// Starts a thread that applies `setup` to itself, then runs `work`.
fn spawn<T: Send + 'static>(
    setup: ThreadSetup,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<thread::JoinHandle<(T, ThreadReport)>> {
    let name = setup.name;
    thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let report = setup.apply();
            (work(), report)
        })
        .context(|| format!("starting thread {name}"))
}

/// Joins a thread started by [`spawn`].
fn join<T>(handle: thread::JoinHandle<(T, ThreadReport)>, what: &str) -> Result<(T, ThreadReport)> {
    handle.join().map_err(|_| Error::Os {
        attempted: format!("joining the {what} thread"),
        source: std::io::Error::other("it panicked"),
    })
}

fn run(cli: &Cli) -> Result<()> {
    if cli.list_policies {
        print!("{}", emulator::config::list_policies(cli.json));
        return Ok(());
    }
    if cli.list_events {
        print!("{}", emulator::config::list_events());
        return Ok(());
    }
    let config = Config::load(cli)?;
    let (cell, links) = emulator::model::build::<InFlight>(&config)?;
    if cli.check {
        println!("{}", serde_json::to_string_pretty(&config).unwrap_or_default());
        return Ok(());
    }
    let signals = Signals::install()?;
    // Before the queues, the pool and the threads exist, so they are locked as they are made.
    let memory_locked = match config.realtime_priority {
        None => json!(false),
        Some(_) => match lock_memory() {
            Ok(()) => json!(true),
            Err(e) => {
                emulator::report!(
                    "clawbed-emu: warning: locking memory (mlockall): {e}; real-time threads may page-fault"
                );
                json!(format!("refused: {e}"))
            }
        },
    };

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
            offload: config.tun_offload,
        },
    )?;
    let mut ue_tuns = Vec::with_capacity(config.ues.len());
    for (i, (ue, ns)) in config.ues.iter().zip(&ue_ns).enumerate() {
        let setup = LinkSetup {
            address: ue.address,
            mtu_bytes: config.mtu_bytes,
            routes: prefixes(&ue.routes, &format!("ues[{i}].routes"))?,
            offload: config.tun_offload,
        };
        ue_tuns.push(Tun::create(ns, &ue.tun, &setup)?);
    }
    let devices = Arc::new(Devices { core, ues: ue_tuns });

    std::fs::create_dir_all(&config.output_dir)
        .context(|| format!("creating the output directory {}", config.output_dir.display()))?;
    let diag_at: Vec<(&Namespace, u16, bool)> =
        ue_ns.iter().zip(&config.ues).map(|(ns, ue)| (ns, ue.diag_port, config.diag_file && ue.diag_file)).collect();
    let any_file = diag_at.iter().any(|&(_, _, file)| file);
    let (diag_server, endpoints) =
        DiagServer::bind(&diag_at, &config.output_dir, &config.diag_mi2log, config.diag_packing())?;
    let diag_queue = Arc::new(DiagQueue::new(any_file)?);

    let time = Arc::new(TimeBase::starting_in(START_DELAY_NS));
    // What a reader of the files and the feed needs to line them up with the trace.
    let cell_meta = json!({"start_sfn": cell.start_sfn(), "n_rb": cell.n_rb(), "n_antennas": cell.n_antennas()});
    let meta = json!({
        "origin_unix_ns": time.origin_unix_ns(),
        "created_by": concat!("clawbed-emu ", env!("CARGO_PKG_VERSION")),
        "mode": config.mode,
        "seed": config.seed,
        "start_sfn": cell_meta["start_sfn"],
        "n_rb": cell_meta["n_rb"],
        "n_antennas": cell_meta["n_antennas"],
        "ues": config.ues.iter().map(|u| json!({"netns": u.netns, "address": u.address})).collect::<Vec<_>>(),
    });
    let (truth_out, packets_out) = records::create_files(&config.output_dir, &meta)?;

    let pool = Pool::new(config.max_packets, config.mtu_bytes as usize);
    // Both queues hold as many packets as the pool has buffers: a packet that got a buffer
    // always fits.
    let arrivals = Arc::new(Handover::new(config.max_packets));
    let arrival_bell = Arc::new(Doorbell::new());
    let reader = Reader::new(
        Arc::clone(&devices),
        Demux::new(&config.ues.iter().map(|u| u.address).collect::<Vec<_>>()),
        pool,
        Arc::clone(&arrivals),
        Arc::clone(&arrival_bell),
    )?;
    let tx_queue = Arc::new(TxQueue::new(config.max_packets));
    let record_queues = Arc::new(RecordQueues::new());
    let stop_reading = Arc::new(AtomicBool::new(false));

    let affinity = &config.affinity;
    let (cell_cpus, tx_cpus) = affinity.clock_cpus(&emulator::clock::allowed_cpus());
    let plain =
        |name: &'static str, cpus: &Vec<usize>| ThreadSetup { name, cpus: cpus.clone(), ..ThreadSetup::default() };
    let timed = |name: &'static str, cpus: &Vec<usize>| ThreadSetup {
        name,
        realtime_priority: config.realtime_priority,
        cpus: cpus.clone(),
        precise_timers: true,
    };
    let stats_period = u64::from(config.diag_stats_period_ms);
    let queue = Arc::clone(&diag_queue);
    let diag_thread = spawn(plain("cb-diag", &affinity.diag), move || diag_server.serve(queue, stats_period))?;
    let queues = Arc::clone(&record_queues);
    let flush = signals.flush_flag();
    let record_thread =
        spawn(plain("cb-record", &affinity.record), move || records::record(queues, truth_out, packets_out, &flush))?;
    let stop = Arc::clone(&stop_reading);
    let reader_thread = spawn(plain("cb-io", &affinity.io), move || reader.run(&stop))?;
    let writer =
        Writer::new(Arc::clone(&tx_queue), Arc::clone(&devices), Arc::clone(&time), Arc::clone(&record_queues));
    let writer_thread = spawn(timed("cb-tx", &tx_cpus), move || writer.run())?;

    let engine = Engine::new(
        cell,
        links,
        arrivals,
        arrival_bell,
        Outputs { tx: tx_queue, diag: Arc::clone(&diag_queue), records: Arc::clone(&record_queues) },
        Timing {
            air_ns: config.air_ns,
            sr_period_ns: config.sr_period_ns,
            grant_delay_ns: config.grant_delay_ns,
            duration_ms: config.duration_ms,
        },
        Arc::clone(&time),
    )
    .with_seek_file(config.output_dir.join(SEEK_FILE));
    let ready = json!({
        "pid": std::process::id(),
        "core": {"netns": config.core_netns, "tun": config.core_tun, "address": config.core_address},
        "ues": config.ues.iter().zip(&endpoints).map(|(u, e)| json!({
            "netns": u.netns, "tun": u.tun, "address": u.address, "diag_port": e.port,
            "mi2log_port": e.mi2log.port, "mi2log_pty": e.mi2log.pty,
        })).collect::<Vec<_>>(),
        "output_dir": config.output_dir,
        "origin_unix_ns": time.origin_unix_ns(),
        "start_sfn": cell_meta["start_sfn"],
        "n_rb": cell_meta["n_rb"],
        "n_antennas": cell_meta["n_antennas"],
    });
    println!("ready {ready}");
    // The control plane waits for this line; a closed stdout must not stop the run.
    let _ = std::io::stdout().flush();

    // Held until the end of the run (dropping it withdraws the request).
    let (_latency_request, latency_qos) = match config.cpu_latency_qos {
        false => (None, json!(false)),
        true => match CpuLatencyRequest::hold(0) {
            Ok(request) => (Some(request), json!(true)),
            Err(e) => {
                emulator::report!(
                    "clawbed-emu: warning: requesting 0 µs CPU wake-up latency (/dev/cpu_dma_latency): {e}"
                );
                (None, json!(format!("refused: {e}")))
            }
        },
    };
    // The cell thread is this one.
    let cell_report = timed("cb-cell", &cell_cpus).apply();
    let mut engine_counters = engine.run(&signals);

    // The engine closed the writer's and the diag thread's queues; the recorder ends once
    // the writer (its other producer) has.
    stop_reading.store(true, Ordering::Relaxed);
    let (tx, tx_report) = join(writer_thread, "writer")?;
    record_queues.close();
    let (reader_counters, io_report) = join(reader_thread, "I/O")?;
    let (diag_counters, diag_report) = join(diag_thread, "diag")?;
    let (record_counters, record_report) = join(record_thread, "recorder")?;

    for (index, lane) in tx.lanes.iter().enumerate() {
        let (ue, direction) = Lane::of_index(index).ue_and_direction();
        let Some(c) = engine_counters.ues.get_mut(ue) else { continue };
        let c = match direction {
            emulator::reader::Direction::Downlink => &mut c.downlink,
            emulator::reader::Direction::Uplink => &mut c.uplink,
        };
        c.delivered = lane.delivered;
        c.write_errors.packets += lane.write_errors.packets;
        c.write_errors.bytes += lane.write_errors.bytes;
        c.in_flight_at_shutdown.packets += lane.in_flight_at_shutdown.packets;
        c.in_flight_at_shutdown.bytes += lane.in_flight_at_shutdown.bytes;
    }
    engine_counters.downlink_delivery_error = tx.downlink_delivery_error;
    engine_counters.uplink_delivery_error = tx.uplink_delivery_error;
    engine_counters.packet_events_dropped += tx.packet_events_dropped;

    // The cell thread's scheduling, as before: its priority, a refusal, or null (off).
    let realtime = match (config.realtime_priority, cell_report.refused.iter().find(|r| r.starts_with("SCHED_FIFO"))) {
        (None, _) => json!(null),
        (Some(_), Some(refusal)) => json!(format!("refused: {refusal}")),
        (Some(priority), None) => json!(priority),
    };
    let counters = json!({
        "emulated_ms": engine_counters.subframes,
        "realtime_priority": realtime,
        "tun_offload": config.tun_offload,
        "cpu_latency_qos": latency_qos,
        "memory_locked": memory_locked,
        "threads": {
            "cb-cell": cell_report, "cb-tx": tx_report, "cb-io": io_report,
            "cb-diag": diag_report, "cb-record": record_report,
        },
        "engine": engine_counters,
        "tx": tx.counters,
        "io": reader_counters,
        "diag": diag_counters,
        "records": record_counters,
        "pool_buffers_allocated": pool.allocated(),
    });
    println!("counters {counters}");
    let _ = std::io::stdout().flush();
    // Written whole or not at all: a reader never finds an empty or half file.
    let path = config.output_dir.join("counters.json");
    let text = serde_json::to_string_pretty(&counters)
        .map_err(std::io::Error::other)
        .context(|| "serialising the counters".to_string())?
        + "\n";
    let tmp = config.output_dir.join(".counters.json.tmp");
    std::fs::write(&tmp, text)
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp); // a cut temporary file is no use to anyone
        })
        .context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    // Dropping the devices (last reference) removes the TUN devices.
    drop(devices);
    Ok(())
}

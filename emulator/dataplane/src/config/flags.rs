//! The command line: every flag (a flag overrides the file's key), rates as flags write them,
//! and the registries' listings (`--list-policies`, `--list-events`).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use cell::PolicyChoice;
use clap::Parser;

use super::file::default_core_address;
use super::ues::{default_diag_file, default_diag_port, default_ue_routes, default_uplink_queue_limit_bytes};
use super::{CoreFile, FileConfig, Mode, UeFile};
use crate::error::{Error, Result};

/// Command-line flags. A flag overrides the file; a per-UE flag given several times sets
/// UE 0, 1, ... in order (adding UEs as needed).
#[derive(Debug, Parser)]
#[command(name = "clawbed-emu", version, about = "clawbed's trace-driven LTE emulator: TUN devices in the given network namespaces, a real-time 1 ms subframe clock, a diag feed per UE.", long_about = None)]
pub struct Cli {
    /// Config file (TOML, or JSON if it ends in .json).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Validate the config and traces, print the resolved config as JSON, and exit.
    #[arg(long)]
    pub check: bool,
    /// What drives the downlink.
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// PHY trace of UE 0, 1, ... (mode cell).
    #[arg(long, value_name = "PATH")]
    pub trace: Vec<PathBuf>,
    /// Mahimahi downlink trace of UE 0, 1, ... (mode mahimahi).
    #[arg(long, value_name = "PATH")]
    pub mahimahi_trace: Vec<PathBuf>,
    /// Mahimahi uplink trace of UE 0, 1, ...
    #[arg(long, value_name = "PATH")]
    pub uplink_mahimahi_trace: Vec<PathBuf>,
    /// Downlink rate of every UE (mode rate), e.g. 12mbit.
    #[arg(long, value_name = "RATE", value_parser = parse_rate_bps)]
    pub rate: Option<u64>,
    /// Uplink rate of every UE, e.g. 5mbit.
    #[arg(long, value_name = "RATE", value_parser = parse_rate_bps)]
    pub uplink_rate: Option<u64>,
    /// Seed of the cell model.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Scheduler (the cell's `scheduler` policy; `--list-policies` lists them).
    #[arg(long, value_name = "NAME")]
    pub scheduler: Option<String>,
    /// A cell policy with its parameters, CATEGORY=KIND[,PARAM=VALUE...], e.g.
    /// `loss=fixed,probability=0.01`, `scheduler=round-robin`, `queue=drop-tail` (every UE).
    /// May be repeated; `--list-policies` lists the categories, policies and parameters.
    #[arg(long, value_name = "CATEGORY=KIND[,PARAM=VALUE...]")]
    pub policy: Vec<String>,
    /// List the cell's policies (schedulers, queue policies, loss models) with their
    /// parameters, and exit.
    #[arg(long)]
    pub list_policies: bool,
    /// A scripted event, KIND:PARAM=VALUE[,PARAM=VALUE...], e.g. `drop:in_flight_bytes=300000`,
    /// `outage:at_ms=3000,ms=500`, `capacity:at_ms=2000,factor=0.5,ms=1000`,
    /// `burst:at_ms=1000,ms=2000,share=0.6`; appended to the config's `events`. May be
    /// repeated; `--list-events` lists the kinds and parameters.
    #[arg(long, value_name = "KIND:PARAM=VALUE,...")]
    pub event: Vec<String>,
    /// List the scripted events' kinds with their parameters as JSON (what
    /// `emulator/events.json` holds), and exit.
    #[arg(long)]
    pub list_events: bool,
    /// With --list-policies: print the list as JSON (what `emulator/policies.json` holds).
    #[arg(long, requires = "list_policies")]
    pub json: bool,
    /// Base-station queue limit of every UE, bytes.
    #[arg(long, value_name = "BYTES")]
    pub queue_bytes: Option<u64>,
    /// Core one-way delay, both directions, ms.
    #[arg(long, value_name = "MS")]
    pub core_delay_ms: Option<f64>,
    /// Core one-way delay towards the UE, ms.
    #[arg(long, value_name = "MS")]
    pub core_down_ms: Option<f64>,
    /// Core one-way delay towards the core, ms.
    #[arg(long, value_name = "MS")]
    pub core_up_ms: Option<f64>,
    /// Delay trace file (CSV t_ms,core_delay_ms).
    #[arg(long, value_name = "PATH")]
    pub core_delay_trace: Option<PathBuf>,
    /// Air interface delay, ms.
    #[arg(long, value_name = "MS")]
    pub air_delay_ms: Option<f64>,
    /// Uplink scheduling-request period, ms.
    #[arg(long, value_name = "MS")]
    pub sr_period_ms: Option<f64>,
    /// Uplink grant delay, ms.
    #[arg(long, value_name = "MS")]
    pub grant_delay_ms: Option<f64>,
    /// Core namespace.
    #[arg(long, value_name = "NS")]
    pub core_netns: Option<String>,
    /// Core TUN name.
    #[arg(long, value_name = "NAME")]
    pub core_tun: Option<String>,
    /// Core TUN address.
    #[arg(long, value_name = "ADDR")]
    pub core_address: Option<Ipv4Addr>,
    /// Namespace of UE 0, 1, ...
    #[arg(long, value_name = "NS")]
    pub ue_netns: Vec<String>,
    /// TUN name of UE 0, 1, ...
    #[arg(long, value_name = "NAME")]
    pub ue_tun: Vec<String>,
    /// Address of UE 0, 1, ...
    #[arg(long, value_name = "ADDR")]
    pub ue_address: Vec<Ipv4Addr>,
    /// Diag port of UE 0, 1, ...
    #[arg(long, value_name = "PORT")]
    pub diag_port: Vec<u16>,
    /// Output directory.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Stop after this much emulated time, s.
    #[arg(long, value_name = "S")]
    pub duration_s: Option<f64>,
    /// PHY trace of the cell's other users (mode cell; default: UE 0's trace).
    #[arg(long, value_name = "PATH")]
    pub background_trace: Option<PathBuf>,
    /// Do not repeat traces at their end (the run stops when they end).
    #[arg(long)]
    pub no_loop: bool,
    /// Run the cell and writer threads at SCHED_FIFO with this priority (1..99; 0: normal
    /// priority; default 10).
    #[arg(long, value_name = "PRIO")]
    pub realtime_priority: Option<u32>,
    /// Do not use TUN segmentation offload (one read and one write per packet).
    #[arg(long)]
    pub no_tun_offload: bool,
    /// Do not write the diag files (the live feed still works).
    #[arg(long)]
    pub no_diag_file: bool,
    /// How the live diag feed is delivered: phone (in packets, late, as a phone's diag
    /// port; the default) or ideal (each subframe as it happens).
    #[arg(long, value_enum, value_name = "TIMING")]
    pub feed_timing: Option<crate::diag::phone::FeedTiming>,
    /// Do not hold a CPU wake-up latency request (idle CPUs may halt; timer wake-ups are
    /// later on a virtual machine).
    #[arg(long)]
    pub no_cpu_latency_qos: bool,
    /// Packet buffers in flight at most.
    #[arg(long, value_name = "N")]
    pub max_packets: Option<usize>,
    /// MTU of every TUN device, bytes.
    #[arg(long, value_name = "BYTES")]
    pub mtu: Option<u32>,
}

/// Parses a rate: `12mbit`, `1.5Mbit`, `500kbit`, `1gbit`, `800bit` or a plain number of
/// bit/s. Byte units are refused (tc's `mbps` means megabytes, a classic trap).
pub fn parse_rate_bps(s: &str) -> std::result::Result<u64, String> {
    let lower = s.trim().to_ascii_lowercase();
    let split = lower.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(lower.len());
    let (number, unit) = lower.split_at(split);
    let scale = match unit {
        "" | "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => {
            return Err(format!(
                "`{s}`: unknown unit `{unit}` (use bit, kbit, mbit or gbit; byte units are not accepted)"
            ))
        }
    };
    let value: f64 = number.parse().map_err(|_| format!("`{s}` is not a rate like 12mbit"))?;
    let bps = (value * scale).round();
    if !(1.0..=1e12).contains(&bps) {
        return Err(format!("`{s}`: a rate must be between 1 bit/s and 1000 gbit/s"));
    }
    Ok(bps as u64)
}

/// The UE entry `i`, created (with an empty namespace, to be set by a flag) if missing.
fn ue_at(file: &mut FileConfig, i: usize) -> &mut UeFile {
    while file.ues.len() <= i {
        file.ues.push(UeFile {
            netns: String::new(),
            tun: None,
            address: None,
            routes: default_ue_routes(),
            trace: None,
            trace_offset_ms: 0,
            mahimahi_trace: None,
            uplink_mahimahi_trace: None,
            rate: None,
            uplink_rate: None,
            uplink_queue_limit_bytes: default_uplink_queue_limit_bytes(),
            diag_port: default_diag_port(),
            diag_file: default_diag_file(),
            cell: cell::UeConfig::default(),
        });
    }
    &mut file.ues[i]
}

pub(super) fn apply_flags(file: &mut FileConfig, cli: &Cli) -> Result<()> {
    macro_rules! set {
        ($flag:expr => $($target:tt)+) => {
            if let Some(v) = $flag.clone() {
                $($target)+ = v.into();
            }
        };
    }
    if cli.mode.is_some() {
        file.mode = cli.mode;
    }
    set!(cli.seed => file.seed);
    set!(cli.output_dir => file.output_dir);
    if cli.duration_s.is_some() {
        file.duration_s = cli.duration_s;
    }
    if cli.background_trace.is_some() {
        file.background_trace = cli.background_trace.clone();
    }
    if cli.no_loop {
        file.loop_trace = false;
    }
    set!(cli.realtime_priority => file.realtime_priority);
    if cli.no_tun_offload {
        file.tun_offload = false;
    }
    if cli.no_diag_file {
        file.diag.file = false;
    }
    if let Some(timing) = cli.feed_timing {
        file.diag.feed_timing = timing;
    }
    if cli.no_cpu_latency_qos {
        file.cpu_latency_qos = false;
    }
    set!(cli.max_packets => file.max_packets);
    set!(cli.mtu => file.mtu_bytes);
    set!(cli.core_delay_ms => file.delays.core_down_ms);
    set!(cli.core_delay_ms => file.delays.core_up_ms);
    set!(cli.core_down_ms => file.delays.core_down_ms);
    set!(cli.core_up_ms => file.delays.core_up_ms);
    set!(cli.air_delay_ms => file.delays.air_ms);
    set!(cli.sr_period_ms => file.delays.sr_period_ms);
    set!(cli.grant_delay_ms => file.delays.grant_delay_ms);
    if cli.core_delay_trace.is_some() {
        file.delays.core_delay_trace = cli.core_delay_trace.clone();
    }
    if let Some(name) = &cli.scheduler {
        let schedulers = &cell::scheduler::POLICIES;
        if schedulers.get(name).is_none() {
            return Err(Error::config("--scheduler", format!("`{name}` is not one of {}", schedulers.names())));
        }
        file.cell.scheduler = PolicyChoice::named(name);
    }
    if cli.core_netns.is_some() || cli.core_tun.is_some() || cli.core_address.is_some() {
        let core = file.core.get_or_insert_with(|| CoreFile {
            netns: String::new(),
            tun: None,
            address: default_core_address(),
            routes: Vec::new(),
        });
        set!(cli.core_netns => core.netns);
        if cli.core_tun.is_some() {
            core.tun = cli.core_tun.clone();
        }
        set!(cli.core_address => core.address);
    }
    for (i, v) in cli.ue_netns.iter().enumerate() {
        ue_at(file, i).netns = v.clone();
    }
    for (i, v) in cli.ue_tun.iter().enumerate() {
        ue_at(file, i).tun = Some(v.clone());
    }
    for (i, v) in cli.ue_address.iter().enumerate() {
        ue_at(file, i).address = Some(*v);
    }
    for (i, v) in cli.diag_port.iter().enumerate() {
        ue_at(file, i).diag_port = *v;
    }
    for (i, v) in cli.trace.iter().enumerate() {
        ue_at(file, i).trace = Some(v.clone());
    }
    for (i, v) in cli.mahimahi_trace.iter().enumerate() {
        ue_at(file, i).mahimahi_trace = Some(v.clone());
    }
    for (i, v) in cli.uplink_mahimahi_trace.iter().enumerate() {
        ue_at(file, i).uplink_mahimahi_trace = Some(v.clone());
    }
    for ue in &mut file.ues {
        if let Some(bps) = cli.rate {
            ue.rate = Some(bps.to_string());
        }
        if let Some(bps) = cli.uplink_rate {
            ue.uplink_rate = Some(bps.to_string());
        }
        if let Some(bytes) = cli.queue_bytes {
            ue.cell.queue_limit_bytes = bytes;
        }
    }
    for text in &cli.event {
        let bad = |problem: String| Error::config("--event", format!("`{text}`: {problem}"));
        let choice = cell::events::parse(text).map_err(bad)?;
        cell::events::check(&choice).map_err(|e| bad(format!("{}: {}", e.field, e.problem)))?;
        file.events.push(choice);
    }
    // Last, so that a per-UE policy reaches the UEs the flags above added.
    for spec in &cli.policy {
        let bad = |problem: String| Error::config("--policy", format!("`{spec}`: {problem}"));
        let (category, choice) =
            spec.split_once('=').ok_or_else(|| bad("expected CATEGORY=KIND[,PARAM=VALUE...]".into()))?;
        let choice = PolicyChoice::parse(choice).map_err(bad)?;
        let mut ues: Vec<&mut cell::UeConfig> = file.ues.iter_mut().map(|ue| &mut ue.cell).collect();
        cell::policy::apply(category.trim(), choice, &mut file.cell, &mut ues)
            .map_err(|e| bad(format!("{}: {}", e.field, e.problem)))?;
    }
    Ok(())
}

/// The cell's policies as `--list-policies` prints them: JSON (`emulator/policies.json`),
/// or a table for people.
pub fn list_policies(json: bool) -> String {
    let catalogue = cell::policy::catalogue();
    if json {
        return serde_json::to_string_pretty(&catalogue).unwrap_or_default() + "\n";
    }
    let mut out = String::new();
    for c in &catalogue {
        out += &format!("{} ({}; default {}): {}\n", c.category, c.config_key, c.default, c.summary);
        for p in &c.policies {
            out += &format!("  {:<20} {}\n", p.name, p.summary);
            for param in p.params {
                let default = serde_json::to_string(&param.default).unwrap_or_default();
                out += &format!("  {:<20}   {} = {default}: {}\n", "", param.name, param.doc);
            }
        }
    }
    out
}

/// The scripted events' kinds and parameters as `--list-events` prints them: JSON
/// (`emulator/events.json`).
pub fn list_events() -> String {
    serde_json::to_string_pretty(cell::events::EVENTS).unwrap_or_default() + "\n"
}

//! The emulator's configuration: a TOML or JSON file, command-line flags over it, and the
//! validated result.
//!
//! Every check names the key (`ues[1].address`) or the flag (`--rate`) at fault. Paths in a
//! config file are relative to the file's directory; paths given as flags are relative to
//! the working directory. Keys and defaults are listed in `../README.md` ("Configuration").

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use cell::PolicyChoice;
use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::clock::Nanos;
use crate::error::{Error, Result};
use crate::tun::{Ipv4Prefix, MAX_IFNAME_BYTES};
use cell::delay::ms_to_ns;

/// CPU numbers an affinity list may hold (glibc's `CPU_SETSIZE`).
pub const MAX_CPUS: usize = 1024;

/// What drives the downlink capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A PHY trace per UE (`traces/FORMAT.md`) drives the LTE cell model. Default.
    #[default]
    Cell,
    /// A Mahimahi delivery-opportunity trace per UE, open loop (compare with `mm-link`).
    Mahimahi,
    /// A constant rate per UE, open loop (a link without a trace).
    Rate,
}

/// One-way delays of the emulated path, ms.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Delays {
    /// Core network one-way delay, core → base station, ms. Default 25.
    pub core_down_ms: f64,
    /// Core network one-way delay, base station → core, ms. Default 25.
    pub core_up_ms: f64,
    /// Air interface delay from the end of the subframe that carried a packet's last byte
    /// to its delivery (UE or base-station processing), ms. Default 1. Applies to both
    /// directions.
    pub air_ms: f64,
    /// Uplink scheduling-request period, ms (0: no SR wait). Default 10.
    pub sr_period_ms: f64,
    /// Uplink delay from the scheduling request to the first subframe the grant allows
    /// sending in, ms. Default 8 (SR → grant 4 ms, grant → PUSCH 4 ms).
    pub grant_delay_ms: f64,
    /// A delay trace (CSV `t_ms,core_delay_ms`, one row per change) giving the one-way
    /// core delay in both directions for every UE over time; overrides the constants and
    /// the traces' `core_delay_ms` column.
    pub core_delay_trace: Option<PathBuf>,
    /// Ignore the traces' `core_delay_ms` column and use the constants. Default false.
    pub ignore_trace_core_delay: bool,
}

impl Default for Delays {
    fn default() -> Delays {
        Delays {
            core_down_ms: 25.0,
            core_up_ms: 25.0,
            air_ms: 1.0,
            sr_period_ms: 10.0,
            grant_delay_ms: 8.0,
            core_delay_trace: None,
            ignore_trace_core_delay: false,
        }
    }
}

/// The core network side.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreFile {
    /// Namespace of the core TUN (a name from `ip netns`, or a path like `/proc/PID/ns/net`).
    pub netns: String,
    /// Name of the core TUN device. Default: the namespace's name (if a name ≤ 15 bytes).
    #[serde(default)]
    pub tun: Option<String>,
    /// Address of the core TUN. Default 10.200.0.1.
    #[serde(default = "default_core_address")]
    pub address: Ipv4Addr,
    /// Extra prefixes routed into the core TUN (every UE address is routed anyway).
    #[serde(default)]
    pub routes: Vec<String>,
}

fn default_core_address() -> Ipv4Addr {
    Ipv4Addr::new(10, 200, 0, 1)
}

/// One emulated UE.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UeFile {
    /// Namespace of the UE (name or path).
    pub netns: String,
    /// Name of the UE's TUN device. Default: the namespace's name.
    #[serde(default)]
    pub tun: Option<String>,
    /// The UE's address. Default 10.200.1.(2 + UE number).
    #[serde(default)]
    pub address: Option<Ipv4Addr>,
    /// Prefixes routed into the UE's TUN inside its namespace. Default `["default"]`.
    #[serde(default = "default_ue_routes")]
    pub routes: Vec<String>,
    /// PHY trace (`.cbt` or `.csv`), mode `cell`.
    #[serde(default)]
    pub trace: Option<PathBuf>,
    /// Where in the trace this UE starts, ms. Default 0.
    #[serde(default)]
    pub trace_offset_ms: u64,
    /// Mahimahi downlink trace, mode `mahimahi`.
    #[serde(default)]
    pub mahimahi_trace: Option<PathBuf>,
    /// Mahimahi uplink trace (any mode): drives the uplink capacity.
    #[serde(default)]
    pub uplink_mahimahi_trace: Option<PathBuf>,
    /// Downlink rate, mode `rate`: `12mbit`, `500kbit`, `1gbit` or bit/s.
    #[serde(default)]
    pub rate: Option<String>,
    /// Uplink rate (any mode), same syntax. Default: the trace's `ul_capacity_bits` if
    /// present, else unlimited.
    #[serde(default)]
    pub uplink_rate: Option<String>,
    /// Drop-tail limit of the UE's uplink buffer, bytes. Default 3 MiB.
    #[serde(default = "default_uplink_queue_limit_bytes")]
    pub uplink_queue_limit_bytes: u64,
    /// TCP port of the diag feed on 127.0.0.1 in the UE's namespace (0: any free port).
    /// Default 5775.
    #[serde(default = "default_diag_port")]
    pub diag_port: u16,
    /// Whether this UE's feed is written to `diag-ue<N>.jsonl` / `.mi2log` (only while
    /// `diag.file` is on). Default true. Off for background UEs of a big cell: each file
    /// grows by about 1 MB/s, and writing 45 of them takes the diag thread a core.
    #[serde(default = "default_diag_file")]
    pub diag_file: bool,
    /// The cell model's per-UE parameters (queue_limit_bytes, rsrp_dbm, ...).
    #[serde(default)]
    pub cell: cell::UeConfig,
}

fn default_ue_routes() -> Vec<String> {
    vec!["default".into()]
}

fn default_diag_port() -> u16 {
    5775
}

fn default_diag_file() -> bool {
    true
}

fn default_uplink_queue_limit_bytes() -> u64 {
    3 << 20
}

/// The diag feed's message selection.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiagFile {
    /// The cumulative statistics (`LTE_RLC_DL_Stats`, `LTE_PDCP_DL_Stats`) are sent every
    /// this many subframes, ms (they lose nothing by being sent less often). Default 1.
    pub stats_period_ms: u32,
    /// Whether every UE's feed is also written to `diag-ue<N>.jsonl` (about 1 MB/s per UE).
    /// Default true; a big cell may turn it off, and then the feed costs nothing while no
    /// subscriber is connected.
    pub file: bool,
    /// The same feed as diag log packets (`.mi2log` file, TCP port, pty): see
    /// `../DIAG_FEED.md`.
    pub mi2log: crate::diag::mi2log::Mi2logConfig,
    /// How the live feed is delivered: `phone` (default: in packets, late, as a phone's
    /// diag port) or `ideal` (each subframe as it happens).
    pub feed_timing: crate::diag::phone::FeedTiming,
    /// The phone's packing (with `feed_timing = "phone"`).
    pub phone: crate::diag::phone::PhoneTiming,
}

impl Default for DiagFile {
    fn default() -> DiagFile {
        DiagFile {
            stats_period_ms: 1,
            file: true,
            mi2log: Default::default(),
            feed_timing: Default::default(),
            phone: Default::default(),
        }
    }
}

/// CPUs each of the emulator's threads may run on (an empty list: any).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct Affinity {
    /// The cell thread (`cb-cell`): the subframe clock.
    pub cell: Vec<usize>,
    /// The writer thread (`cb-tx`): every TUN write.
    pub tx: Vec<usize>,
    /// The reader thread (`cb-io`): every TUN read.
    pub io: Vec<usize>,
    /// The diag feed thread (`cb-diag`).
    pub diag: Vec<usize>,
    /// The ground-truth and packet-log thread (`cb-record`).
    pub record: Vec<usize>,
}

/// Real-time priority of the cell and writer threads when the config does not say.
pub const DEFAULT_REALTIME_PRIORITY: u32 = 10;

/// The config file as written (every key optional except the namespaces).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    /// What drives the downlink. Default: `rate` if UE 0 has a rate, `mahimahi` if it has
    /// a Mahimahi trace, else `cell`.
    pub mode: Option<Mode>,
    /// Seed of every random draw of the cell model. Default 1.
    pub seed: u64,
    /// Directory for diag files, ground truth, packet log and counters (created). Default
    /// `clawbed-emu-out`.
    pub output_dir: PathBuf,
    /// Stop after this much emulated time, s. Default: run until SIGINT/SIGTERM (or the end
    /// of a trace that does not loop).
    pub duration_s: Option<f64>,
    /// Whether traces repeat at their end. Default true.
    pub loop_trace: bool,
    /// A PHY trace whose `other_rbs` / `other_users` give the cell's other users (mode
    /// cell); without it they come from UE 0's trace.
    pub background_trace: Option<PathBuf>,
    /// Run the cell and writer threads at SCHED_FIFO with this priority (1..99; 0: normal
    /// priority). Default 10; refused (no permission), a warning and normal priority.
    pub realtime_priority: u32,
    /// CPUs each thread may run on.
    pub affinity: Affinity,
    /// TUN segmentation offload (super-packets in, merged writes out). Default true.
    pub tun_offload: bool,
    /// Hold a 0 µs CPU wake-up latency request (`/dev/cpu_dma_latency`) while running, so
    /// timer wake-ups are not delayed by halted CPUs. Default true.
    pub cpu_latency_qos: bool,
    /// Packet buffers in flight at most (each holds one MTU). Default 65536.
    pub max_packets: usize,
    /// MTU of every TUN device, bytes (576..9000). Default 1500.
    pub mtu_bytes: u32,
    /// Delays.
    pub delays: Delays,
    /// The core side.
    pub core: Option<CoreFile>,
    /// The UEs.
    pub ues: Vec<UeFile>,
    /// Diag feed options.
    pub diag: DiagFile,
    /// The cell model's parameters (scheduler, harq, rlc, rsrq, rrc, n_rb, ...).
    pub cell: cell::CellConfig,
    /// Scripted events (`cell::events`): tables with `kind` (`drop`, `outage`, `capacity`,
    /// `burst`) and its parameters; times in ms since time zero or the last seek.
    pub events: Vec<PolicyChoice>,
}

impl Default for FileConfig {
    fn default() -> FileConfig {
        FileConfig {
            mode: None,
            seed: 1,
            output_dir: PathBuf::from("clawbed-emu-out"),
            duration_s: None,
            loop_trace: true,
            background_trace: None,
            realtime_priority: DEFAULT_REALTIME_PRIORITY,
            affinity: Affinity::default(),
            tun_offload: true,
            cpu_latency_qos: true,
            max_packets: 65_536,
            mtu_bytes: 1500,
            delays: Delays::default(),
            core: None,
            ues: Vec::new(),
            diag: DiagFile::default(),
            cell: cell::CellConfig::default(),
            events: Vec::new(),
        }
    }
}

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

/// Where a UE's downlink capacity comes from.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Downlink {
    /// A PHY trace file, starting at an offset, ms.
    Trace {
        /// The file.
        path: PathBuf,
        /// Start offset, ms.
        offset_ms: u64,
    },
    /// A Mahimahi trace file.
    Mahimahi {
        /// The file.
        path: PathBuf,
    },
    /// A constant rate, bit/s.
    Rate {
        /// The rate, bit/s.
        bps: u64,
    },
}

/// Where a UE's uplink capacity comes from (besides the SR/grant timing).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UplinkSource {
    /// The PHY trace's `ul_capacity_bits` column if it has one, else unlimited.
    TraceOrUnlimited,
    /// A Mahimahi uplink trace.
    Mahimahi {
        /// The file.
        path: PathBuf,
    },
    /// A constant rate, bit/s.
    Rate {
        /// The rate, bit/s.
        bps: u64,
    },
}

/// A validated UE.
#[derive(Debug, Clone, Serialize)]
pub struct UeSpec {
    /// Namespace (name or path).
    pub netns: String,
    /// TUN name.
    pub tun: String,
    /// Address.
    pub address: Ipv4Addr,
    /// Routes via the TUN.
    pub routes: Vec<String>,
    /// Downlink capacity source.
    pub downlink: Downlink,
    /// Uplink capacity source.
    pub uplink: UplinkSource,
    /// Uplink buffer limit, bytes.
    pub uplink_queue_limit_bytes: u64,
    /// Diag port (0: any).
    pub diag_port: u16,
    /// Whether the UE's diag feed is written to files (with the config's `diag_file`).
    pub diag_file: bool,
    /// Cell parameters of the UE.
    pub cell: cell::UeConfig,
}

/// The validated configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Mode.
    pub mode: Mode,
    /// Seed.
    pub seed: u64,
    /// Output directory.
    pub output_dir: PathBuf,
    /// Emulated time to run, ms; `None`: until signalled.
    pub duration_ms: Option<u64>,
    /// Whether traces loop.
    pub loop_trace: bool,
    /// The cell's background trace (other users), mode cell.
    pub background_trace: Option<PathBuf>,
    /// SCHED_FIFO priority of the cell and writer threads (`None`: normal priority).
    pub realtime_priority: Option<i32>,
    /// CPUs per thread.
    pub affinity: Affinity,
    /// TUN segmentation offload.
    pub tun_offload: bool,
    /// Whether a 0 µs CPU wake-up latency request is held.
    pub cpu_latency_qos: bool,
    /// Packet buffers in flight at most.
    pub max_packets: usize,
    /// TUN MTU, bytes.
    pub mtu_bytes: u32,
    /// Core one-way delay towards the UE, ns.
    pub core_down_ns: Nanos,
    /// Core one-way delay towards the core, ns.
    pub core_up_ns: Nanos,
    /// Air delay, ns.
    pub air_ns: Nanos,
    /// SR period, ns.
    pub sr_period_ns: Nanos,
    /// Grant delay, ns.
    pub grant_delay_ns: Nanos,
    /// Delay trace file.
    pub core_delay_trace: Option<PathBuf>,
    /// Whether the traces' `core_delay_ms` column is ignored.
    pub ignore_trace_core_delay: bool,
    /// Core namespace.
    pub core_netns: String,
    /// Core TUN name.
    pub core_tun: String,
    /// Core TUN address.
    pub core_address: Ipv4Addr,
    /// Core routes (parsed), UE addresses first.
    pub core_routes: Vec<String>,
    /// UEs.
    pub ues: Vec<UeSpec>,
    /// RLC/PDCP statistics period of the diag feed, ms.
    pub diag_stats_period_ms: u32,
    /// Whether the diag files are written.
    pub diag_file: bool,
    /// The mi2log feed's settings.
    pub diag_mi2log: crate::diag::mi2log::Mi2logConfig,
    /// How the live diag feed is delivered.
    pub diag_feed_timing: crate::diag::phone::FeedTiming,
    /// The phone's packing (used with `diag_feed_timing` phone).
    pub diag_phone: crate::diag::phone::PhoneTiming,
    /// The cell model's parameters (policies included).
    pub cell: cell::CellConfig,
    /// Scripted events, checked.
    pub events: Vec<PolicyChoice>,
}

impl Config {
    /// The phone's packing of the live diag feed, or `None` with the ideal timing.
    pub fn diag_packing(&self) -> Option<crate::diag::phone::PhoneTiming> {
        (self.diag_feed_timing == crate::diag::phone::FeedTiming::Phone).then_some(self.diag_phone)
    }

    /// Parses and validates a config file's text (JSON if `is_json`, else TOML) with no
    /// flags over it, paths relative to `base`: what `load` does with a file, for callers
    /// (and tests) that hold the text. Any text gives a config or an error naming the key.
    pub fn from_text(text: &str, is_json: bool, base: &Path) -> Result<Config> {
        validate(parse_file(text, is_json, "config", base)?)
    }

    /// Reads the file named by `--config` (if any), applies the flags, validates.
    pub fn load(cli: &Cli) -> Result<Config> {
        let mut file = match &cli.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        apply_flags(&mut file, cli)?;
        validate(file)
    }
}

/// Reads a TOML or JSON config file; relative paths in it become relative to its directory.
fn read_file(path: &Path) -> Result<FileConfig> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::config("--config", format!("{}: {e}", path.display())))?;
    let is_json = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
    parse_file(&text, is_json, &path.display().to_string(), path.parent().unwrap_or(Path::new("")))
}

/// Parses a config file's text (JSON if `is_json`, else TOML); `source` names it in errors;
/// relative paths in it become relative to `base`.
fn parse_file(text: &str, is_json: bool, source: &str, base: &Path) -> Result<FileConfig> {
    let mut file: FileConfig = if is_json {
        serde_json::from_str(text).map_err(|e| Error::config(source, e.to_string()))?
    } else {
        toml::from_str(text).map_err(|e| Error::config(source, e.to_string().trim_end().to_string()))?
    };
    let rebase = |p: &mut PathBuf| {
        if p.is_relative() {
            *p = base.join(&*p);
        }
    };
    rebase(&mut file.output_dir);
    if let Some(p) = file.background_trace.as_mut() {
        rebase(p);
    }
    if let Some(p) = file.delays.core_delay_trace.as_mut() {
        rebase(p);
    }
    for ue in &mut file.ues {
        for p in [&mut ue.trace, &mut ue.mahimahi_trace, &mut ue.uplink_mahimahi_trace].into_iter().flatten() {
            rebase(p);
        }
    }
    Ok(file)
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

fn apply_flags(file: &mut FileConfig, cli: &Cli) -> Result<()> {
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

/// Checks a delay in ms: finite, 0..=10000.
fn delay_ns(field: &str, ms: f64) -> Result<Nanos> {
    if ms.is_finite() && (0.0..=10_000.0).contains(&ms) {
        Ok(ms_to_ns(ms))
    } else {
        Err(Error::config(field, format!("must be a number of ms in 0..=10000, got {ms}")))
    }
}

/// Checks an interface name: 1..=15 bytes of letters, digits, `-`, `_`, `.`.
fn ifname(field: &str, name: &str) -> Result<String> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if name.is_empty() || name.len() > MAX_IFNAME_BYTES || !ok_chars {
        return Err(Error::config(
            field,
            format!("`{name}` must be 1..={MAX_IFNAME_BYTES} letters, digits, `-`, `_` or `.`"),
        ));
    }
    Ok(name.to_string())
}

/// The TUN name: the configured one, else the namespace's name.
fn tun_name(field: &str, tun: &Option<String>, netns: &str) -> Result<String> {
    match tun {
        Some(name) => ifname(field, name),
        None if !netns.contains('/') && netns.len() <= MAX_IFNAME_BYTES => ifname(field, netns),
        None => {
            Err(Error::config(field, format!("must be given: the namespace `{netns}` cannot serve as a device name")))
        }
    }
}

fn validate(file: FileConfig) -> Result<Config> {
    let mode = file.mode.unwrap_or(match file.ues.first() {
        Some(ue) if ue.rate.is_some() && ue.trace.is_none() => Mode::Rate,
        Some(ue) if ue.mahimahi_trace.is_some() && ue.trace.is_none() => Mode::Mahimahi,
        _ => Mode::Cell,
    });
    let d = &file.delays;
    let core_down_ns = delay_ns("delays.core_down_ms", d.core_down_ms)?;
    let core_up_ns = delay_ns("delays.core_up_ms", d.core_up_ms)?;
    let air_ns = delay_ns("delays.air_ms", d.air_ms)?;
    let sr_period_ns = delay_ns("delays.sr_period_ms", d.sr_period_ms)?;
    let grant_delay_ns = delay_ns("delays.grant_delay_ms", d.grant_delay_ms)?;
    if let Some(p) = &d.core_delay_trace {
        if !p.is_file() {
            return Err(Error::config("delays.core_delay_trace", format!("{} is not a file", p.display())));
        }
    }
    let duration_ms = match file.duration_s {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 && s <= 1e7 => Some((s * 1000.0).round() as u64),
        Some(s) => return Err(Error::config("duration_s", format!("must be a positive number of seconds, got {s}"))),
    };
    let realtime_priority = match file.realtime_priority {
        0 => None,
        p @ 1..=99 => Some(p as i32),
        p => return Err(Error::config("realtime_priority", format!("must be 0..=99 (0: normal priority), got {p}"))),
    };
    let a = &file.affinity;
    for (name, cpus) in [("cell", &a.cell), ("tx", &a.tx), ("io", &a.io), ("diag", &a.diag), ("record", &a.record)] {
        if let Some(cpu) = cpus.iter().find(|&&c| c >= MAX_CPUS) {
            return Err(Error::config(format!("affinity.{name}"), format!("CPU {cpu} is not below {MAX_CPUS}")));
        }
    }
    if !(576..=9000).contains(&file.mtu_bytes) {
        return Err(Error::config("mtu_bytes", format!("must be 576..=9000, got {}", file.mtu_bytes)));
    }
    if !(64..=(1 << 24)).contains(&file.max_packets) {
        return Err(Error::config("max_packets", format!("must be 64..=16777216, got {}", file.max_packets)));
    }
    if let Some(p) = &file.background_trace {
        if mode != Mode::Cell {
            return Err(Error::config("background_trace", "only mode cell has other users"));
        }
        existing_file("background_trace", Some(p), "")?;
    }
    if file.diag.stats_period_ms == 0 {
        return Err(Error::config("diag.stats_period_ms", "must be at least 1"));
    }
    file.diag.phone.validate().map_err(|(field, problem)| Error::config(format!("diag.phone.{field}"), problem))?;
    file.cell.validate().map_err(|e| Error::config(format!("cell.{}", e.field), e.problem))?;
    check_events(&file.events, file.ues.len(), mode)?;

    let Some(core) = &file.core else {
        return Err(Error::config("core.netns", "the core namespace must be given (core.netns or --core-netns)"));
    };
    if core.netns.is_empty() {
        return Err(Error::config("core.netns", "must not be empty"));
    }
    let core_tun = tun_name("core.tun", &core.tun, &core.netns)?;
    for (i, r) in core.routes.iter().enumerate() {
        r.parse::<Ipv4Prefix>().map_err(|e| Error::config(format!("core.routes[{i}]"), e))?;
    }
    if file.ues.is_empty() {
        return Err(Error::config("ues", "at least one UE must be given (a [[ues]] table or --ue-netns)"));
    }
    if file.ues.len() > 64 {
        return Err(Error::config("ues", format!("at most 64 UEs, got {}", file.ues.len())));
    }

    let mut ues: Vec<UeSpec> = Vec::with_capacity(file.ues.len());
    for (i, ue) in file.ues.iter().enumerate() {
        let f = |key: &str| format!("ues[{i}].{key}");
        if ue.netns.is_empty() {
            return Err(Error::config(f("netns"), "must be given (or --ue-netns)"));
        }
        let tun = tun_name(&f("tun"), &ue.tun, &ue.netns)?;
        let address = ue.address.unwrap_or(Ipv4Addr::new(10, 200, 1, (2 + i) as u8));
        for (j, r) in ue.routes.iter().enumerate() {
            r.parse::<Ipv4Prefix>().map_err(|e| Error::config(f(&format!("routes[{j}]")), e))?;
        }
        let rate = |key: &str, v: &Option<String>| -> Result<Option<u64>> {
            v.as_deref().map(parse_rate_bps).transpose().map_err(|e| Error::config(f(key), e))
        };
        let downlink = match mode {
            Mode::Cell => Downlink::Trace {
                path: existing_file(&f("trace"), ue.trace.as_ref(), "mode cell needs a PHY trace per UE (--trace)")?,
                offset_ms: ue.trace_offset_ms,
            },
            Mode::Mahimahi => Downlink::Mahimahi {
                path: existing_file(
                    &f("mahimahi_trace"),
                    ue.mahimahi_trace.as_ref(),
                    "mode mahimahi needs a Mahimahi trace per UE (--mahimahi-trace)",
                )?,
            },
            Mode::Rate => Downlink::Rate {
                bps: rate("rate", &ue.rate)?
                    .ok_or_else(|| Error::config(f("rate"), "mode rate needs a rate per UE (--rate)"))?,
            },
        };
        let uplink = match (&ue.uplink_mahimahi_trace, rate("uplink_rate", &ue.uplink_rate)?) {
            (Some(_), Some(_)) => {
                return Err(Error::config(f("uplink_rate"), "give uplink_rate or uplink_mahimahi_trace, not both"))
            }
            (Some(p), None) => {
                UplinkSource::Mahimahi { path: existing_file(&f("uplink_mahimahi_trace"), Some(p), "")? }
            }
            (None, Some(bps)) => UplinkSource::Rate { bps },
            (None, None) => UplinkSource::TraceOrUnlimited,
        };
        if !(1..=1 << 30).contains(&ue.uplink_queue_limit_bytes) {
            return Err(Error::config(
                f("uplink_queue_limit_bytes"),
                format!("must be 1..=1073741824, got {}", ue.uplink_queue_limit_bytes),
            ));
        }
        ue.cell.validate().map_err(|e| Error::config(f(&format!("cell.{}", e.field)), e.problem))?;
        if let Some(j) = ues.iter().position(|o| o.netns == ue.netns && o.tun == tun) {
            return Err(Error::config(f("tun"), format!("`{tun}` in namespace {} is also UE {j}'s", ue.netns)));
        }
        if ue.netns == core.netns && tun == core_tun {
            return Err(Error::config(f("tun"), format!("`{tun}` in namespace {} is also the core's", ue.netns)));
        }
        if let Some(j) = ues.iter().position(|o| o.address == address) {
            return Err(Error::config(f("address"), format!("{address} is also UE {j}'s")));
        }
        if address == core.address {
            return Err(Error::config(f("address"), format!("{address} is also the core's")));
        }
        if ue.diag_port != 0 {
            if let Some(j) = ues.iter().position(|o| o.netns == ue.netns && o.diag_port == ue.diag_port) {
                return Err(Error::config(
                    f("diag_port"),
                    format!("{} is also UE {j}'s in the same namespace", ue.diag_port),
                ));
            }
        }
        ues.push(UeSpec {
            netns: ue.netns.clone(),
            tun,
            address,
            routes: ue.routes.clone(),
            downlink,
            uplink,
            uplink_queue_limit_bytes: ue.uplink_queue_limit_bytes,
            diag_port: ue.diag_port,
            diag_file: ue.diag_file,
            cell: ue.cell.clone(),
        });
    }
    let core_routes = ues.iter().map(|u| u.address.to_string()).chain(core.routes.iter().cloned()).collect();
    Ok(Config {
        mode,
        seed: file.seed,
        output_dir: file.output_dir,
        duration_ms,
        loop_trace: file.loop_trace,
        background_trace: file.background_trace.clone(),
        realtime_priority,
        affinity: file.affinity.clone(),
        tun_offload: file.tun_offload,
        cpu_latency_qos: file.cpu_latency_qos,
        max_packets: file.max_packets,
        mtu_bytes: file.mtu_bytes,
        core_down_ns,
        core_up_ns,
        air_ns,
        sr_period_ns,
        grant_delay_ns,
        core_delay_trace: file.delays.core_delay_trace.clone(),
        ignore_trace_core_delay: file.delays.ignore_trace_core_delay,
        core_netns: core.netns.clone(),
        core_tun,
        core_address: core.address,
        core_routes,
        ues,
        diag_stats_period_ms: file.diag.stats_period_ms,
        diag_file: file.diag.file,
        diag_mi2log: file.diag.mi2log,
        diag_feed_timing: file.diag.feed_timing,
        diag_phone: file.diag.phone,
        cell: file.cell.clone(),
        events: file.events.clone(),
    })
}

/// Checks the scripted events: each one's kind and parameters, its UE among the `n_ues`, a
/// burst only in mode cell; errors name `events[i].<key>`.
fn check_events(events: &[PolicyChoice], n_ues: usize, mode: Mode) -> Result<()> {
    if events.len() > cell::events::MAX_EVENTS {
        return Err(Error::config(
            "events",
            format!("at most {} events, got {}", cell::events::MAX_EVENTS, events.len()),
        ));
    }
    for (i, event) in events.iter().enumerate() {
        let params =
            cell::events::check(event).map_err(|e| Error::config(format!("events[{i}].{}", e.field), e.problem))?;
        if let Some(ue) = params.integer("ue").filter(|&ue| ue >= n_ues as u64) {
            return Err(Error::config(format!("events[{i}].ue"), format!("UE {ue} is not one of the {n_ues} UEs")));
        }
        if event.kind == "burst" && mode != Mode::Cell {
            return Err(Error::config(
                format!("events[{i}].kind"),
                "a burst of other users needs mode cell (an open-loop link has no cell to share)",
            ));
        }
    }
    Ok(())
}

/// A path that must name an existing file.
fn existing_file(field: &str, path: Option<&PathBuf>, missing: &str) -> Result<PathBuf> {
    match path {
        None => Err(Error::config(field, missing)),
        Some(p) if p.is_file() => Ok(p.clone()),
        Some(p) => Err(Error::config(field, format!("{} is not a file", p.display()))),
    }
}

#[cfg(test)]
mod tests {
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
        let c = with(&[
            "--scheduler",
            "round-robin",
            "--policy",
            "loss=fixed,probability=0.25",
            "--policy",
            "queue=drop-tail",
        ])
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
}

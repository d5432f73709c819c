//! The config file as written (TOML, or JSON): its top-level keys and the core's table, read
//! with relative paths made relative to the file's directory.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use cell::PolicyChoice;
use serde::Deserialize;

use super::{Affinity, Delays, DiagFile, Mode, UeFile, DEFAULT_REALTIME_PRIORITY};
use crate::error::{Error, Result};

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

pub(super) fn default_core_address() -> Ipv4Addr {
    Ipv4Addr::new(10, 200, 0, 1)
}

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

/// Reads a TOML or JSON config file; relative paths in it become relative to its directory.
pub(super) fn read_file(path: &Path) -> Result<FileConfig> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::config("--config", format!("{}: {e}", path.display())))?;
    let is_json = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
    parse_file(&text, is_json, &path.display().to_string(), path.parent().unwrap_or(Path::new("")))
}

/// Parses a config file's text (JSON if `is_json`, else TOML); `source` names it in errors;
/// relative paths in it become relative to `base`.
pub(super) fn parse_file(text: &str, is_json: bool, source: &str, base: &Path) -> Result<FileConfig> {
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

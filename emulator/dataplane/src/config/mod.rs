//! The emulator's configuration: a TOML or JSON file, command-line flags over it, and the
//! validated result.
//!
//! Every check names the key (`ues[1].address`) or the flag (`--rate`) at fault. Paths in a
//! config file are relative to the file's directory; paths given as flags are relative to
//! the working directory. Keys and defaults are listed in `emulator/dataplane/README.md` ("Configuration").
//!
//! One module per thing configured: `file` (the file's top-level keys and the core), `ues`,
//! `delays`, `diag`, `threads` (CPUs and priority); `flags` (the command line over the
//! file) and `validate` (the checks that make a [`Config`]).

mod delays;
mod diag;
mod file;
mod flags;
mod threads;
mod ues;
mod validate;

#[cfg(test)]
mod tests;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use cell::PolicyChoice;
use serde::{Deserialize, Serialize};

pub use delays::Delays;
pub use diag::DiagFile;
pub use file::{CoreFile, FileConfig};
pub use flags::{list_events, list_policies, parse_rate_bps, Cli};
pub use threads::{Affinity, DEFAULT_REALTIME_PRIORITY, MAX_CPUS};
pub use ues::{Downlink, UeFile, UeSpec, UplinkSource};

use crate::clock::Nanos;
use crate::error::Result;
use file::{parse_file, read_file};
use flags::apply_flags;
use validate::validate;

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

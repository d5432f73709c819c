//! The emulated UEs: a `[[ues]]` table as written, and a UE as validated (its TUN, address,
//! where its downlink and uplink capacity come from, its cell parameters).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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

pub(super) fn default_ue_routes() -> Vec<String> {
    vec!["default".into()]
}

pub(super) fn default_diag_port() -> u16 {
    5775
}

pub(super) fn default_diag_file() -> bool {
    true
}

pub(super) fn default_uplink_queue_limit_bytes() -> u64 {
    3 << 20
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

//! The diag feed's settings: the `[diag]` table (message selection, files, mi2log, the
//! feed's timing).

use serde::Deserialize;

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

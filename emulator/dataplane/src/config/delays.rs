//! The emulated path's one-way delays: the `[delays]` table and the check of each.

use std::path::PathBuf;

use serde::Deserialize;

use crate::clock::Nanos;
use crate::error::{Error, Result};
use cell::delay::ms_to_ns;

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

/// Checks a delay in ms: finite, 0..=10000.
pub(super) fn delay_ns(field: &str, ms: f64) -> Result<Nanos> {
    if ms.is_finite() && (0.0..=10_000.0).contains(&ms) {
        Ok(ms_to_ns(ms))
    } else {
        Err(Error::config(field, format!("must be a number of ms in 0..=10000, got {ms}")))
    }
}

//! Cell and UE configuration: serde-deserialisable, every field range-checked by
//! [`CellConfig::validate`] and [`UeConfig::validate`] with an error that names the field.
//!
//! Integer fields are read as `u32`/`u64` even when the model needs less, so that an
//! out-of-range value reaches the range check (and its message naming the field) instead of
//! failing inside the deserialiser with only a line number. Unknown keys are rejected, so a
//! typo does not silently leave a default in force.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::policy::{PolicyChoice, Registry};

/// A configuration value out of range or inconsistent, with the dotted path of the field
/// (e.g. `harq.max_tx`, `ues[3].queue_limit_bytes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path of the offending field.
    pub field: String,
    /// What is wrong with it, including the accepted range.
    pub problem: String,
}

impl ConfigError {
    pub(crate) fn new(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError { field: field.into(), problem: problem.into() }
    }

    /// The same error for a field one level down, e.g. `max_tx` → `harq.max_tx`.
    pub(crate) fn within(self, prefix: &str) -> ConfigError {
        ConfigError { field: format!("{prefix}.{}", self.field), problem: self.problem }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "config field `{}`: {}", self.field, self.problem)
    }
}

impl std::error::Error for ConfigError {}

/// Checks that integer `value` of `field` lies in `lo..=hi`.
fn check_int(field: &str, value: u64, lo: u64, hi: u64) -> Result<(), ConfigError> {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::new(field, format!("must be in {lo}..={hi}, got {value}")))
    }
}

/// Checks that `value` of `field` is a finite number in `lo..=hi` (NaN is rejected).
fn check_real(field: &str, value: f64, lo: f64, hi: f64) -> Result<(), ConfigError> {
    if value.is_finite() && (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::new(field, format!("must be a number in {lo}..={hi}, got {value}")))
    }
}

/// HARQ (hybrid ARQ, MAC layer) and the transmission failures it recovers from. See the
/// crate documentation for how the defaults calibrate the residual loss.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HarqConfig {
    /// Time from a transmission to its retransmission, ms (1..=16). Default 8, LTE FDD's
    /// synchronous HARQ round trip; it is also the number of HARQ processes.
    pub rtt_ms: u32,
    /// Transmissions of a transport block before HARQ gives up and RLC takes over
    /// (1..=8, counting the first). Default 4.
    pub max_tx: u32,
    /// Failure probability of a first transmission when the trace has neither a
    /// `harq_fail` nor a `bler` column (0..=1). Default 0.1, the block error rate LTE link
    /// adaptation aims at.
    pub bler: f64,
    /// Failure probability of a transmission that follows a failure: every HARQ
    /// retransmission, and the first transmission of a transport block carrying RLC
    /// retransmissions, unless a trace `harq_fail` column decides the latter (0..=1).
    /// Default 0.41: the residual-loss calibration knob (see the crate documentation).
    pub retx_bler: f64,
}

impl Default for HarqConfig {
    fn default() -> Self {
        HarqConfig { rtt_ms: 8, max_tx: 4, bler: 0.1, retx_bler: 0.41 }
    }
}

impl HarqConfig {
    /// Largest accepted [`HarqConfig::rtt_ms`].
    pub const MAX_RTT_MS: u32 = 16;
    /// Largest accepted [`HarqConfig::max_tx`].
    pub const MAX_TX: u32 = 8;

    fn validate(&self) -> Result<(), ConfigError> {
        check_int("rtt_ms", self.rtt_ms.into(), 1, Self::MAX_RTT_MS.into())?;
        check_int("max_tx", self.max_tx.into(), 1, Self::MAX_TX.into())?;
        check_real("bler", self.bler, 0.0, 1.0)?;
        check_real("retx_bler", self.retx_bler, 0.0, 1.0)
    }
}

/// RLC acknowledged mode: retransmission of what HARQ gave up on.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RlcConfig {
    /// Delay from HARQ giving up on a transport block to the RLC retransmission of its
    /// bytes becoming ready, ms (0..=1000). Default 40: the receiver's reordering timer
    /// (~35 ms) plus the status report's way back.
    pub retx_delay_ms: u32,
    /// RLC retransmissions of the same bytes before they are given up and their packets
    /// lost (0..=32). Default 1, part of the residual-loss calibration.
    pub max_retx: u32,
}

impl Default for RlcConfig {
    fn default() -> Self {
        RlcConfig { retx_delay_ms: 40, max_retx: 1 }
    }
}

impl RlcConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check_int("retx_delay_ms", self.retx_delay_ms.into(), 0, 1000)?;
        check_int("max_retx", self.max_retx.into(), 0, 32)
    }
}

/// How the UE measures RSRQ from the true allocation (Eq. 6 of `claw-spec.md`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RsrqConfig {
    /// Standard deviation of the Gaussian measurement noise added to RSRQ, dB (0..=20).
    /// Default 0.5.
    pub noise_db: f64,
    /// Quantisation step of the reported RSRQ, dB (0..=1; 0 reports unquantised values).
    /// Default 0.0625, as phones report.
    pub quant_db: f64,
    /// How long a reported value stays before the next measurement, ms (1..=10000).
    /// Default 1: a fresh measurement every subframe.
    pub hold_ms: u32,
}

impl Default for RsrqConfig {
    fn default() -> Self {
        RsrqConfig { noise_db: 0.5, quant_db: 0.0625, hold_ms: 1 }
    }
}

impl RsrqConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check_real("noise_db", self.noise_db, 0.0, 20.0)?;
        check_real("quant_db", self.quant_db, 0.0, 1.0)?;
        check_int("hold_ms", self.hold_ms.into(), 1, 10_000)
    }
}

/// Reads a policy choice of `registry`'s category, a kind-less table through the
/// category's legacy reader (e.g. `[cell.rrc] enabled = true`).
fn resolved_choice<'de, D, T, C>(registry: &Registry<T, C>, deserializer: D) -> Result<PolicyChoice, D::Error>
where
    D: serde::Deserializer<'de>,
    T: ?Sized + 'static,
    C: 'static,
{
    let choice = PolicyChoice::deserialize(deserializer)?;
    registry.resolve(choice).map_err(|e| serde::de::Error::custom(format_args!("{}: {}", e.field, e.problem)))
}

fn rrc_choice<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<PolicyChoice, D::Error> {
    resolved_choice(&crate::rrc::POLICIES, deserializer)
}

fn stall_choice<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<PolicyChoice, D::Error> {
    resolved_choice(&crate::stall::POLICIES, deserializer)
}

/// Configuration of the cell as a whole.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CellConfig {
    /// Resource blocks of the cell, N_rb (6, 15, 25, 50, 75 or 100). Default: the primary
    /// conditions' (the background trace's, else UE 0's trace's), else 50 (10 MHz).
    pub n_rb: Option<u32>,
    /// Transmit antenna ports (1 or 2), which set N_ref of the RSRQ model. Default: the
    /// primary conditions', else 2.
    pub n_antennas: Option<u32>,
    /// The scheduler: a name from [`crate::scheduler::POLICIES`], or a table with `kind`
    /// and its parameters. Default proportional-fair.
    pub scheduler: PolicyChoice,
    /// The HARQ loss model ([`crate::harq::POLICIES`]). Default correlated.
    pub loss: PolicyChoice,
    /// Number of active other users assumed when the trace has no `other_users` column and
    /// its other users demand RBs (1..=255). Default 1.
    pub default_other_users: u32,
    /// HARQ.
    pub harq: HarqConfig,
    /// RLC.
    pub rlc: RlcConfig,
    /// RSRQ measurement.
    pub rsrq: RsrqConfig,
    /// The RRC/DRX model ([`crate::rrc::POLICIES`]): `lte` (default), `umts` or `off`; a
    /// table without `kind` is read as the former switch (`enabled`, `profile`).
    #[serde(deserialize_with = "rrc_choice")]
    pub rrc: PolicyChoice,
    /// The link-layer stall process ([`crate::stall::POLICIES`]): `off` (default) or
    /// `poisson`; a trace's `outage` column stalls in any case.
    #[serde(deserialize_with = "stall_choice")]
    pub stall: PolicyChoice,
}

impl Default for CellConfig {
    fn default() -> Self {
        CellConfig {
            n_rb: None,
            n_antennas: None,
            scheduler: crate::scheduler::POLICIES.default_choice(),
            loss: crate::harq::POLICIES.default_choice(),
            default_other_users: 1,
            harq: HarqConfig::default(),
            rlc: RlcConfig::default(),
            rsrq: RsrqConfig::default(),
            rrc: crate::rrc::POLICIES.default_choice(),
            stall: crate::stall::POLICIES.default_choice(),
        }
    }
}

impl CellConfig {
    /// Cell sizes (N_rb) LTE defines.
    pub const VALID_N_RB: [u32; 6] = [6, 15, 25, 50, 75, 100];

    /// Checks every field; the error names the first one out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(n_rb) = self.n_rb {
            if !Self::VALID_N_RB.contains(&n_rb) {
                return Err(ConfigError::new("n_rb", format!("must be one of 6, 15, 25, 50, 75, 100, got {n_rb}")));
            }
        }
        if let Some(n_antennas) = self.n_antennas {
            check_int("n_antennas", n_antennas.into(), 1, 2)?;
        }
        check_int("default_other_users", self.default_other_users.into(), 1, 255)?;
        crate::scheduler::POLICIES.check(&self.scheduler).map_err(|e| e.within("scheduler"))?;
        crate::harq::POLICIES.check(&self.loss).map_err(|e| e.within("loss"))?;
        self.harq.validate().map_err(|e| e.within("harq"))?;
        self.rlc.validate().map_err(|e| e.within("rlc"))?;
        self.rsrq.validate().map_err(|e| e.within("rsrq"))?;
        crate::rrc::POLICIES.check(&self.rrc).map_err(|e| e.within("rrc"))?;
        crate::stall::POLICIES.check(&self.stall).map(drop).map_err(|e| e.within("stall"))
    }
}

/// Configuration of one emulated UE.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct UeConfig {
    /// Drop-tail limit of the UE's base-station buffer, bytes waiting for transmission
    /// (1..=1073741824). Default 3145728 (3 MiB): the seeds measured hundreds of KB to a
    /// few MB of buffering per UE.
    pub queue_limit_bytes: u64,
    /// RSRP reported when the UE's conditions carry none, dBm (−140..=−44). Default −90.
    pub rsrp_dbm: f64,
    /// The admission policy of the UE's base-station buffer ([`crate::queue::POLICIES`]).
    /// Default drop-tail (at `queue_limit_bytes`).
    pub queue: PolicyChoice,
}

impl Default for UeConfig {
    fn default() -> Self {
        UeConfig { queue_limit_bytes: 3 * 1024 * 1024, rsrp_dbm: -90.0, queue: crate::queue::POLICIES.default_choice() }
    }
}

impl UeConfig {
    /// Checks every field; the error names the first one out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_int("queue_limit_bytes", self.queue_limit_bytes, 1, 1 << 30)?;
        check_real("rsrp_dbm", self.rsrp_dbm, -140.0, -44.0)?;
        crate::queue::POLICIES.check(&self.queue).map(drop).map_err(|e| e.within("queue"))
    }

    /// [`UeConfig::validate`] for UE number `index`, the error naming `ues[index].field`.
    pub(crate) fn validate_as(&self, index: usize) -> Result<(), ConfigError> {
        self.validate().map_err(|e| e.within(&format!("ues[{index}]")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        CellConfig::default().validate().unwrap();
        UeConfig::default().validate().unwrap();
    }
}

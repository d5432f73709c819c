//! Link-layer stalls: stretches during which a UE's radio link carries nothing although
//! its data waits (HARQ/RLC recovery through a deep fade, a short outage, a cell
//! reselection black-out). The data is held, not dropped; when the stall ends the queue
//! goes out at the cell's rate, a burst after a delay spike of tens of ms to seconds
//! (WWAN §3, §4.4: "ARQ jitter 600 ms–3 s", stalls + deep queues → delay spikes →
//! spurious timeouts; CLAW §1/§3 blames such RTT surges for Cubic's early slow-start exits
//! and timeouts). A pluggable policy (`cell.stall`, [`POLICIES`]): `off` (the default) or
//! `poisson`. A trace's `outage` column stalls the UE in the subframes it marks, whatever
//! the policy.
//!
//! Parameters (`docs/fidelity-table.md` §7; the papers give no stall rate or duration
//! distribution for LTE, so the defaults are chosen, see `docs/emulator-model.md`,
//! "Link-layer stalls" and "Calibration"):
//!
//! | parameter | default | source |
//! |---|---|---|
//! | mean interval between stall starts | 20 s | chosen (no paper measures it) |
//! | shortest stall | 50 ms | "tens of ms" (CLAW §3 RTT surges; an RLC retransmission is ~40 ms) |
//! | longest stall | 3 000 ms | WWAN §2.2, §4.4.2: ARQ jitter up to 3 s |
//! | duration distribution | log-uniform between the two | chosen: the papers give a range spanning two orders of magnitude, no shape |

use std::fmt;

use crate::policy::{Param, ParamDefault, ParamType, Policy, Registry};
use crate::rng::Rng;

/// Decides, subframe by subframe, whether a UE's link is stalled.
pub trait StallProcess: fmt::Debug {
    /// Whether the UE's link is stalled in subframe `t_ms` (called once per subframe with
    /// increasing `t_ms`; subframes may be skipped). Draws from `rng`, the UE's own stream.
    fn stalled(&mut self, t_ms: u64, rng: &mut Rng) -> bool;
}

/// No stalls.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoStalls;

impl StallProcess for NoStalls {
    fn stalled(&mut self, _: u64, _: &mut Rng) -> bool {
        false
    }
}

/// Stalls starting as a Poisson process (exponential gaps between the end of one and the
/// start of the next, mean `mean_interval_ms`), each lasting a log-uniform draw between
/// `min_ms` and `max_ms`.
#[derive(Clone, Debug)]
pub struct PoissonStalls {
    /// Mean time from the end of a stall to the start of the next, ms.
    pub mean_interval_ms: f64,
    /// Shortest stall, ms.
    pub min_ms: f64,
    /// Longest stall, ms.
    pub max_ms: f64,
    /// The next stall's start and end (end exclusive), drawn on the first call.
    next: Option<(u64, u64)>,
}

impl PoissonStalls {
    /// The process with those parameters (`min_ms` and `max_ms` are taken in order).
    pub fn new(mean_interval_ms: f64, min_ms: f64, max_ms: f64) -> PoissonStalls {
        PoissonStalls { mean_interval_ms, min_ms: min_ms.min(max_ms), max_ms: max_ms.max(min_ms), next: None }
    }

    /// A stall duration, ms: log-uniform in `min_ms..=max_ms`.
    pub fn draw_duration(&self, rng: &mut Rng) -> f64 {
        let u = rng.uniform();
        if self.min_ms <= 0.0 {
            return self.min_ms + u * (self.max_ms - self.min_ms);
        }
        self.min_ms * (self.max_ms / self.min_ms).powf(u)
    }

    fn draw_next(&self, after_ms: u64, rng: &mut Rng) -> (u64, u64) {
        // 1 − uniform is in (0, 1]: a finite gap.
        let gap = -self.mean_interval_ms * (1.0 - rng.uniform()).ln();
        let start = after_ms.saturating_add(gap.round() as u64);
        let len = self.draw_duration(rng).round().max(1.0) as u64;
        (start, start.saturating_add(len))
    }
}

impl StallProcess for PoissonStalls {
    fn stalled(&mut self, t_ms: u64, rng: &mut Rng) -> bool {
        let mut next = match self.next {
            Some(n) => n,
            None => self.draw_next(t_ms, rng),
        };
        // Skipped subframes: stalls that ended before t_ms are over.
        while t_ms >= next.1 {
            next = self.draw_next(next.1, rng);
        }
        self.next = Some(next);
        t_ms >= next.0
    }
}

/// Every stall process, by name: the `cell.stall` choice (`crate::policy`). Built once per
/// UE.
pub static POLICIES: Registry<dyn StallProcess + Send, ()> = Registry {
    category: "stall",
    config_key: "cell.stall",
    default: "off",
    summary: "link-layer stalls: outages that hold a UE's data, then release it in a burst (a trace's outage \
              column stalls too, whatever the choice)",
    policies: &[
        Policy {
            name: "off",
            summary: "no stalls but those a trace's outage column marks",
            params: &[],
            build: |_, _| Box::new(NoStalls),
        },
        Policy {
            name: "poisson",
            summary: "stalls starting at exponential gaps (mean mean_interval_s), each log-uniform in min_ms..=max_ms",
            params: &[
                Param {
                    name: "mean_interval_s",
                    kind: ParamType::Real { min: 0.01, max: 86_400.0 },
                    default: ParamDefault::Real(20.0),
                    doc: "mean time between stalls, s (chosen: no paper measures it)",
                },
                Param {
                    name: "min_ms",
                    kind: ParamType::Integer { min: 1, max: 60_000 },
                    default: ParamDefault::Integer(50),
                    doc: "shortest stall, ms (tens of ms: CLAW §3)",
                },
                Param {
                    name: "max_ms",
                    kind: ParamType::Integer { min: 1, max: 60_000 },
                    default: ParamDefault::Integer(3_000),
                    doc: "longest stall, ms (WWAN §2.2, §4.4.2: up to 3 s)",
                },
            ],
            build: |p, _| {
                Box::new(PoissonStalls::new(
                    p.real("mean_interval_s") * 1000.0,
                    p.integer("min_ms") as f64,
                    p.integer("max_ms") as f64,
                ))
            },
        },
    ],
    legacy: Some(legacy_table),
};

/// A `cell.stall` table without `kind` (the fidelity suite's keys): `enabled = false` →
/// `off`, else `poisson` with the other keys as its parameters.
fn legacy_table(params: &mut std::collections::BTreeMap<String, crate::policy::ParamValue>) -> Result<String, String> {
    use crate::policy::ParamValue;
    match params.remove("enabled") {
        Some(ParamValue::Bool(false)) => {
            params.clear();
            Ok("off".into())
        }
        None | Some(ParamValue::Bool(true)) => Ok("poisson".into()),
        Some(v) => Err(format!("enabled: must be true or false, got {v}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_follow_their_parameters() {
        let mut p = PoissonStalls::new(2_000.0, 100.0, 1_000.0);
        let mut rng = Rng::new(3, 9);
        let (mut stalled_ms, mut starts, mut durations) = (0u64, 0u64, Vec::new());
        let mut run = 0u64;
        let total = 2_000_000u64;
        for t in 0..total {
            if p.stalled(t, &mut rng) {
                stalled_ms += 1;
                run += 1;
            } else if run > 0 {
                starts += 1;
                durations.push(run as f64);
                run = 0;
            }
        }
        durations.sort_by(f64::total_cmp);
        let mean_dur = durations.iter().sum::<f64>() / durations.len() as f64;
        // Log-uniform on 100..1000: median √(100·1000) ≈ 316, mean 900/ln 10 ≈ 391.
        let median = durations[durations.len() / 2];
        assert!((median - 316.2).abs() < 25.0, "median {median}");
        assert!((mean_dur - 390.9).abs() < 25.0, "mean {mean_dur}");
        assert!(durations[0] >= 100.0 && *durations.last().unwrap() <= 1_000.0);
        // A stall every mean gap + mean duration.
        let expected = total as f64 / (2_000.0 + 390.9);
        assert!((starts as f64 - expected).abs() / expected < 0.08, "{starts} vs {expected}");
        assert!(stalled_ms > 0);
    }

    #[test]
    fn skipping_subframes_changes_nothing_after_a_gap() {
        let mut p = PoissonStalls::new(500.0, 10.0, 20.0);
        let mut rng = Rng::new(1, 1);
        assert!(!p.stalled(0, &mut rng) || p.next.unwrap().0 == 0);
        // A call far ahead skips every stall in between without panicking.
        p.stalled(10_000_000, &mut rng);
        assert!(p.next.unwrap().1 > 10_000_000);
    }
}

//! RSRQ as the UE measures it: Eq. 6 of the CLAW paper (`claw-spec.md`) applied to the
//! cell's true total allocation A_k, plus Gaussian measurement noise, quantised as phones
//! report it, and held for a configurable period.

use crate::config::RsrqConfig;
use crate::rng::Rng;

/// Lowest RSRQ a report carries, dB (the trace format's and 36.133's extended range).
pub const MIN_REPORTED_RSRQ_DB: f64 = -34.0;
/// Highest RSRQ a report carries, dB.
pub const MAX_REPORTED_RSRQ_DB: f64 = 3.0;

/// Noise-free RSRQ, dB, of a cell with `total_alloc_rbs` of its `n_rb` RBs allocated and
/// `n_antennas` transmit ports (Eq. 6). `None` for an unsupported antenna count or an
/// allocation above N_rb.
pub fn rsrq_db(total_alloc_rbs: u8, n_rb: u8, n_antennas: u8) -> Option<f64> {
    if n_rb == 0 {
        return None;
    }
    lte::rsrq::rsrq_db_from_load(f64::from(total_alloc_rbs) / f64::from(n_rb), n_antennas)
}

/// One UE's RSRQ measurement: noise, quantisation and hold.
#[derive(Debug)]
pub(crate) struct RsrqMeter {
    config: RsrqConfig,
    rng: Rng,
    /// The value reported until `next_update_ms`.
    held_db: f64,
    next_update_ms: Option<u64>,
}

impl RsrqMeter {
    pub fn new(config: RsrqConfig, rng: Rng) -> RsrqMeter {
        RsrqMeter { config, rng, held_db: 0.0, next_update_ms: None }
    }

    /// The RSRQ reported in subframe `t_ms` when the true value is `true_db`, and whether
    /// it is a new measurement (else the held one).
    pub fn measure(&mut self, t_ms: u64, true_db: f64) -> (f64, bool) {
        if self.next_update_ms.is_some_and(|next| t_ms < next) {
            return (self.held_db, false);
        }
        let mut db = true_db;
        if self.config.noise_db > 0.0 {
            db += self.config.noise_db * self.rng.gaussian();
        }
        if self.config.quant_db > 0.0 {
            db = (db / self.config.quant_db).round() * self.config.quant_db;
        }
        self.held_db = db.clamp(MIN_REPORTED_RSRQ_DB, MAX_REPORTED_RSRQ_DB);
        self.next_update_ms = Some(t_ms + u64::from(self.config.hold_ms));
        (self.held_db, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantised_noisy_and_held() {
        let config = RsrqConfig { noise_db: 1.0, quant_db: 0.0625, hold_ms: 10 };
        let mut meter = RsrqMeter::new(config, Rng::new(1, 1));
        let (first, updated) = meter.measure(0, -10.0);
        assert!(updated);
        assert_eq!((first / 0.0625).fract(), 0.0);
        assert_ne!(first, -10.0);
        for t in 1..10 {
            assert_eq!(meter.measure(t, -3.0), (first, false));
        }
        assert!(meter.measure(10, -3.0).1);
    }

    #[test]
    fn eq6_end_points() {
        assert!((rsrq_db(0, 50, 2).unwrap() - 10.0 * 0.25f64.log10()).abs() < 1e-12);
        assert!((rsrq_db(50, 50, 2).unwrap() - 10.0 * 0.05f64.log10()).abs() < 1e-12);
        assert_eq!(rsrq_db(51, 50, 2), None);
    }
}

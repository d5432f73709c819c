//! The CLAW paper's RSRQ model (claw-spec.md, Eq. 6 and 7): RSRQ as a function of the cell
//! load, and its inverse, which CLAW uses to estimate the load from a measured RSRQ.
//!
//! With r = allocated RBs / N_rb the cell load (0..=1), N_ant transmit antenna ports,
//! N_ref reference-signal subcarriers per RB (2 for one port, 4 for two) and
//! N_subc = 12 subcarriers per RB:
//!
//! Q = 1 / (N_ref + r·(N_subc − N_ref)·N_ant)   (linear RSRQ)
//!
//! So an idle one-port cell reads 1/2 (−3.0 dB) and a full one reads 1/12 (−10.8 dB).

/// Subcarriers per resource block.
pub const N_SUBC: f64 = 12.0;

/// Reference-signal resource elements per RB and symbol, N_ref, for `n_antennas` transmit
/// antenna ports: 2 for one port, 4 for two; `None` otherwise.
pub fn n_ref(n_antennas: u8) -> Option<f64> {
    match n_antennas {
        1 => Some(2.0),
        2 => Some(4.0),
        _ => None,
    }
}

/// Linear RSRQ (a power ratio, dimensionless) for cell load `load` (fraction of the cell's
/// RBs allocated, 0..=1) with `n_antennas` ports (1 or 2). `None` if the load is outside
/// [0, 1] (or NaN) or the antenna count unsupported.
pub fn rsrq_linear_from_load(load: f64, n_antennas: u8) -> Option<f64> {
    let n_ref = n_ref(n_antennas)?;
    if !(0.0..=1.0).contains(&load) {
        return None;
    }
    Some(1.0 / (n_ref + load * (N_SUBC - n_ref) * f64::from(n_antennas)))
}

/// Cell load (fraction 0..=1) implied by linear RSRQ `q` with `n_antennas` ports (1 or 2):
/// r = (1/Q − N_ref) / ((N_subc − N_ref)·N_ant), clamped to [0, 1] because a measured
/// RSRQ carries noise. `None` if `q` is not positive and finite or the antenna count is
/// unsupported.
pub fn load_from_rsrq_linear(q: f64, n_antennas: u8) -> Option<f64> {
    let n_ref = n_ref(n_antennas)?;
    if !(q.is_finite() && q > 0.0) {
        return None;
    }
    let load = (1.0 / q - n_ref) / ((N_SUBC - n_ref) * f64::from(n_antennas));
    Some(load.clamp(0.0, 1.0))
}

/// RSRQ in dB for cell load `load` (0..=1) with `n_antennas` ports; see
/// [`rsrq_linear_from_load`].
pub fn rsrq_db_from_load(load: f64, n_antennas: u8) -> Option<f64> {
    rsrq_linear_from_load(load, n_antennas).map(linear_to_db)
}

/// Cell load (0..=1, clamped) implied by RSRQ `rsrq_db` in dB with `n_antennas` ports; see
/// [`load_from_rsrq_linear`].
pub fn load_from_rsrq_db(rsrq_db: f64, n_antennas: u8) -> Option<f64> {
    load_from_rsrq_linear(db_to_linear(rsrq_db), n_antennas)
}

/// A power ratio in dB: 10·log10(`linear`).
pub fn linear_to_db(linear: f64) -> f64 {
    10.0 * linear.log10()
}

/// A power ratio from dB: 10^(`db`/10).
pub fn db_to_linear(db: f64) -> f64 {
    10f64.powf(db / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn end_points() {
        assert!(close(rsrq_linear_from_load(0.0, 1).unwrap(), 0.5));
        assert!(close(rsrq_linear_from_load(1.0, 1).unwrap(), 1.0 / 12.0));
        assert!(close(rsrq_linear_from_load(0.0, 2).unwrap(), 0.25));
        assert!(close(rsrq_linear_from_load(1.0, 2).unwrap(), 1.0 / 20.0));
        assert!((rsrq_db_from_load(0.0, 1).unwrap() + 3.0103).abs() < 1e-4);
    }

    #[test]
    fn round_trip() {
        for n_antennas in 1..=2 {
            for step in 0..=100 {
                let load = f64::from(step) / 100.0;
                let q = rsrq_linear_from_load(load, n_antennas).unwrap();
                assert!(close(load_from_rsrq_linear(q, n_antennas).unwrap(), load));
                let db = rsrq_db_from_load(load, n_antennas).unwrap();
                assert!(close(load_from_rsrq_db(db, n_antennas).unwrap(), load));
            }
        }
        assert!(close(db_to_linear(linear_to_db(0.125)), 0.125));
    }

    #[test]
    fn inverse_clamps() {
        // Better than an idle cell can read, and worse than a full one.
        assert_eq!(load_from_rsrq_linear(0.9, 1), Some(0.0));
        assert_eq!(load_from_rsrq_linear(0.01, 1), Some(1.0));
        assert_eq!(load_from_rsrq_db(3.0, 2), Some(0.0));
        assert_eq!(load_from_rsrq_db(-34.0, 2), Some(1.0));
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(rsrq_linear_from_load(1.5, 1), None);
        assert_eq!(rsrq_linear_from_load(-0.1, 1), None);
        assert_eq!(rsrq_linear_from_load(f64::NAN, 1), None);
        assert_eq!(rsrq_linear_from_load(0.5, 3), None);
        assert_eq!(load_from_rsrq_linear(0.0, 1), None);
        assert_eq!(load_from_rsrq_linear(f64::NAN, 1), None);
        assert_eq!(load_from_rsrq_linear(0.1, 0), None);
        assert_eq!(n_ref(4), None);
    }
}

//! LTE channel bandwidth ↔ number of downlink resource blocks N_rb (36.101 Table 5.6-1).

/// (bandwidth in MHz, N_rb) for the six LTE channel bandwidths.
pub const BANDWIDTHS: [(f64, u8); 6] = [(1.4, 6), (3.0, 15), (5.0, 25), (10.0, 50), (15.0, 75), (20.0, 100)];

/// Bandwidths are compared within this many MHz, so 1.4 parsed from JSON matches.
const MHZ_TOLERANCE: f64 = 1e-6;

/// Number of resource blocks N_rb of a channel of `mhz` MHz; `None` unless `mhz` is one of
/// 1.4, 3, 5, 10, 15 or 20.
pub fn n_rb_for_mhz(mhz: f64) -> Option<u8> {
    BANDWIDTHS.iter().find(|&&(bw, _)| (bw - mhz).abs() < MHZ_TOLERANCE).map(|&(_, n_rb)| n_rb)
}

/// Channel bandwidth in MHz with `n_rb` resource blocks; `None` unless `n_rb` is one of
/// 6, 15, 25, 50, 75 or 100.
pub fn mhz_for_n_rb(n_rb: u8) -> Option<f64> {
    BANDWIDTHS.iter().find(|&&(_, n)| n == n_rb).map(|&(bw, _)| bw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_directions() {
        assert_eq!(n_rb_for_mhz(1.4), Some(6));
        assert_eq!(n_rb_for_mhz(10.0), Some(50));
        assert_eq!(n_rb_for_mhz(20.0), Some(100));
        assert_eq!(n_rb_for_mhz(12.0), None);
        assert_eq!(n_rb_for_mhz(f64::NAN), None);
        assert_eq!(mhz_for_n_rb(25), Some(5.0));
        assert_eq!(mhz_for_n_rb(110), None);
        for (mhz, n_rb) in BANDWIDTHS {
            assert_eq!(n_rb_for_mhz(mhz), Some(n_rb));
            assert_eq!(mhz_for_n_rb(n_rb), Some(mhz));
        }
    }
}

//! MCS index → modulation order and TBS index, 36.213 Table 7.1.7.1-1 (PDSCH).

use crate::tables::MCS_TABLE;

/// Highest MCS index with a TBS index (I_MCS 29..=31 are reserved for retransmissions).
pub const MAX_DATA_MCS: u8 = 28;

/// Modulation order Q_m (bits per modulation symbol: 2 QPSK, 4 16QAM, 6 64QAM) of MCS
/// index `i_mcs`; defined for the reserved indices 29..=31 too. `None` above 31.
pub fn modulation_order(i_mcs: u8) -> Option<u8> {
    MCS_TABLE.get(usize::from(i_mcs)).map(|&(q_m, _)| q_m)
}

/// TBS index I_TBS of MCS index `i_mcs`. `None` for the reserved indices 29..=31 (a
/// retransmission reuses the first transmission's size) and for anything above 31.
pub fn i_tbs(i_mcs: u8) -> Option<u8> {
    MCS_TABLE.get(usize::from(i_mcs)).and_then(|&(_, i_tbs)| i_tbs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_entries() {
        assert_eq!(i_tbs(0), Some(0));
        assert_eq!(i_tbs(10), Some(9));
        assert_eq!(i_tbs(MAX_DATA_MCS), Some(26));
        assert_eq!(modulation_order(9), Some(2));
        assert_eq!(modulation_order(10), Some(4));
        assert_eq!(modulation_order(17), Some(6));
    }

    #[test]
    fn reserved_and_out_of_range() {
        for i_mcs in 29..=31 {
            assert_eq!(i_tbs(i_mcs), None);
            assert!(modulation_order(i_mcs).is_some());
        }
        assert_eq!(i_tbs(32), None);
        assert_eq!(modulation_order(32), None);
    }
}

//! A UE's demand D_k: the fewest RBs whose transport block at the UE's MCS carries what it
//! can send now (queued bytes and ready RLC retransmissions), at most N_rb.

/// Fewest RBs (0..=`n_rb`) whose TBS at MCS `mcs` on `layers` layers carries
/// `sendable_bytes`; `n_rb` when even the whole cell carries less. 0 for nothing to send,
/// and for an MCS or layer count the TBS table does not cover (such a UE cannot be
/// scheduled).
pub fn demand_rbs(mcs: u8, layers: u8, sendable_bytes: u64, n_rb: u8) -> u8 {
    if sendable_bytes == 0 {
        return 0;
    }
    let bits = u32::try_from(sendable_bytes.saturating_mul(8)).unwrap_or(u32::MAX);
    // A backlogged UE wants the whole cell: answer without scanning the TBS row. The
    // whole cell carries the most bits of any RB count for every LTE cell size (the row
    // I_TBS 6 is non-monotone only at 1 PRB, below the smallest cell's value).
    match lte::tbs::tbs_bits(mcs, n_rb, layers) {
        None => 0,
        Some(whole_cell_bits) if whole_cell_bits < bits => n_rb,
        Some(_) => lte::tbs::min_prbs_for_bits(mcs, bits, n_rb, layers).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_rbs() {
        for mcs in 0..=28 {
            for layers in 1..=2 {
                for bytes in [1u64, 40, 100, 1500, 3000, 9000, 20_000] {
                    let d = demand_rbs(mcs, layers, bytes, 50);
                    let carries = |n: u8| u64::from(lte::tbs::tbs_bits(mcs, n, layers).unwrap()) >= bytes * 8;
                    if carries(50) {
                        assert!(carries(d), "MCS {mcs} {bytes} B: {d} RBs too few");
                        assert!((1..d).all(|n| !carries(n)), "MCS {mcs} {bytes} B: {d} RBs not minimal");
                    } else {
                        assert_eq!(d, 50);
                    }
                }
            }
        }
        assert_eq!(demand_rbs(28, 1, 0, 50), 0);
        assert_eq!(demand_rbs(29, 1, 100, 50), 0);
        assert_eq!(demand_rbs(10, 1, u64::MAX, 100), 100);
    }
}

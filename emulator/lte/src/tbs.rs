//! Transport block size, 36.213 §7.1.7.2: Table 7.1.7.2.1-1 (one layer) and the
//! two-layer rule of §7.1.7.2.2.
//!
//! The table keeps the specification's value at (I_TBS 6, N_PRB 1), 328 bits, although it
//! makes row 6 non-monotone (N_PRB 2 gives 176) and makes one PRB on two layers (column 2,
//! 176) carry less than on one layer. Some simulators replace it with 88; we follow the
//! spec, so nothing here assumes a row grows with N_PRB.

use crate::mcs;
use crate::tables::{TBS_TABLE, TBS_TRANSLATION};

/// Largest number of PRBs the TBS table covers (N_PRB 1..=110).
pub const MAX_N_PRB: u8 = 110;

/// Largest N_PRB whose two-layer TBS is the one-layer table at column 2·N_PRB; above it the
/// translation table 7.1.7.2.2-1 applies.
const MAX_DOUBLED_N_PRB: u8 = 55;

/// One-layer TBS in bits for TBS index `i_tbs` (0..=26) over `n_prb` PRBs (1..=110);
/// `None` outside those ranges.
fn one_layer(i_tbs: u8, n_prb: u8) -> Option<u32> {
    let row = TBS_TABLE.get(usize::from(i_tbs))?;
    row.get(usize::from(n_prb).checked_sub(1)?).copied()
}

/// TBS in bits of one transport block with TBS index `i_tbs` (0..=26) over `n_prb` PRBs
/// (1..=110) mapped to `layers` spatial layers (1 or 2). Two layers follow 36.213
/// §7.1.7.2.2: N_PRB ≤ 55 reads the one-layer table at column 2·N_PRB, N_PRB ≥ 56 maps the
/// one-layer value through Table 7.1.7.2.2-1. `None` for any argument out of range.
pub fn tbs_bits_itbs(i_tbs: u8, n_prb: u8, layers: u8) -> Option<u32> {
    match layers {
        1 => one_layer(i_tbs, n_prb),
        2 if n_prb <= MAX_DOUBLED_N_PRB => one_layer(i_tbs, n_prb.checked_mul(2)?),
        2 => {
            let bits = one_layer(i_tbs, n_prb)?;
            // build.rs checked that every one-layer value of N_PRB 56..=110 is in the table.
            let at = TBS_TRANSLATION.binary_search_by_key(&bits, |&(one, _)| one).ok()?;
            Some(TBS_TRANSLATION[at].1)
        }
        _ => None,
    }
}

/// TBS in bits for MCS index `i_mcs` (0..=28) over `n_prb` PRBs (1..=110) on `layers`
/// layers (1 or 2); see [`tbs_bits_itbs`]. `None` for a reserved MCS (29..=31) or any
/// argument out of range.
pub fn tbs_bits(i_mcs: u8, n_prb: u8, layers: u8) -> Option<u32> {
    tbs_bits_itbs(mcs::i_tbs(i_mcs)?, n_prb, layers)
}

/// [`tbs_bits`] with `n_prb` clamped to [1, `n_rb`], as CLAW's capacity formula does with
/// an estimated PRB count: a count of 0 gives the one-PRB TBS, not 0 bits. `n_rb` is the
/// cell's resource blocks (1..=110); `None` if it is out of range, the MCS reserved or
/// `layers` not 1 or 2.
pub fn tbs_bits_clamped(i_mcs: u8, n_prb: u32, n_rb: u8, layers: u8) -> Option<u32> {
    if n_rb == 0 || n_rb > MAX_N_PRB {
        return None;
    }
    let clamped = n_prb.clamp(1, u32::from(n_rb));
    tbs_bits(i_mcs, u8::try_from(clamped).ok()?, layers)
}

/// Fewest PRBs (1..=`n_rb`) whose TBS for MCS `i_mcs` on `layers` layers is at least
/// `bits`, or `n_rb` when even the whole cell carries less (the caller sends what fits).
/// 0 bits need 0 PRBs. Scans N_PRB upwards rather than bisecting, because row I_TBS 6 is
/// not monotone (see the module doc). `None` for a reserved MCS, `layers` not 1 or 2, or
/// `n_rb` outside 1..=110.
pub fn min_prbs_for_bits(i_mcs: u8, bits: u32, n_rb: u8, layers: u8) -> Option<u8> {
    if n_rb == 0 || n_rb > MAX_N_PRB {
        return None;
    }
    let i_tbs = mcs::i_tbs(i_mcs)?;
    if layers != 1 && layers != 2 {
        return None;
    }
    if bits == 0 {
        return Some(0);
    }
    for n_prb in 1..=n_rb {
        if tbs_bits_itbs(i_tbs, n_prb, layers)? >= bits {
            return Some(n_prb);
        }
    }
    Some(n_rb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_layer_known_values() {
        assert_eq!(tbs_bits_itbs(26, 50, 1), Some(36696));
        assert_eq!(tbs_bits_itbs(26, 100, 1), Some(75376));
        assert_eq!(tbs_bits_itbs(0, 1, 1), Some(16));
        assert_eq!(tbs_bits(28, 50, 1), Some(36696));
    }

    #[test]
    fn spec_value_kept_at_itbs_6_one_prb() {
        assert_eq!(tbs_bits_itbs(6, 1, 1), Some(328));
        assert_eq!(tbs_bits_itbs(6, 2, 1), Some(176));
    }

    #[test]
    fn two_layers() {
        // N_PRB 30 ≤ 55: one-layer table at column 60.
        assert_eq!(tbs_bits_itbs(26, 30, 2), Some(43816));
        assert_eq!(tbs_bits_itbs(26, 30, 2), tbs_bits_itbs(26, 60, 1));
        assert_eq!(tbs_bits_itbs(0, 30, 2), Some(1672));
        // N_PRB 100 ≥ 56: translation of the one-layer 75376.
        assert_eq!(tbs_bits_itbs(26, 100, 2), Some(149776));
        assert_eq!(tbs_bits(28, 100, 2), Some(149776));
        // The spec's 328 at (6, 1) makes one PRB on two layers (column 2: 176) carry less
        // than on one layer; every other two-layer cell exceeds its one-layer value.
        assert_eq!(tbs_bits_itbs(6, 1, 2), Some(176));
        for i_tbs in 0..=26 {
            for n_prb in 1..=MAX_N_PRB {
                let one = tbs_bits_itbs(i_tbs, n_prb, 1).unwrap();
                let two = tbs_bits_itbs(i_tbs, n_prb, 2).unwrap();
                if (i_tbs, n_prb) != (6, 1) {
                    assert!(two > one, "I_TBS {i_tbs} N_PRB {n_prb}: {two} <= {one}");
                }
            }
        }
    }

    #[test]
    fn out_of_range_is_none() {
        assert_eq!(tbs_bits_itbs(27, 1, 1), None);
        assert_eq!(tbs_bits_itbs(0, 0, 1), None);
        assert_eq!(tbs_bits_itbs(0, 111, 1), None);
        assert_eq!(tbs_bits_itbs(0, 111, 2), None);
        assert_eq!(tbs_bits_itbs(0, 1, 0), None);
        assert_eq!(tbs_bits_itbs(0, 1, 3), None);
        assert_eq!(tbs_bits(29, 10, 1), None);
        assert_eq!(tbs_bits(31, 10, 1), None);
    }

    #[test]
    fn clamping() {
        assert_eq!(tbs_bits_clamped(28, 0, 50, 1), tbs_bits(28, 1, 1));
        assert_eq!(tbs_bits_clamped(28, 50, 50, 1), Some(36696));
        assert_eq!(tbs_bits_clamped(28, 1000, 50, 1), Some(36696));
        assert_eq!(tbs_bits_clamped(28, 1000, 100, 2), Some(149776));
        assert_eq!(tbs_bits_clamped(28, 10, 0, 1), None);
        assert_eq!(tbs_bits_clamped(28, 10, 111, 1), None);
        assert_eq!(tbs_bits_clamped(29, 10, 50, 1), None);
    }

    #[test]
    fn min_prbs() {
        assert_eq!(min_prbs_for_bits(28, 0, 50, 1), Some(0));
        assert_eq!(min_prbs_for_bits(0, 16, 50, 1), Some(1));
        assert_eq!(min_prbs_for_bits(0, 17, 50, 1), Some(2));
        assert_eq!(min_prbs_for_bits(28, 36696, 100, 1), Some(49));
        assert_eq!(min_prbs_for_bits(28, 36697, 100, 1), Some(51));
        // More than the cell carries: capped at N_rb.
        assert_eq!(min_prbs_for_bits(28, 1_000_000, 50, 1), Some(50));
        assert_eq!(min_prbs_for_bits(28, 1_000_000, 50, 2), Some(50));
        // Row 6 is not monotone: 328 bits fit in 1 PRB, 329 need 4 (176, 256, 392).
        assert_eq!(min_prbs_for_bits(6, 300, 50, 1), Some(1));
        assert_eq!(min_prbs_for_bits(6, 329, 50, 1), Some(4));
        // Two layers: 43816 bits at MCS 28 is N_PRB 30 (column 60); 29 PRBs give less.
        assert_eq!(min_prbs_for_bits(28, 43816, 50, 2), Some(30));
        assert_eq!(min_prbs_for_bits(29, 100, 50, 1), None);
        assert_eq!(min_prbs_for_bits(28, 100, 0, 1), None);
        assert_eq!(min_prbs_for_bits(28, 100, 50, 3), None);
        // The answer is the first PRB count that fits, by brute force over every cell.
        for i_mcs in 0..=28 {
            for n_prb in 1..=MAX_N_PRB {
                for layers in 1..=2 {
                    let bits = tbs_bits(i_mcs, n_prb, layers).unwrap();
                    let found = min_prbs_for_bits(i_mcs, bits, MAX_N_PRB, layers).unwrap();
                    assert!(found <= n_prb);
                    assert!(tbs_bits(i_mcs, found, layers).unwrap() >= bits);
                    assert!((1..found).all(|n| tbs_bits(i_mcs, n, layers).unwrap() < bits));
                }
            }
        }
    }
}

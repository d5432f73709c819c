//! The residual-loss calibration (crate documentation): with the default loss settings, a
//! saturated UE on a busy cell loses about 6·10⁻⁴ of its packets to RLC, the seeds'
//! median TCP retransmission rate, and a poor channel stays below the worst case of 1%.

mod common;

use cell::{Cell, CellConfig, TraceColumns, UeConfig, UeSetup};
use common::*;

/// A small deterministic generator for building synthetic traces.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

/// A busy 10 MHz cell for `rows` ms: the channel MCS wanders over 8..=24 and the other
/// users' demand over bursts of 0..=50 RBs, one to four of them.
fn busy_trace(rows: usize, seed: u64) -> TraceColumns {
    let mut rng = Lcg(seed);
    let (mut mcs, mut other_rbs, mut other_users) = (16i64, 30i64, 2u8);
    let mut columns = constant_columns(0, 0, 0);
    let mut users = Vec::with_capacity(rows);
    for t in 0..rows {
        if t % 20 == 0 {
            mcs = (mcs + rng.next(5) as i64 - 2).clamp(8, 24);
        }
        if t % 50 == 0 {
            other_rbs = rng.next(51) as i64;
            other_users = 1 + rng.next(4) as u8;
        }
        columns.mcs.push(mcs as u8);
        columns.other_rbs.push(other_rbs as u8);
        users.push(other_users);
    }
    columns.other_users = Some(users);
    columns
}

/// Packet loss rate of a saturated UE with 1500-byte packets over `columns` for
/// `duration_ms`, and the mean TB payload, bytes.
fn loss_rate(columns: TraceColumns, duration_ms: u64, seed: u64) -> (f64, f64) {
    let ues = vec![UeSetup::new(UeConfig::default(), conditions(columns))];
    let mut cell: Cell<Handle> = Cell::new(CellConfig::default(), ues, seed).unwrap();
    let mut saturator = Saturator::new(1, 1500, 300_000);
    let (mut delivered, mut lost, mut tb_bytes, mut tbs) = (0u64, 0u64, 0u64, 0u64);
    run(&mut cell, &mut saturator, 0, duration_ms, |out| {
        let ue = &out.truth.ues[0];
        delivered += u64::from(ue.delivered_packets);
        lost += u64::from(ue.rlc_loss_drops);
        if ue.tbs_bits > 0 && !ue.harq_retx {
            tb_bytes += u64::from(ue.tbs_bits / 8);
            tbs += 1;
        }
    });
    (lost as f64 / (delivered + lost) as f64, tb_bytes as f64 / tbs as f64)
}

#[test]
fn busy_cell_loses_about_the_seeds_median() {
    let mut rates = Vec::new();
    for seed in 1..=4 {
        let (rate, mean_tb_bytes) = loss_rate(busy_trace(120_000, seed), 120_000, seed);
        println!("seed {seed}: RLC loss per packet {rate:.2e}, mean TB {mean_tb_bytes:.0} bytes");
        rates.push(rate);
    }
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    println!("mean RLC loss per packet {mean:.2e}");
    assert!((4e-4..9e-4).contains(&mean), "mean loss {mean:.2e} is far from 6e-4");
}

#[test]
fn poor_channel_stays_below_the_worst_case() {
    // MCS 2 on a cell whose other users leave 10 RBs: blocks of about 40 bytes.
    let (rate, mean_tb_bytes) = loss_rate(constant_columns(1000, 2, 40), 60_000, 9);
    println!("poor channel: RLC loss per packet {rate:.2e}, mean TB {mean_tb_bytes:.0} bytes");
    assert!(rate < 1e-2, "loss {rate:.2e}");
}

//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test file uses a different subset

use cell::{Cell, CellConfig, ConditionTrace, Enqueued, SubframeOutput, TraceColumns, TraceConditions, UeId};
use std::sync::Arc;

/// A trace of `rows` subframes with a constant MCS and other-user demand on a 50-RB,
/// 2-port cell.
pub fn constant_columns(rows: usize, mcs: u8, other_rbs: u8) -> TraceColumns {
    TraceColumns {
        n_rb: 50,
        n_antennas: 2,
        start_sfn: 0,
        mcs: vec![mcs; rows],
        other_rbs: vec![other_rbs; rows],
        ..TraceColumns::default()
    }
}

/// Looping conditions over `columns`.
pub fn conditions(columns: TraceColumns) -> TraceConditions {
    TraceConditions::new(Arc::new(ConditionTrace::new(columns).expect("valid test trace")))
}

/// A configuration without random failures or RSRQ noise.
pub fn lossless(config: CellConfig) -> CellConfig {
    let mut config = config;
    config.harq.bler = 0.0;
    config.harq.retx_bler = 0.0;
    config.rsrq.noise_db = 0.0;
    config
}

/// Packet handles: (UE, sequence number).
pub type Handle = (u16, u64);

/// Keeps every UE's buffer at least `target_bytes` full with packets of `packet_bytes`,
/// numbering them per UE.
pub struct Saturator {
    pub next_seq: Vec<u64>,
    pub packet_bytes: u32,
    pub target_bytes: u64,
}

impl Saturator {
    pub fn new(ues: usize, packet_bytes: u32, target_bytes: u64) -> Saturator {
        Saturator { next_seq: vec![0; ues], packet_bytes, target_bytes }
    }

    pub fn top_up(&mut self, cell: &mut Cell<Handle>) {
        for ue in 0..self.next_seq.len() {
            let id = UeId(ue as u16);
            while cell.waiting_bytes(id).expect("known UE") < self.target_bytes {
                let seq = self.next_seq[ue];
                self.next_seq[ue] += 1;
                assert_eq!(cell.enqueue(id, self.packet_bytes, (ue as u16, seq)), Enqueued::Queued);
            }
        }
    }
}

/// Runs `cell` for subframes `from..to`, topping up with `saturator` before each one, and
/// calls `each` with every subframe's output.
pub fn run(
    cell: &mut Cell<Handle>,
    saturator: &mut Saturator,
    from: u64,
    to: u64,
    mut each: impl FnMut(&SubframeOutput<Handle>),
) {
    let mut out = SubframeOutput::new();
    for t in from..to {
        saturator.top_up(cell);
        cell.run_subframe(t, &mut out);
        each(&out);
    }
}

/// Jain's fairness index of `xs`.
pub fn jain(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    sum * sum / (xs.len() as f64 * squares)
}

//! Times `Cell::run_subframe` for 1 and 45 saturated UEs on a busy cell and prints the
//! mean, median, 99th percentile and worst µs per subframe (the worst includes whatever
//! preemption the machine inflicts). Not a test: run it with
//! `cargo run --release -p cell --example cell_speed`.

use cell::{
    Cell, CellConfig, ConditionTrace, Enqueued, SubframeOutput, TraceColumns, TraceConditions, UeConfig, UeId, UeSetup,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Subframes timed per case.
const SUBFRAMES: u64 = 20_000;
/// Subframes run before timing, so that queues and output vectors have grown.
const WARM_UP: u64 = 1_000;
/// Bytes kept waiting in each UE's buffer (more than the whole cell carries in a subframe).
const BACKLOG_BYTES: u64 = 40_000;

/// A 10 s busy 10 MHz trace: MCS 8..=24 and the other users' demand 0..=50 RBs, changing
/// every few subframes.
fn busy_trace() -> Arc<ConditionTrace> {
    let rows = 10_000;
    let mut x = 1u64;
    let mut next = |below: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % below
    };
    let mut columns = TraceColumns { n_rb: 50, n_antennas: 2, ..TraceColumns::default() };
    let (mut mcs, mut other_rbs) = (16u64, 25u64);
    for t in 0..rows {
        if t % 10 == 0 {
            mcs = 8 + next(17);
            other_rbs = next(51);
        }
        columns.mcs.push(mcs as u8);
        columns.other_rbs.push(other_rbs as u8);
    }
    Arc::new(ConditionTrace::new(columns).expect("valid trace"))
}

/// Times of `run_subframe` with `n` saturated UEs, sorted.
fn time(n: usize, trace: &Arc<ConditionTrace>) -> Vec<Duration> {
    let ues = (0..n)
        .map(|i| UeSetup::new(UeConfig::default(), TraceConditions::new(trace.clone()).starting_at(i as u64 * 997)))
        .collect();
    let mut cell: Cell<u64> = Cell::new(CellConfig::default(), ues, 7).expect("valid cell");
    let mut out = SubframeOutput::new();
    let mut handle = 0u64;
    let mut times = Vec::with_capacity(SUBFRAMES as usize);
    for t in 0..WARM_UP + SUBFRAMES {
        // Topping up is the data plane's work: keep it out of the timing.
        for ue in 0..n {
            let id = UeId(ue as u16);
            while cell.waiting_bytes(id).unwrap_or(u64::MAX) < BACKLOG_BYTES {
                handle += 1;
                if let Enqueued::Dropped(..) | Enqueued::Rejected(..) = cell.enqueue(id, 1500, handle) {
                    break;
                }
            }
        }
        let start = Instant::now();
        cell.run_subframe(t, &mut out);
        let took = start.elapsed();
        if t >= WARM_UP {
            times.push(took);
        }
    }
    times.sort_unstable();
    times
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let trace = busy_trace();
    for n in [1, 45] {
        let times = time(n, &trace);
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
        println!(
            "{n:>2} saturated UEs: {:.2} µs/subframe mean, {:.2} median, {:.2} p99, {:.1} worst",
            micros(mean),
            micros(at(0.5)),
            micros(at(0.99)),
            micros(at(1.0))
        );
    }
}

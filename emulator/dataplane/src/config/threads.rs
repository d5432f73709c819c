//! The emulator's threads: the CPUs each may run on and the real-time priority of the cell
//! and writer threads.

use serde::{Deserialize, Serialize};

/// CPU numbers an affinity list may hold (glibc's `CPU_SETSIZE`).
pub const MAX_CPUS: usize = 1024;

/// CPUs each of the emulator's threads may run on (an empty list: any).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct Affinity {
    /// The writer on the cell thread's CPU unless `tx` names its own; when neither is named,
    /// both on the last CPU the emulator may use. Their wake-ups come at the same instants
    /// (deliveries fall on subframe boundaries plus whole-ms delays), and on one CPU they
    /// share a timer interrupt and a wake-up: 0.6 % of a core less at 100 Mbit/s
    /// (emulator/PERFORMANCE.md).
    pub writer_with_cell: bool,
    /// The cell thread (`cb-cell`): the subframe clock.
    pub cell: Vec<usize>,
    /// The writer thread (`cb-tx`): every TUN write.
    pub tx: Vec<usize>,
    /// The reader thread (`cb-io`): every TUN read.
    pub io: Vec<usize>,
    /// The diag feed thread (`cb-diag`).
    pub diag: Vec<usize>,
    /// The ground-truth and packet-log thread (`cb-record`).
    pub record: Vec<usize>,
}

/// Real-time priority of the cell and writer threads when the config does not say.
pub const DEFAULT_REALTIME_PRIORITY: u32 = 10;

impl Default for Affinity {
    fn default() -> Affinity {
        Affinity {
            writer_with_cell: true,
            cell: Vec::new(),
            tx: Vec::new(),
            io: Vec::new(),
            diag: Vec::new(),
            record: Vec::new(),
        }
    }
}

impl Affinity {
    /// The CPUs of the cell thread and of the writer, given the CPUs the emulator may use
    /// (`allowed`, ascending): as configured, but see [`Affinity::writer_with_cell`].
    pub fn clock_cpus(&self, allowed: &[usize]) -> (Vec<usize>, Vec<usize>) {
        if !self.writer_with_cell || !self.tx.is_empty() {
            return (self.cell.clone(), self.tx.clone());
        }
        let cell =
            if self.cell.is_empty() { allowed.last().map(|&c| vec![c]).unwrap_or_default() } else { self.cell.clone() };
        (cell.clone(), cell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_goes_with_the_cell_unless_placed() {
        let allowed = [0, 1, 2];
        let none = Affinity::default();
        assert_eq!(none.clock_cpus(&allowed), (vec![2], vec![2]));
        let cell = Affinity { cell: vec![1], ..Affinity::default() };
        assert_eq!(cell.clock_cpus(&allowed), (vec![1], vec![1]));
        let both = Affinity { cell: vec![1], tx: vec![0], ..Affinity::default() };
        assert_eq!(both.clock_cpus(&allowed), (vec![1], vec![0]));
        let apart = Affinity { writer_with_cell: false, ..Affinity::default() };
        assert_eq!(apart.clock_cpus(&allowed), (vec![], vec![]));
        assert_eq!(none.clock_cpus(&[]), (vec![], vec![]));
        let parsed: Affinity = serde_json::from_str("{}").expect("an empty affinity parses");
        assert!(parsed.writer_with_cell);
    }
}

//! The emulator's threads: the CPUs each may run on and the real-time priority of the cell
//! and writer threads.

use serde::{Deserialize, Serialize};

/// CPU numbers an affinity list may hold (glibc's `CPU_SETSIZE`).
pub const MAX_CPUS: usize = 1024;

/// CPUs each of the emulator's threads may run on (an empty list: any).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct Affinity {
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

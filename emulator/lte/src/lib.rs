//! LTE physical-layer tables and formulas for the clawbed emulator and tools.
//!
//! The 36.213 tables are not typed in here: `build.rs` generates them from the CSV files in
//! `emulator/lte/tables/`, the one source of truth the Python side reads too.
//!
//! - [`mcs`]: MCS index → modulation order and TBS index (36.213 Table 7.1.7.1-1).
//! - [`tbs`]: transport block size for a TBS index and a number of PRBs, one or two layers
//!   (36.213 §7.1.7.2.1 and §7.1.7.2.2).
//! - [`bandwidth`]: channel bandwidth ↔ number of resource blocks.
//! - [`rsrq`]: the CLAW paper's RSRQ ↔ cell-load model.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bandwidth;
pub mod mcs;
pub mod rsrq;
pub mod tbs;

/// Generated tables (see `build.rs`).
mod tables {
    include!(concat!(env!("OUT_DIR"), "/tables.rs"));
}

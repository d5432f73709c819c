//! The clawbed emulator's data plane: everything with I/O around the pure `cell` model
//! (`../ARCHITECTURE.md`, usage and configuration in `../README.md`).
//!
//! - OS resources: [`netns`] (entering the caller's namespaces), [`tun`] (TUN devices and
//!   their addresses and routes), [`signals`].
//! - Time: [`clock`] (the shared time base, deadlines, thread scheduling, lateness
//!   histograms), [`doorbell`] (sleeping to a deadline or a wake-up).
//! - Packets: [`pool`] (recycled buffers), [`reader`] (the I/O thread), [`offload`] (TUN
//!   super-packets split into segments, merged again on the way out), [`delay`] (delay
//!   lines, the core delay), [`uplink`] (SR, grant, uplink capacity), [`engine`] (the cell
//!   thread: the subframe loop), [`tx`] (the writer thread: every TUN write, on time).
//! - Outputs: [`diag`] (the diag feed, `../DIAG_FEED.md`), [`columnar`] and [`records`]
//!   (ground truth and packet log, `../TRUTH_FORMAT.md`).
//! - Setup: [`config`] (file + flags, validated), [`model`] (traces → the cell), [`error`].

pub mod clock;
pub mod columnar;
pub mod config;
pub mod delay;
pub mod diag;
pub mod doorbell;
pub mod engine;
pub mod error;
pub mod model;
pub mod netns;
pub mod offload;
pub mod pool;
pub mod reader;
pub mod records;
pub mod signals;
pub mod tun;
pub mod tx;
pub mod uplink;

//! The clawbed emulator's data plane: everything with I/O around the pure `cell` model
//! (`../ARCHITECTURE.md`, usage and configuration in `../README.md`).
//!
//! - OS resources: [`netns`] (entering the caller's namespaces), [`tun`] (TUN devices and
//!   their addresses and routes), [`signals`].
//! - Time: [`clock`] (the shared time base, deadlines, thread scheduling, lateness
//!   histograms), [`doorbell`] (sleeping to a deadline or a wake-up), [`handover`] (the
//!   queues a real-time thread takes from without ever waiting for their producer).
//! - Packets: [`pool`] (recycled buffers), [`reader`] (the I/O thread), [`offload`] (TUN
//!   super-packets split into segments, merged again on the way out), [`engine`] (the cell
//!   thread: the subframe loop, driving the cell crate's model, delay lines and uplink
//!   MAC), [`tx`] (the writer thread: every TUN write, on time).
//! - Outputs: [`diag`] (the diag feed, `../DIAG_FEED.md`), [`columnar`] and [`records`]
//!   (ground truth and packet log, `../TRUTH_FORMAT.md`).
//! - Setup: [`config`] (file + flags, validated), [`model`] (traces → the cell), [`error`].
//!
//! `unsafe` is allowed only in [`clock`], [`doorbell`], [`netns`], [`sys`] (epoll, eventfd)
//! and [`tun`]; every block carries a `SAFETY:` comment.

// `unsafe` is refused everywhere but in the modules that call the OS directly (each block
// with its `SAFETY:` comment, which clippy checks): clocks and thread scheduling, the
// futex doorbell, setns, the TUN devices (open, ioctls, read/write), and epoll/eventfd.
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

/// Writes a line to stderr like `eprintln!`, but never panics: with stderr on a full disk or
/// a closed pipe the message is lost, not the run.
#[macro_export]
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

#[allow(unsafe_code)]
pub mod clock;
pub mod columnar;
pub mod config;
pub mod diag;
#[allow(unsafe_code)]
pub mod doorbell;
pub mod engine;
pub mod error;
pub mod flows;
pub mod handover;
pub mod model;
#[allow(unsafe_code)]
pub mod netns;
pub mod offload;
pub mod pool;
pub mod reader;
pub mod records;
pub mod signals;
#[allow(unsafe_code)]
pub mod sys;
#[allow(unsafe_code)]
pub mod tun;
pub mod tx;

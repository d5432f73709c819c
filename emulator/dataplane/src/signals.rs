//! Signals: SIGINT/SIGTERM stop the emulator cleanly, SIGUSR1 pauses it, SIGUSR2 resumes,
//! SIGHUP seeks the traces to the time in the output directory's `seek` file, and the first
//! real-time signal (SIGRTMIN, 34 on Linux with glibc) makes the recorder write what it holds
//! at once instead of at the next full chunk (a replay asks for it at each load's end, so
//! the load's ground truth is on disk within tens of ms instead of up to a second later).
//!
//! Handlers only set flags (async-signal-safe); the cell thread looks at them every loop.
//! A repeated SIGINT/SIGTERM changes nothing: `timeout`, a terminal's Ctrl-C or a
//! process-group kill often deliver the signal twice, and the clean stop (a few ms) must
//! still write the counters. A stop that hangs is for SIGKILL; the kernel then still
//! removes the TUN devices, since they vanish with their last descriptor.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

use crate::error::{Context, Result};

/// The flags the signal handlers set.
#[derive(Debug, Clone)]
pub struct Signals {
    stop: Arc<AtomicBool>,
    pause: Arc<AtomicBool>,
    resume: Arc<AtomicBool>,
    seek: Arc<AtomicBool>,
    flush: Arc<AtomicBool>,
}

impl Signals {
    /// Installs the handlers.
    pub fn install() -> Result<Signals> {
        let signals = Signals::unregistered();
        for sig in [SIGINT, SIGTERM] {
            signal_hook::flag::register(sig, Arc::clone(&signals.stop))
                .context(|| format!("installing the handler of signal {sig}"))?;
        }
        signal_hook::flag::register(SIGUSR1, Arc::clone(&signals.pause))
            .context(|| "installing the SIGUSR1 handler".into())?;
        signal_hook::flag::register(SIGUSR2, Arc::clone(&signals.resume))
            .context(|| "installing the SIGUSR2 handler".into())?;
        signal_hook::flag::register(SIGHUP, Arc::clone(&signals.seek))
            .context(|| "installing the SIGHUP handler".into())?;
        signal_hook::flag::register(libc::SIGRTMIN(), Arc::clone(&signals.flush))
            .context(|| "installing the SIGRTMIN (flush the records) handler".into())?;
        Ok(signals)
    }

    /// Flags no signal sets (for tests, and the base of [`Signals::install`]).
    pub fn unregistered() -> Signals {
        Signals {
            stop: Arc::default(),
            pause: Arc::default(),
            resume: Arc::default(),
            seek: Arc::default(),
            flush: Arc::default(),
        }
    }

    /// Whether a stop was asked for.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Whether a pause was asked for since the last call.
    pub fn take_pause(&self) -> bool {
        self.pause.swap(false, Ordering::Relaxed)
    }

    /// Whether a resume was asked for since the last call.
    pub fn take_resume(&self) -> bool {
        self.resume.swap(false, Ordering::Relaxed)
    }

    /// The flag SIGRTMIN sets: the recorder takes it ([`crate::records::record`]).
    pub fn flush_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.flush)
    }

    /// Whether a seek was asked for since the last call.
    pub fn take_seek(&self) -> bool {
        self.seek.swap(false, Ordering::Relaxed)
    }
}

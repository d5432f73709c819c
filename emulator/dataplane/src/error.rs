//! Errors of the data plane, each saying what was attempted.
//!
//! An operating-system failure carries the action in words ("creating TUN cbdpue0 in
//! namespace cbdpue") and the `io::Error`, so the message alone tells a person where to look.
//! Errors split into the caller's mistakes (a bad config or trace: exit code 2) and failures
//! of the machine while running (exit code 1).

use std::io;

/// Why the emulator could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration (file or flags) is invalid; `field` names the key or flag.
    #[error("config: {field}: {message}")]
    Config {
        /// The config key (`ues[1].address`) or flag (`--rate`) concerned.
        field: String,
        /// What is wrong.
        message: String,
    },

    /// A trace (or delay trace) could not be read or is invalid.
    #[error("trace: {0}")]
    Trace(String),

    /// A system call or an OS resource failed.
    #[error("{attempted}: {source}")]
    Os {
        /// What was being done, e.g. `creating TUN cbdpue0 in namespace cbdpue`.
        attempted: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// A config error naming `field`.
    pub fn config(field: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Config { field: field.into(), message: message.into() }
    }

    /// The process exit code for this error: 2 for a bad config or trace (the caller's
    /// mistake, nothing was started), 1 for a failure of the machine.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config { .. } | Error::Trace(_) => 2,
            Error::Os { .. } => 1,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Attaches "what was attempted" to an `io::Result`.
pub trait Context<T> {
    /// Turns the error into [`Error::Os`] with `attempted` computed only on failure.
    fn context(self, attempted: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for io::Result<T> {
    fn context(self, attempted: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Os { attempted: attempted(), source })
    }
}

/// `Err(io::Error::last_os_error())` when a libc call returned -1, else its value.
pub(crate) fn check_os(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Whether `e` means "nothing now, try again later" (`WouldBlock`, `Interrupted`).
pub(crate) fn is_transient(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted)
}

//! Network namespaces made by the caller, and running code inside one.
//!
//! The emulator never creates or deletes namespaces: the control plane does. It opens the
//! namespace file (`/var/run/netns/NAME` for a named namespace, or any path such as
//! `/proc/PID/ns/net`) once at start, and whatever must be created *in* the namespace (a TUN
//! device, a listening socket, interface configuration) is done by a short-lived thread that
//! `setns`es into it and then ends. A thread that ends cannot leak its namespace into the
//! rest of the process, which is why no thread ever switches back: file descriptors created
//! there stay bound to that namespace and are usable from any thread.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use crate::error::{check_os, Context, Error, Result};

/// Directory where `ip netns add NAME` puts named namespaces.
const NAMED_NETNS_DIR: &str = "/var/run/netns";

/// An open handle on a network namespace.
#[derive(Debug)]
pub struct Namespace {
    /// How the config named it (`cbdpue` or `/proc/1234/ns/net`), for messages.
    name: String,
    /// The namespace file, kept open so the namespace cannot vanish under us.
    file: File,
}

impl Namespace {
    /// Opens the namespace `spec`: a path if it contains `/`, else the name of a namespace
    /// made by `ip netns add`. A namespace that does not exist is a config error naming
    /// `field` (the caller must make it first); any other failure is an OS error.
    pub fn open(spec: &str, field: &str) -> Result<Namespace> {
        let path = if spec.contains('/') { PathBuf::from(spec) } else { PathBuf::from(NAMED_NETNS_DIR).join(spec) };
        match File::open(&path) {
            Ok(file) => Ok(Namespace { name: spec.to_string(), file }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::config(
                field,
                format!("network namespace {spec} does not exist ({} not found); create it first", path.display()),
            )),
            Err(e) => Err(e).context(|| format!("opening network namespace {spec} ({})", path.display())),
        }
    }

    /// The name or path the namespace was opened by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on a new thread that has entered this namespace, and returns its result.
    /// The thread ends when `f` returns, so the caller's namespace is never touched.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        let fd = self.file.as_raw_fd();
        let name = &self.name;
        std::thread::scope(|scope| {
            let worker = scope.spawn(move || {
                // SAFETY: `fd` is an open namespace file owned by `self`, alive for the scope.
                check_os(unsafe { libc::setns(fd, libc::CLONE_NEWNET) })
                    .context(|| format!("entering network namespace {name}"))?;
                f()
            });
            match worker.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

//! A pseudo-terminal for the mi2log feed: a serial diag port's stand-in (`mi2log.rs`).
//!
//! The master side stays in the emulator; a reader opens the slave (its path is in the
//! `ready` line). Whether a reader has it open shows as the master's hang-up flag.

// The pty needs a few system calls the crate has no wrapper for (posix_openpt, ptsname_r,
// termios, poll, read/write on raw descriptors); each block carries its `SAFETY:` comment.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

/// A pseudo-terminal serving the stream (the master side; readers open the slave).
pub(super) struct Pty {
    master: OwnedFd,
    pub(super) path: PathBuf,
    pub(super) pending: Vec<u8>,
    pub(super) sent: usize,
    /// Whether a reader had the slave open at the last look.
    reader: bool,
}

impl Pty {
    /// A new pty in raw mode, master non-blocking.
    pub(super) fn open() -> io::Result<Pty> {
        // SAFETY: plain syscalls on a descriptor we own; buffers live for each call.
        unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let master = OwnedFd::from_raw_fd(fd);
            if libc::grantpt(fd) != 0 || libc::unlockpt(fd) != 0 {
                return Err(io::Error::last_os_error());
            }
            let mut name = [0 as libc::c_char; 128];
            if libc::ptsname_r(fd, name.as_mut_ptr(), name.len()) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Raw mode (set through the master, it applies to the slave): bytes pass as
            // written, no echo, no line editing, no CR/LF mapping.
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd, &mut t) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::cfmakeraw(&mut t);
            if libc::tcsetattr(fd, libc::TCSANOW, &t) != 0 {
                return Err(io::Error::last_os_error());
            }
            let path = std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
            Ok(Pty { master, path: PathBuf::from(path), pending: Vec::new(), sent: 0, reader: false })
        }
    }

    /// Whether a reader has the slave open now (the master sees no hang-up). When the last
    /// reader has gone, what it left unread is drained, so the next one starts afresh.
    pub(super) fn check_reader(&mut self) -> bool {
        let mut pfd = libc::pollfd { fd: self.master.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
        // SAFETY: one live pollfd, no wait.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        let open = n >= 0 && pfd.revents & libc::POLLHUP == 0;
        if self.reader && !open {
            self.pending.clear();
            self.sent = 0;
            self.drain_slave();
        }
        self.reader = open;
        open
    }

    fn drain_slave(&self) {
        let Ok(path) = std::ffi::CString::new(self.path.as_os_str().as_encoded_bytes()) else { return };
        // SAFETY: opens, reads into a live buffer, closes; all non-blocking.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC);
            if fd < 0 {
                return;
            }
            let mut buf = [0u8; 4096];
            while libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) > 0 {}
            libc::close(fd);
        }
    }

    /// Writes what the pty takes now.
    pub(super) fn pump(&mut self) {
        while self.sent < self.pending.len() {
            let rest = &self.pending[self.sent..];
            // SAFETY: writes from a live buffer.
            let n = unsafe { libc::write(self.master.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
            if n <= 0 {
                break;
            }
            self.sent += n as usize;
        }
        if self.sent == self.pending.len() {
            self.pending.clear();
            self.sent = 0;
        }
    }
}

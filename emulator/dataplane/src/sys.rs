//! The event syscalls the I/O and diag threads wait on (epoll, eventfd), wrapped so that
//! their callers hold no `unsafe`: every descriptor comes back owned, every buffer is a
//! slice.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::check_os;

/// A new epoll instance (close-on-exec).
pub fn epoll_create() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with flags only; the result is checked before use.
    let raw = check_os(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Adds `fd` to `epoll` for input; its events carry `token`.
pub fn epoll_watch(epoll: &OwnedFd, fd: RawFd, token: u64) -> io::Result<()> {
    let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
    // SAFETY: both descriptors are open (the caller's `fd` is borrowed for the call);
    // `event` lives for the call and the kernel copies it.
    check_os(unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) }).map(drop)
}

/// An empty event buffer for [`epoll_wait`].
pub fn epoll_events(n: usize) -> Vec<libc::epoll_event> {
    vec![libc::epoll_event { events: 0, u64: 0 }; n.max(1)]
}

/// Waits up to `timeout_ms` for events on `epoll`, filling `events`; returns the tokens'
/// count (0 on a timeout, a signal or an error: the caller looks again).
pub fn epoll_wait(epoll: &OwnedFd, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
    let room = i32::try_from(events.len()).unwrap_or(i32::MAX);
    // SAFETY: the kernel writes at most `room` ≤ `events.len()` entries into the buffer.
    let n = unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), room, timeout_ms) };
    usize::try_from(n).unwrap_or(0)
}

/// A new non-blocking, close-on-exec eventfd (a wake-up counter).
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with flags only; the result is checked before use.
    let raw = check_os(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Adds one to the eventfd's counter, waking its waiter. A full counter (never, in
/// practice) only means the waiter is already due to wake.
pub fn eventfd_ring(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer.
    unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
}

/// Resets the eventfd's counter after a wake-up (non-blocking: nothing to reset is fine).
pub fn eventfd_clear(fd: &OwnedFd) {
    let mut buf = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live buffer; the descriptor is non-blocking.
    unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
}

//! A doorbell: one thread sleeps until a deadline or until another thread rings.
//!
//! The TUN writer sleeps until the next packet is due, but a packet handed over meanwhile
//! may be due sooner, so the cell thread must be able to wake it. A futex on a ring counter
//! does both in one system call: `FUTEX_WAIT_BITSET` with an absolute `CLOCK_MONOTONIC`
//! deadline, and a ring costs one atomic increment, plus a `FUTEX_WAKE` only while the
//! sleeper actually sleeps. A ring that comes between the sleeper's look at its queue and
//! its sleep is not lost: the sleeper takes a [`Doorbell::ticket`] before looking, and the
//! wait returns at once if the bell rang since.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::clock::{timespec, Nanos};

/// A wake-up counter with one sleeper.
#[derive(Debug, Default)]
pub struct Doorbell {
    rings: AtomicU32,
    sleeping: AtomicBool,
}

impl Doorbell {
    /// A doorbell nobody waits on yet.
    pub fn new() -> Doorbell {
        Doorbell::default()
    }

    /// Wakes the sleeper, or makes its next [`Doorbell::wait`] return at once.
    pub fn ring(&self) {
        self.rings.fetch_add(1, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            // SAFETY: FUTEX_WAKE on a live `u32`; the kernel reads nothing else.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.rings.as_ptr(),
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    1,
                    std::ptr::null::<libc::timespec>(),
                    std::ptr::null::<u32>(),
                    0,
                )
            };
        }
    }

    /// The rings so far: take it before looking for work, then [`Doorbell::wait`] with it.
    pub fn ticket(&self) -> u32 {
        self.rings.load(Ordering::SeqCst)
    }

    /// Sleeps until the bell rings after `ticket` was taken, or until `deadline_mono_ns`
    /// (absolute, `CLOCK_MONOTONIC`) if given; a signal may end the wait early too (the
    /// caller looks at its queue and its clock again anyway).
    pub fn wait(&self, ticket: u32, deadline_mono_ns: Option<Nanos>) {
        self.sleeping.store(true, Ordering::SeqCst);
        // With both sides SeqCst, a ring that saw `sleeping` false came before the store
        // above, so its increment is visible here (and to the kernel's compare below).
        if self.rings.load(Ordering::SeqCst) == ticket {
            let deadline = deadline_mono_ns.map(timespec);
            let timeout = deadline.as_ref().map_or(std::ptr::null(), |ts| ts as *const libc::timespec);
            // SAFETY: FUTEX_WAIT_BITSET on a live `u32`, with an absolute monotonic timeout
            // that lives for the call (or none). It returns at once if the value changed.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.rings.as_ptr(),
                    libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
                    ticket,
                    timeout,
                    std::ptr::null::<u32>(),
                    libc::FUTEX_BITSET_MATCH_ANY,
                )
            };
        }
        self.sleeping.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{monotonic_now_ns, NANOS_PER_MS};
    use std::sync::Arc;

    #[test]
    fn a_ring_before_the_wait_is_not_lost() {
        let bell = Doorbell::new();
        let ticket = bell.ticket();
        bell.ring();
        let start = monotonic_now_ns();
        bell.wait(ticket, Some(start + 1000 * NANOS_PER_MS));
        assert!(monotonic_now_ns() - start < 500 * NANOS_PER_MS);
    }

    #[test]
    fn the_deadline_ends_the_wait_and_a_ring_wakes_it() {
        let bell = Arc::new(Doorbell::new());
        let start = monotonic_now_ns();
        bell.wait(bell.ticket(), Some(start + 5 * NANOS_PER_MS));
        assert!(monotonic_now_ns() - start >= 5 * NANOS_PER_MS);

        let ringer = Arc::clone(&bell);
        let ticket = bell.ticket();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            ringer.ring();
        });
        let start = monotonic_now_ns();
        bell.wait(ticket, None);
        assert!(monotonic_now_ns() - start >= 15 * NANOS_PER_MS, "woken by the ring, not before");
        t.join().expect("ringer");
    }
}

//! Time: the monotonic clock, the real-time subframe clock and its lateness measurement.
//!
//! Every time inside the emulator is a [`Nanos`]: nanoseconds on `CLOCK_MONOTONIC` since the
//! emulator's time zero (the start of subframe 0), less any time spent paused. Deadlines are
//! absolute, so a late wake-up does not push later subframes back: lateness does not
//! accumulate.

use crate::error::{check_os, Context, Result};

/// Nanoseconds, on the monotonic clock or relative to the emulator's time zero.
pub type Nanos = i64;

/// Nanoseconds per millisecond (one LTE subframe).
pub const NANOS_PER_MS: Nanos = 1_000_000;

/// Nanoseconds per microsecond.
pub const NANOS_PER_US: Nanos = 1_000;

/// How long before a deadline the sleeper stops sleeping and spins, ns. The kernel's timer
/// wake-up is usually tens of microseconds late; spinning the rest keeps the error small.
pub const SPIN_BEFORE_DEADLINE_NS: Nanos = 50 * NANOS_PER_US;

/// Reads `CLOCK_MONOTONIC`, ns.
pub fn monotonic_now_ns() -> Nanos {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Reads `CLOCK_REALTIME`, ns since the Unix epoch.
pub fn realtime_now_ns() -> Nanos {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> Nanos {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; both clocks always exist on Linux, so the call
    // cannot fail.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Sleeps until `deadline_ns` on `CLOCK_MONOTONIC` (absolute): `clock_nanosleep` until
/// [`SPIN_BEFORE_DEADLINE_NS`] before it, then spins. Returns the time read on waking, ns.
pub fn sleep_until(deadline_ns: Nanos) -> Nanos {
    let sleep_to = deadline_ns - SPIN_BEFORE_DEADLINE_NS;
    let mut now = monotonic_now_ns();
    if now < sleep_to {
        let ts = libc::timespec { tv_sec: sleep_to / 1_000_000_000, tv_nsec: sleep_to % 1_000_000_000 };
        // SAFETY: `ts` is valid; an interruption by a signal (EINTR) just shortens the sleep,
        // the spin below covers the rest.
        unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        now = monotonic_now_ns();
    }
    while now < deadline_ns {
        std::hint::spin_loop();
        now = monotonic_now_ns();
    }
    now
}

/// The emulator's time base: maps the monotonic clock to emulated time and back, and stops
/// while paused.
#[derive(Debug, Clone, Copy)]
pub struct TimeBase {
    /// Monotonic time of the emulator's time zero plus all time spent paused, ns.
    origin_ns: Nanos,
    /// Unix time of the emulator's time zero, ns (for the diag feed's timestamps).
    origin_unix_ns: Nanos,
}

impl TimeBase {
    /// A time base whose zero is `delay_ns` from now.
    pub fn starting_in(delay_ns: Nanos) -> TimeBase {
        let mono = monotonic_now_ns();
        let unix = realtime_now_ns();
        TimeBase { origin_ns: mono + delay_ns, origin_unix_ns: unix + delay_ns }
    }

    /// Emulated time of the monotonic instant `mono_ns`.
    pub fn emulated(&self, mono_ns: Nanos) -> Nanos {
        mono_ns - self.origin_ns
    }

    /// Monotonic instant of emulated time `t_ns`.
    pub fn monotonic(&self, t_ns: Nanos) -> Nanos {
        t_ns + self.origin_ns
    }

    /// Emulated time now.
    pub fn now(&self) -> Nanos {
        self.emulated(monotonic_now_ns())
    }

    /// Unix time of the emulator's time zero plus the time spent paused so far, ns:
    /// emulated time `t` (from now on) is Unix time `origin_unix_ns() + t`.
    pub fn origin_unix_ns(&self) -> Nanos {
        self.origin_unix_ns
    }

    /// Shifts the time base forward by `paused_ns` (time spent paused), so emulated time
    /// continues where it stopped.
    pub fn pause_for(&mut self, paused_ns: Nanos) {
        self.origin_ns += paused_ns;
        self.origin_unix_ns += paused_ns;
    }
}

/// Sets the calling thread's timer slack to 1 ns. The default (50 µs) lets the kernel wake
/// a sleeper up to 50 µs late, which would use up the whole spin margin.
pub fn minimise_timer_slack() -> Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory.
    check_os(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) })
        .map(drop)
        .context(|| "setting the timer slack of the cell thread to 1 ns".into())
}

/// Asks for `SCHED_FIFO` at `priority` (1..=99) for the calling thread.
pub fn set_realtime_priority(priority: i32) -> Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: `param` is valid for the call; 0 means the calling thread.
    check_os(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) })
        .map(drop)
        .context(|| format!("setting SCHED_FIFO priority {priority} for the cell thread"))
}

/// A histogram of non-negative durations in microseconds, 1 µs buckets up to
/// [`Histogram::MAX_US`] and one overflow bucket; fixed size, so recording never allocates.
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Box<[u64]>,
    count: u64,
    sum_ns: i128,
    max_ns: Nanos,
}

/// Summary statistics of a [`Histogram`], µs.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Summary {
    /// Number of samples.
    pub count: u64,
    /// Mean, µs.
    pub mean_us: f64,
    /// Median, µs (bucket resolution 1 µs).
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// Largest sample, µs.
    pub max_us: f64,
}

impl Histogram {
    /// Largest duration with its own bucket, µs; above goes to the overflow bucket.
    pub const MAX_US: usize = 20_000;

    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram { buckets: vec![0; Histogram::MAX_US + 2].into_boxed_slice(), count: 0, sum_ns: 0, max_ns: 0 }
    }

    /// Records one duration, ns; negative values (early) count as zero.
    pub fn record(&mut self, duration_ns: Nanos) {
        let d = duration_ns.max(0);
        let bucket = usize::try_from(d / NANOS_PER_US).unwrap_or(usize::MAX).min(Histogram::MAX_US + 1);
        self.buckets[bucket] += 1;
        self.count += 1;
        self.sum_ns += i128::from(d);
        self.max_ns = self.max_ns.max(d);
    }

    /// The value at quantile `q` (0..=1), µs: the upper edge of the bucket that holds it.
    fn quantile_us(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return if bucket > Histogram::MAX_US { self.max_ns as f64 / 1e3 } else { bucket as f64 + 1.0 };
            }
        }
        self.max_ns as f64 / 1e3
    }

    /// Count, mean, p50, p99, p99.9 and max, µs.
    pub fn summary(&self) -> Summary {
        Summary {
            count: self.count,
            mean_us: if self.count == 0 { 0.0 } else { self.sum_ns as f64 / self.count as f64 / 1e3 },
            p50_us: self.quantile_us(0.5),
            p99_us: self.quantile_us(0.99),
            p999_us: self.quantile_us(0.999),
            max_us: self.max_ns as f64 / 1e3,
        }
    }
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles() {
        let mut h = Histogram::new();
        for us in 0..100 {
            h.record(us * NANOS_PER_US + 500);
        }
        let s = h.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_us, 50.0);
        assert_eq!(s.p99_us, 99.0);
        assert!((s.max_us - 99.5).abs() < 1e-9);
        h.record(1_000 * NANOS_PER_MS);
        assert_eq!(h.summary().max_us, 1_000_000.0);
    }

    #[test]
    fn sleep_until_is_not_early() {
        let deadline = monotonic_now_ns() + 2 * NANOS_PER_MS;
        let woke = sleep_until(deadline);
        assert!(woke >= deadline);
    }

    #[test]
    fn time_base_pause_shifts_emulated_time() {
        let mut tb = TimeBase::starting_in(0);
        let mono = monotonic_now_ns();
        let before = tb.emulated(mono);
        tb.pause_for(5 * NANOS_PER_MS);
        assert_eq!(tb.emulated(mono), before - 5 * NANOS_PER_MS);
        assert_eq!(tb.monotonic(tb.emulated(mono)), mono);
    }
}

//! Time: the monotonic clock, the shared time base, sleeping to deadlines, the emulator's
//! threads' scheduling (real-time priority, CPUs), and lateness histograms.
//!
//! Every time inside the emulator is a [`Nanos`]: nanoseconds on `CLOCK_MONOTONIC` since the
//! emulator's time zero (the start of subframe 0), less any time spent paused. Deadlines are
//! absolute, so a late wake-up does not push later subframes back: lateness does not
//! accumulate.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use crate::error::check_os;

/// Nanoseconds (on the monotonic clock or relative to the emulator's time zero) and
/// nanoseconds per millisecond (one LTE subframe): the cell crate's, whose uplink and
/// delay models run in the same time.
pub use cell::delay::{Nanos, NANOS_PER_MS};

/// Nanoseconds per microsecond.
pub const NANOS_PER_US: Nanos = 1_000;

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

/// The `timespec` of `ns` nanoseconds.
pub(crate) fn timespec(ns: Nanos) -> libc::timespec {
    libc::timespec { tv_sec: ns.div_euclid(1_000_000_000), tv_nsec: ns.rem_euclid(1_000_000_000) }
}

/// Sleeps until `deadline_ns` on `CLOCK_MONOTONIC` (absolute) with `clock_nanosleep`, never
/// returning before it (an interruption by a signal spins the rest). Returns the time read
/// on waking, ns.
pub fn sleep_until(deadline_ns: Nanos) -> Nanos {
    let mut now = monotonic_now_ns();
    if now < deadline_ns {
        let ts = timespec(deadline_ns);
        // SAFETY: `ts` is valid; an interruption by a signal (EINTR) just shortens the sleep,
        // the loop below covers the rest.
        unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        now = monotonic_now_ns();
    }
    spin_until(deadline_ns, now)
}

/// Spins until `deadline_ns` (monotonic); `now` is a recent reading. Returns the time read
/// at the end, ns.
pub fn spin_until(deadline_ns: Nanos, mut now: Nanos) -> Nanos {
    while now < deadline_ns {
        std::hint::spin_loop();
        now = monotonic_now_ns();
    }
    now
}

/// How long before a deadline a precise sleeper wakes to spin the rest, learnt from how
/// late the kernel wakes it: a timer wake-up is tens of microseconds late on a virtual
/// machine and a few on an idle host, and every microsecond of margin is spent spinning,
/// once per deadline. The margin is the 90th percentile of the last [`SpinMargin::WINDOW`]
/// wake-ups' lateness: nine wake-ups in ten are on time, and the rare slow one (a virtual
/// CPU descheduled for milliseconds) does not make every later wake-up spin for it.
///
/// Spinning is also held to a budget, [`SpinMargin::BUDGET_PERMILLE`] of a core: the margin
/// is at most that share of the mean time between wake-ups. A sparse packet (a ping) is
/// written with the full margin; a flow that wakes the writer every millisecond gets a
/// 10 µs margin, its writes then late by the timer's own lateness beyond that (tens of µs
/// here), instead of the writer burning a few per cent of a core for it.
#[derive(Debug, Clone)]
pub struct SpinMargin {
    margin_ns: Nanos,
    recent: [Nanos; SpinMargin::WINDOW],
    seen: usize,
    /// Moving mean of the time between wake-ups, ns.
    mean_gap_ns: Nanos,
    /// The last wake-up, monotonic ns (None before the first).
    last_wake_ns: Option<Nanos>,
}

impl SpinMargin {
    /// Wake-ups the margin is learnt from.
    pub const WINDOW: usize = 128;
    /// Smallest margin, ns.
    pub const MIN_NS: Nanos = 2 * NANOS_PER_US;
    /// Largest margin, ns: beyond it, spinning would cost more than the lateness it hides.
    pub const MAX_NS: Nanos = 100 * NANOS_PER_US;
    /// Share of a core spent spinning at most, per thousand (of the time between wake-ups).
    pub const BUDGET_PERMILLE: Nanos = 10;
    /// The margin is recomputed every this many wake-ups.
    const EVERY: usize = 32;
    /// Weight of a new gap in the mean time between wake-ups: 1/16.
    const GAP_SHIFT: u32 = 4;
    /// Gaps longer than this count as this long (an idle hour must not take an hour of
    /// wake-ups to forget), ns.
    const MAX_GAP_NS: Nanos = 1_000 * NANOS_PER_MS;

    /// A margin starting at 20 µs, before any gap is known: no budget limit yet.
    pub fn new() -> SpinMargin {
        SpinMargin {
            margin_ns: 20 * NANOS_PER_US,
            recent: [0; SpinMargin::WINDOW],
            seen: 0,
            mean_gap_ns: SpinMargin::MAX_GAP_NS,
            last_wake_ns: None,
        }
    }

    /// The margin now, ns: the learnt one within the spinning budget, at least
    /// [`SpinMargin::MIN_NS`].
    pub fn ns(&self) -> Nanos {
        let budget_ns = self.mean_gap_ns * SpinMargin::BUDGET_PERMILLE / 1000;
        self.margin_ns.min(budget_ns).max(SpinMargin::MIN_NS)
    }

    /// Learns from a wake-up at `woke_ns` (monotonic), `late_ns` after the time asked for.
    pub fn learn(&mut self, late_ns: Nanos, woke_ns: Nanos) {
        if let Some(last) = self.last_wake_ns {
            let gap = (woke_ns - last).clamp(0, SpinMargin::MAX_GAP_NS);
            self.mean_gap_ns += (gap - self.mean_gap_ns) >> SpinMargin::GAP_SHIFT;
        }
        self.last_wake_ns = Some(woke_ns);
        self.recent[self.seen % SpinMargin::WINDOW] = late_ns.max(0);
        self.seen += 1;
        if self.seen % SpinMargin::EVERY == 0 {
            let n = self.seen.min(SpinMargin::WINDOW);
            let mut window = self.recent;
            let rank = n * 9 / 10;
            let (_, p90, _) = window[..n].select_nth_unstable(rank.min(n - 1));
            self.margin_ns = (*p90).clamp(SpinMargin::MIN_NS, SpinMargin::MAX_NS);
        }
    }
}

impl Default for SpinMargin {
    fn default() -> SpinMargin {
        SpinMargin::new()
    }
}

/// The emulator's time base, shared by the threads: maps the monotonic clock to emulated
/// time and back, and stops while paused.
#[derive(Debug)]
pub struct TimeBase {
    /// Monotonic time of the emulator's time zero plus all time spent paused, ns.
    origin_ns: AtomicI64,
    /// Unix time of the emulator's time zero, ns (for the diag feed's timestamps).
    origin_unix_ns: AtomicI64,
    /// Whether emulated time stands still.
    paused: AtomicBool,
}

impl TimeBase {
    /// A time base whose zero is `delay_ns` from now.
    pub fn starting_in(delay_ns: Nanos) -> TimeBase {
        let mono = monotonic_now_ns();
        let unix = realtime_now_ns();
        TimeBase {
            origin_ns: AtomicI64::new(mono + delay_ns),
            origin_unix_ns: AtomicI64::new(unix + delay_ns),
            paused: AtomicBool::new(false),
        }
    }

    /// Emulated time of the monotonic instant `mono_ns`.
    pub fn emulated(&self, mono_ns: Nanos) -> Nanos {
        mono_ns - self.origin_ns.load(Ordering::Acquire)
    }

    /// Monotonic instant of emulated time `t_ns`.
    pub fn monotonic(&self, t_ns: Nanos) -> Nanos {
        t_ns + self.origin_ns.load(Ordering::Acquire)
    }

    /// Emulated time now.
    pub fn now(&self) -> Nanos {
        self.emulated(monotonic_now_ns())
    }

    /// Unix time of the emulator's time zero plus the time spent paused so far, ns:
    /// emulated time `t` (from now on) is Unix time `origin_unix_ns() + t`.
    pub fn origin_unix_ns(&self) -> Nanos {
        self.origin_unix_ns.load(Ordering::Acquire)
    }

    /// Stops emulated time (`true`) or lets it run again (`false`, after [`pause_for`]).
    ///
    /// [`pause_for`]: TimeBase::pause_for
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
    }

    /// Whether emulated time stands still.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// Shifts the time base forward by `paused_ns` (time spent paused), so emulated time
    /// continues where it stopped.
    pub fn pause_for(&self, paused_ns: Nanos) {
        self.origin_ns.fetch_add(paused_ns, Ordering::AcqRel);
        self.origin_unix_ns.fetch_add(paused_ns, Ordering::AcqRel);
    }
}

/// What a thread of the emulator asks for itself when it starts.
#[derive(Debug, Clone, Default)]
pub struct ThreadSetup {
    /// Its name (`cb-cell`, `cb-tx`, ...), at most 15 bytes: `ps` and the benchmark read it.
    pub name: &'static str,
    /// `SCHED_FIFO` at this priority (1..=99), if set.
    pub realtime_priority: Option<i32>,
    /// The CPUs it may run on; empty: any.
    pub cpus: Vec<usize>,
    /// Timer slack of 1 ns instead of 50 µs (for threads that sleep to deadlines).
    pub precise_timers: bool,
}

/// How [`ThreadSetup::apply`] went, for the counters and the log.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ThreadReport {
    /// The scheduling policy in force: `fifo:<priority>` or `normal`.
    pub scheduling: String,
    /// CPUs the thread is pinned to (empty: any).
    pub cpus: Vec<usize>,
    /// What was refused (real-time priority without permission, a CPU that is not there);
    /// the thread runs on without it.
    pub refused: Vec<String>,
}

impl ThreadSetup {
    /// Applies the setup to the calling thread. Nothing here stops the emulator: a refusal
    /// (no `CAP_SYS_NICE`, `RLIMIT_RTPRIO` 0, a cgroup without real-time budget, a CPU that
    /// is offline) leaves the thread as it was in that respect, is printed as a warning and
    /// is listed in the report.
    pub fn apply(&self) -> ThreadReport {
        let (mut scheduling, mut cpus, mut refused) = ("normal".to_string(), Vec::new(), Vec::new());
        let mut refuse = |what: String| {
            crate::report!("clawbed-emu: warning: thread {}: {what}", self.name);
            refused.push(what);
        };
        if let Ok(name) = std::ffi::CString::new(self.name) {
            // SAFETY: PR_SET_NAME reads a NUL-terminated string (the kernel keeps 15 bytes).
            if let Err(e) = check_os(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0) })
            {
                refuse(format!("naming it: {e}"));
            }
        }
        if self.precise_timers {
            // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory.
            if let Err(e) = check_os(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) }) {
                refuse(format!("timer slack 1 ns: {e}"));
            }
        }
        if !self.cpus.is_empty() {
            // SAFETY: `cpu_set_t` is plain old data; all-zero is the empty set.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            for &cpu in &self.cpus {
                // SAFETY: the config checked `cpu` below CPU_SETSIZE.
                unsafe { libc::CPU_SET(cpu, &mut set) };
            }
            // SAFETY: `set` is valid for the call; 0 means the calling thread.
            match check_os(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) }) {
                Ok(_) => cpus = self.cpus.clone(),
                Err(e) => refuse(format!("CPUs {:?}: {e}", self.cpus)),
            }
        }
        if let Some(priority) = self.realtime_priority {
            let param = libc::sched_param { sched_priority: priority };
            // SAFETY: `param` is valid for the call; 0 means the calling thread.
            match check_os(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) }) {
                Ok(_) => scheduling = format!("fifo:{priority}"),
                Err(e) => refuse(format!("SCHED_FIFO priority {priority}: {e}; running at normal priority")),
            }
        }
        ThreadReport { scheduling, cpus, refused }
    }
}

/// A PM QoS request for the CPUs' wake-up latency (`/dev/cpu_dma_latency`), held as long
/// as this value lives: closing the file withdraws it. At 0 µs idle CPUs poll instead of
/// halting, so a timer wake-up does not first have to wake a halted CPU, which on a virtual
/// machine means a trip through the hypervisor (on the 2-core development VM: a real-time
/// 1 ms sleep loop's p99 lateness 1.1 ms without, 72 µs with). The cost is idle CPU
/// cycles, not the emulator's.
#[derive(Debug)]
pub struct CpuLatencyRequest {
    _file: std::fs::File,
}

impl CpuLatencyRequest {
    /// Asks for CPU wake-ups within `max_us` µs.
    pub fn hold(max_us: i32) -> std::io::Result<CpuLatencyRequest> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().write(true).open("/dev/cpu_dma_latency")?;
        file.write_all(&max_us.to_ne_bytes())?;
        Ok(CpuLatencyRequest { _file: file })
    }
}

/// The CPUs this process may run on, ascending (empty if the kernel would not say).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid for the call; 0 means the calling thread.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads `set` below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect()
}

/// Locks the process's memory, present and future, into RAM (`mlockall`), so a real-time
/// thread never takes a page fault: a fault needs the process's memory-map lock, which a
/// thread of normal priority may hold (mapping or unmapping memory) while it is
/// descheduled, for milliseconds. Memory mapped later is populated by the thread that maps
/// it. Needs `CAP_IPC_LOCK` or a large enough `RLIMIT_MEMLOCK`.
pub fn lock_memory() -> std::io::Result<()> {
    // SAFETY: plain syscall with flags only.
    check_os(unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) }).map(drop)
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
    fn spin_margin_is_the_recent_90th_percentile() {
        let mut m = SpinMargin::new();
        // Wake-ups 100 ms apart: the budget (1 ms of spinning) does not bind.
        let mut woke = 0;
        let mut learn = |m: &mut SpinMargin, late_ns: Nanos, gap_ns: Nanos| {
            woke += gap_ns;
            m.learn(late_ns, woke);
        };
        // 1..=128 µs: the 90th percentile is about 116 µs, capped at 100.
        for us in 1..=128 {
            learn(&mut m, us * NANOS_PER_US, 100 * NANOS_PER_MS);
        }
        assert_eq!(m.ns(), SpinMargin::MAX_NS);
        // Mostly 10 µs with a rare 10 ms: the rare one does not count.
        for i in 0..128 {
            learn(&mut m, if i % 20 == 0 { 10 * NANOS_PER_MS } else { 10 * NANOS_PER_US }, 100 * NANOS_PER_MS);
        }
        assert_eq!(m.ns(), 10 * NANOS_PER_US);
        for _ in 0..128 {
            learn(&mut m, 0, 100 * NANOS_PER_MS);
        }
        assert_eq!(m.ns(), SpinMargin::MIN_NS);
    }

    #[test]
    fn spin_margin_keeps_to_its_budget_when_wake_ups_are_frequent() {
        let mut m = SpinMargin::new();
        let mut woke = 0;
        // 60 µs late every time: the learnt margin is 60 µs.
        for _ in 0..128 {
            woke += 100 * NANOS_PER_MS;
            m.learn(60 * NANOS_PER_US, woke);
        }
        assert_eq!(m.ns(), 60 * NANOS_PER_US);
        // Every millisecond: at most 1 % of it, 10 µs.
        for _ in 0..256 {
            woke += NANOS_PER_MS;
            m.learn(60 * NANOS_PER_US, woke);
        }
        assert!((10 * NANOS_PER_US..11 * NANOS_PER_US).contains(&m.ns()), "{}", m.ns());
        // Sparse again: the full margin comes back.
        for _ in 0..256 {
            woke += 100 * NANOS_PER_MS;
            m.learn(60 * NANOS_PER_US, woke);
        }
        assert_eq!(m.ns(), 60 * NANOS_PER_US);
    }

    #[test]
    fn time_base_pause_shifts_emulated_time() {
        let tb = TimeBase::starting_in(0);
        let mono = monotonic_now_ns();
        let before = tb.emulated(mono);
        tb.pause_for(5 * NANOS_PER_MS);
        assert_eq!(tb.emulated(mono), before - 5 * NANOS_PER_MS);
        assert_eq!(tb.monotonic(tb.emulated(mono)), mono);
    }
}

//! Delay lines and the one-way core network delay: pure logic in emulated time (ns), which
//! the data plane's cell thread drives (the delay trace file is read by the data plane and
//! parsed here, [`CoreDelay::parse_steps`]).
//!
//! A [`DelayLine`] is a FIFO whose items carry a due time. Due times are kept
//! non-decreasing: when the delay shrinks, a packet waits for the one ahead of it, as in a
//! pipe, so a time-varying delay never reorders packets. With FIFO order the head is always
//! the next item due, so no heap or timer wheel is needed.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// A time or duration of the emulated clock, ns (signed, so that differences are plain).
pub type Nanos = i64;
/// Nanoseconds per millisecond.
pub const NANOS_PER_MS: Nanos = 1_000_000;

/// A defect of a delay trace, with the line it is on (1-based; 0: the file as a whole).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepsError {
    /// The line, from 1; 0 when the defect is the whole file's.
    pub line: usize,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for StepsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}", self.problem),
            n => write!(f, "line {n}: {}", self.problem),
        }
    }
}

impl std::error::Error for StepsError {}

/// A FIFO of items released at their due times (ns, emulated time).
#[derive(Debug)]
pub struct DelayLine<T> {
    items: VecDeque<(Nanos, T)>,
    last_due_ns: Nanos,
}

impl<T> DelayLine<T> {
    /// An empty line.
    pub fn new() -> DelayLine<T> {
        DelayLine { items: VecDeque::new(), last_due_ns: Nanos::MIN }
    }

    /// Appends `item`, due at `due_ns` or when the item ahead is due, whichever is later.
    /// Returns the due time given.
    pub fn push(&mut self, due_ns: Nanos, item: T) -> Nanos {
        let due = due_ns.max(self.last_due_ns);
        self.last_due_ns = due;
        self.items.push_back((due, item));
        due
    }

    /// Due time of the head, ns.
    pub fn next_due_ns(&self) -> Option<Nanos> {
        self.items.front().map(|&(due, _)| due)
    }

    /// The head and its due time, left in place.
    pub fn front(&self) -> Option<(Nanos, &T)> {
        self.items.front().map(|(due, item)| (*due, item))
    }

    /// Removes and returns the head with its due time if it is due at `now_ns`.
    pub fn pop_due(&mut self, now_ns: Nanos) -> Option<(Nanos, T)> {
        if self.next_due_ns()? <= now_ns {
            self.items.pop_front()
        } else {
            None
        }
    }

    /// Number of items waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Removes every item (at shutdown), in order.
    pub fn drain(&mut self) -> impl Iterator<Item = (Nanos, T)> + '_ {
        self.items.drain(..)
    }
}

impl<T> Default for DelayLine<T> {
    fn default() -> DelayLine<T> {
        DelayLine::new()
    }
}

/// The one-way core network delay in force at a given time.
#[derive(Debug, Clone)]
pub enum CoreDelay {
    /// The same delay always, ns.
    Constant(Nanos),
    /// One value per 1 ms subframe, ms (a trace's `core_delay_ms` column), played from
    /// row `offset_ms` on; repeats with the series' length when `looping`, else the last
    /// value holds.
    PerSubframe {
        /// Delay per subframe, ms.
        delay_ms: Arc<[f32]>,
        /// Row played at time zero.
        offset_ms: u64,
        /// Whether the series repeats.
        looping: bool,
    },
    /// A step function: (from `t_ms` on, delay in ns), sorted by time; before the first
    /// step the first value holds, after the last step the last.
    Steps(Arc<[(u64, Nanos)]>),
}

impl CoreDelay {
    /// The delay in force at emulated time `t_ns`, ns; a trace's column is read at trace
    /// time, `trace_shift_ms` from emulated time (0 unless the traces were moved, see
    /// `Cell::seek_trace`), a scripted step function at emulated time.
    pub fn at(&self, t_ns: Nanos, trace_shift_ms: i64) -> Nanos {
        let t_ms = u64::try_from(t_ns.max(0) / NANOS_PER_MS).unwrap_or(0);
        match self {
            CoreDelay::Constant(d) => *d,
            CoreDelay::PerSubframe { delay_ms, offset_ms, looping } => {
                let n = delay_ms.len() as u64;
                let row = t_ms.saturating_add_signed(trace_shift_ms).saturating_add(*offset_ms);
                // An empty series (never built from a trace, which has rows) means no delay.
                let i = if *looping { row.checked_rem(n).unwrap_or(0) } else { row.min(n.saturating_sub(1)) };
                delay_ms.get(i as usize).map_or(0, |&d| ms_to_ns(f64::from(d)))
            }
            CoreDelay::Steps(steps) => {
                let i = steps.partition_point(|&(from_ms, _)| from_ms <= t_ms);
                steps.get(i.saturating_sub(1)).map_or(0, |&(_, d)| d)
            }
        }
    }

    /// Parses a delay trace: CSV with the header `t_ms,core_delay_ms` and one row per
    /// change, `t_ms` strictly increasing, delays 0..=10000 ms; lines starting with `#` are
    /// comments. The error names the line.
    pub fn parse_steps(text: &str) -> Result<CoreDelay, StepsError> {
        let err = |line: usize, problem: String| StepsError { line, problem };
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        match lines.next() {
            Some((_, "t_ms,core_delay_ms")) => {}
            Some((n, other)) => {
                return Err(err(n, format!("expected the header `t_ms,core_delay_ms`, found `{other}`")))
            }
            None => return Err(err(0, "empty delay trace".into())),
        }
        let mut steps: Vec<(u64, Nanos)> = Vec::new();
        for (n, line) in lines {
            let (t, d) =
                line.split_once(',').ok_or_else(|| err(n, "expected two values `t_ms,core_delay_ms`".into()))?;
            let t_ms: u64 =
                t.trim().parse().map_err(|_| err(n, format!("t_ms `{t}` is not a non-negative integer")))?;
            let delay_ms: f64 = d.trim().parse().map_err(|_| err(n, format!("core_delay_ms `{d}` is not a number")))?;
            if !(0.0..=10_000.0).contains(&delay_ms) {
                return Err(err(n, format!("core_delay_ms {delay_ms} is outside 0..10000")));
            }
            if steps.last().is_some_and(|&(prev, _)| t_ms <= prev) {
                return Err(err(n, format!("t_ms {t_ms} does not increase")));
            }
            steps.push((t_ms, ms_to_ns(delay_ms)));
        }
        if steps.is_empty() {
            return Err(err(0, "the delay trace has no rows".into()));
        }
        Ok(CoreDelay::Steps(steps.into()))
    }
}

/// Milliseconds (float) to whole nanoseconds.
pub fn ms_to_ns(ms: f64) -> Nanos {
    (ms * NANOS_PER_MS as f64).round() as Nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_line_keeps_fifo_order() {
        let mut line = DelayLine::new();
        assert_eq!(line.push(10, 'a'), 10);
        assert_eq!(line.push(5, 'b'), 10, "a shorter delay waits for the packet ahead");
        assert_eq!(line.push(20, 'c'), 20);
        assert_eq!(line.pop_due(9), None);
        assert_eq!(line.pop_due(10), Some((10, 'a')));
        assert_eq!(line.pop_due(10), Some((10, 'b')));
        assert_eq!(line.pop_due(15), None);
        assert_eq!(line.len(), 1);
    }

    #[test]
    fn per_subframe_delay_loops_or_holds() {
        let series: Arc<[f32]> = vec![1.0, 2.0, 3.0].into();
        let looping = CoreDelay::PerSubframe { delay_ms: series.clone(), offset_ms: 0, looping: true };
        let holding = CoreDelay::PerSubframe { delay_ms: series.clone(), offset_ms: 0, looping: false };
        let shifted = CoreDelay::PerSubframe { delay_ms: series, offset_ms: 2, looping: true };
        assert_eq!(looping.at(4 * NANOS_PER_MS + 10, 0), 2 * NANOS_PER_MS);
        assert_eq!(shifted.at(0, 0), 3 * NANOS_PER_MS);
        assert_eq!(holding.at(4 * NANOS_PER_MS, 0), 3 * NANOS_PER_MS);
        assert_eq!(holding.at(-5, 0), NANOS_PER_MS);
        // Moved traces: the column is read at trace time (emulated 4 ms, trace time 4 − 3 = 1).
        assert_eq!(looping.at(4 * NANOS_PER_MS, -3), 2 * NANOS_PER_MS);
        assert_eq!(shifted.at(0, 1), NANOS_PER_MS);
    }

    #[test]
    fn steps_from_text() {
        let delay = CoreDelay::parse_steps("# a comment\nt_ms,core_delay_ms\n0,20\n1000,35.5\n").expect("valid");
        assert_eq!(delay.at(999 * NANOS_PER_MS, 0), 20 * NANOS_PER_MS);
        assert_eq!(delay.at(5000 * NANOS_PER_MS, 0), 35_500_000);
        let msg = CoreDelay::parse_steps("t_ms,core_delay_ms\n0,20\n0,30\n").expect_err("repeat").to_string();
        assert!(msg.contains("line 3") && msg.contains("does not increase"), "{msg}");
        assert!(CoreDelay::parse_steps("").is_err());
        assert!(CoreDelay::parse_steps("t_ms,core_delay_ms\n").is_err());
    }
}

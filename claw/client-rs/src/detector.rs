//! The bottleneck detector (§4.4) and the saturation rule (§4.3.1): the reference is
//! `claw/client/detector.py` (rules and constants documented there).

/// δ: U below this fraction of N_f (and the bytes below this fraction of the window
/// offered) is a wireline verdict.
const DELTA: f64 = 0.8;
/// Consecutive equal verdicts that switch the state.
const SWITCH_AFTER: u32 = 3;
/// Consecutive alternating verdicts that degrade to plain Cubic.
const DEGRADE_AFTER: u32 = 6;
/// How long a server's detector state is kept after its last use, s.
const CACHE_TTL_S: f64 = 60.0;
/// Idle RBs below this fraction of N_t make a window "saturated".
const SATURATION_IDLE_FRACTION: f64 = 0.05;
/// Consecutive saturated windows that declare saturation.
const SATURATION_WINDOWS: u32 = 2;

/// Where the path's bottleneck is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bottleneck {
    Cellular,
    Wireline,
}

impl Bottleneck {
    pub fn name(self) -> &'static str {
        match self {
            Bottleneck::Cellular => "cellular",
            Bottleneck::Wireline => "wireline",
        }
    }
}

/// One window's verdict (the flow was cwnd-limited; U < δ·N_f; received < δ·offered).
fn verdict(n_f_rbs: f64, u_rbs: f64, cwnd_limited: bool, offered_bytes: f64, received_bytes: f64) -> Bottleneck {
    let short_of_rbs = u_rbs < DELTA * n_f_rbs;
    let short_of_bytes = received_bytes < DELTA * offered_bytes;
    if cwnd_limited && short_of_rbs && short_of_bytes {
        Bottleneck::Wireline
    } else {
        Bottleneck::Cellular
    }
}

/// One server's bottleneck state (starts cellular).
#[derive(Debug, Clone)]
pub struct BottleneckDetector {
    pub state: Bottleneck,
    pub degraded: bool,
    last_verdict: Option<Bottleneck>,
    same_run: u32,
    alternating_run: u32,
}

impl Default for BottleneckDetector {
    fn default() -> Self {
        BottleneckDetector {
            state: Bottleneck::Cellular,
            degraded: false,
            last_verdict: None,
            same_run: 0,
            alternating_run: 0,
        }
    }
}

impl BottleneckDetector {
    pub fn observe(&mut self, n_f_rbs: f64, u_rbs: f64, cwnd_limited: bool, offered: f64, received: f64) -> Bottleneck {
        let v = verdict(n_f_rbs, u_rbs, cwnd_limited, offered, received);
        match self.last_verdict {
            None => {
                self.same_run = 1;
                self.alternating_run = 1;
            }
            Some(last) if last == v => {
                self.same_run += 1;
                self.alternating_run = 1;
            }
            Some(_) => {
                self.same_run = 1;
                self.alternating_run += 1;
            }
        }
        self.last_verdict = Some(v);
        if self.degraded {
            return v;
        }
        if self.same_run >= SWITCH_AFTER {
            self.state = v;
        }
        if self.alternating_run >= DEGRADE_AFTER {
            self.degraded = true;
        }
        v
    }
}

/// The detector of the client's one server, forgotten 60 s after its last use (the
/// reference keeps one per server address; a client reports to one server).
#[derive(Debug, Clone, Default)]
pub struct DetectorCache {
    entry: Option<(BottleneckDetector, f64)>,
}

impl DetectorCache {
    /// The detector (a fresh one if none is cached or it expired); counts as a use.
    fn get(&mut self, now_s: f64) -> &mut BottleneckDetector {
        let expired = match &self.entry {
            None => true,
            Some((_, touched)) => now_s - touched >= CACHE_TTL_S,
        };
        if expired {
            self.entry = Some((BottleneckDetector::default(), now_s));
        }
        let entry = self.entry.as_mut().expect("set above");
        entry.1 = now_s;
        &mut entry.0
    }

    /// The detector if cached and not expired, without counting as a use.
    pub fn peek(&self, now_s: f64) -> Option<&BottleneckDetector> {
        match &self.entry {
            Some((d, touched)) if now_s - touched < CACHE_TTL_S => Some(d),
            _ => None,
        }
    }

    pub fn observe(&mut self, now_s: f64, n_f_rbs: f64, u_rbs: f64, offered: f64, received: f64) -> Bottleneck {
        self.get(now_s).observe(n_f_rbs, u_rbs, true, offered, received)
    }
}

/// Saturated when N_I < 5 % of N_t in the last two consecutive windows.
#[derive(Debug, Clone, Default)]
pub struct SaturationDetector {
    streak: u32,
    pub saturated: bool,
}

impl SaturationDetector {
    pub fn observe(&mut self, n_i_rbs: f64, n_t_rbs: f64) {
        if n_i_rbs < SATURATION_IDLE_FRACTION * n_t_rbs {
            self.streak += 1;
        } else {
            self.streak = 0;
        }
        self.saturated = self.streak >= SATURATION_WINDOWS;
    }

    pub fn reset(&mut self) {
        self.streak = 0;
        self.saturated = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_wireline_verdicts_switch_six_alternating_degrade() {
        let mut d = BottleneckDetector::default();
        for _ in 0..2 {
            assert_eq!(d.observe(100.0, 10.0, true, 1e6, 1.0), Bottleneck::Wireline);
            assert_eq!(d.state, Bottleneck::Cellular);
        }
        d.observe(100.0, 10.0, true, 1e6, 1.0);
        assert_eq!(d.state, Bottleneck::Wireline);
        let mut d = BottleneckDetector::default();
        for i in 0..6 {
            let u = if i % 2 == 0 { 100.0 } else { 10.0 };
            d.observe(100.0, u, true, 1e6, 1.0);
        }
        assert!(d.degraded);
        // Not held back by the network: never wireline.
        assert_eq!(verdict(100.0, 10.0, false, 1e6, 1.0), Bottleneck::Cellular);
    }

    #[test]
    fn cache_forgets_after_a_minute() {
        let mut c = DetectorCache::default();
        c.observe(1.0, 100.0, 10.0, 1e6, 1.0);
        assert!(c.peek(60.9).is_some());
        assert!(c.peek(61.0).is_none());
    }
}

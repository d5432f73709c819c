//! The cellular load analyzer (paper §4.2–4.3.1, `docs/claw-spec.md`): the reference is
//! `claw/client/analyzer.py`, whose docstring gives the equations, the departures and the
//! units (RBs per subframe, summed over the window; ms of diag time). Same ring, same
//! integer running sums (loads in parts per billion), same arithmetic in the same order,
//! so the estimates are bit for bit the reference's.

use crate::feed::MAX_MCS;

/// Below this many scheduled subframes in the window, the mean MCS is the channel-quality
/// MCS's mean over the window.
const MIN_SCHEDULED_SUBFRAMES: i64 = 10;
/// Subframes kept, ms.
const RING_MS: i64 = 16384;
/// Longest window T, ms.
pub const MAX_WINDOW_MS: i64 = 10_000;
/// Window before the server's first RTT echo, ms.
pub const DEFAULT_WINDOW_MS: i64 = 100;
/// Default time without a scheduled subframe after which the radio counts as idle, ms.
pub const DEFAULT_IDLE_TIMEOUT_MS: i64 = 10_000;
/// Loads are summed as integers in parts per billion so running sums are exact.
const PPB: f64 = 1_000_000_000.0;
/// Subcarriers per RB.
const N_SUBC: f64 = 12.0;

/// CLAW (own + idle RBs) or the CQIC baseline (own RBs only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Claw,
    Cqic,
}

/// Where Eq. 7 is clamped: each r_k (the spec) or the window's mean (the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clamp {
    Window,
    Sample,
}

/// r_k from RSRQ in dB (Eq. 7), unclamped.
pub fn load_from_rsrq_db_unclamped(rsrq_db: f64, n_antennas: i64) -> f64 {
    let n_ref = (2 * n_antennas) as f64;
    (10f64.powf(-rsrq_db / 10.0) - n_ref) / ((N_SUBC - n_ref) * n_antennas as f64)
}

/// The window T, ms, for a smoothed RTT in µs: rounded to whole subframes, 1..10000.
pub fn window_ms_from_srtt_us(srtt_us: u32) -> i64 {
    ((f64::from(srtt_us) / 1000.0 + 0.5) as i64).clamp(1, MAX_WINDOW_MS)
}

/// Where the MCS of W_claw came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McsSource {
    Window,
    ChannelWindow,
    Last,
    Channel,
    None,
}

impl McsSource {
    pub fn name(self) -> &'static str {
        match self {
            McsSource::Window => "window",
            McsSource::ChannelWindow => "channel-window",
            McsSource::Last => "last",
            McsSource::Channel => "channel",
            McsSource::None => "none",
        }
    }
}

/// The analyzer's view of the window ending at `t_ms` (fields as the reference's `Estimate`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub t_ms: i64,
    pub window_ms: i64,
    pub samples: i64,
    pub scheduled_subframes: i64,
    pub load: f64,
    pub n_t_rbs: i64,
    pub n_a_rbs: f64,
    pub n_i_rbs: f64,
    pub n_s_rbs: i64,
    pub n_f_rbs: f64,
    pub mean_mcs: Option<f64>,
    pub mcs_source: McsSource,
    pub layers: i64,
    pub n_prb: i64,
    pub w_claw_bytes: i64,
}

/// TBS bits for an MCS 0..28 on 1..N_rb PRBs (`layers` 1 or 2).
fn tbs(mcs: i64, n_prb: i64, layers: i64) -> i64 {
    let bits = lte::tbs::tbs_bits(mcs as u8, n_prb as u8, if layers == 2 { 2 } else { 1 });
    i64::from(bits.unwrap_or(0))
}

/// One UE's load analyzer (see the module doc and the reference).
pub struct LoadAnalyzer {
    n_rb: i64,
    n_antennas: i64,
    variant: Variant,
    clamp: Clamp,
    idle_timeout_ms: i64,
    window_ms: i64,
    slot_t: Vec<i64>,
    meas_t: Vec<i64>,
    r_ppb: Vec<i64>,
    own_rbs: Vec<i64>,
    mcs: Vec<i64>,
    chan_mcs: Vec<i64>,
    two_layers: Vec<bool>,
    pub active: bool,
    epoch_ms: i64,
    hi: i64,
    lo: i64,
    last_scheduled_ms: i64,
    sum_r: i64,
    n_meas: i64,
    sum_s: i64,
    sum_mcs: i64,
    n_sched: i64,
    n_two: i64,
    sum_chan: i64,
    n_chan: i64,
    last_r: Option<f64>,
    last_mcs: Option<i64>,
    channel_mcs: Option<i64>,
    last_layers: i64,
    last_estimate: Option<Estimate>,
}

impl LoadAnalyzer {
    pub fn new(n_rb: i64, n_antennas: i64, variant: Variant, idle_timeout_ms: i64, clamp: Clamp) -> Self {
        let ring = RING_MS as usize;
        LoadAnalyzer {
            n_rb,
            n_antennas,
            variant,
            clamp,
            idle_timeout_ms,
            window_ms: DEFAULT_WINDOW_MS,
            slot_t: vec![-1; ring],
            meas_t: vec![-1; ring],
            r_ppb: vec![0; ring],
            own_rbs: vec![0; ring],
            mcs: vec![-1; ring],
            chan_mcs: vec![-1; ring],
            two_layers: vec![false; ring],
            active: false,
            epoch_ms: 0,
            hi: -1,
            lo: 0,
            last_scheduled_ms: 0,
            sum_r: 0,
            n_meas: 0,
            sum_s: 0,
            sum_mcs: 0,
            n_sched: 0,
            n_two: 0,
            sum_chan: 0,
            n_chan: 0,
            last_r: None,
            last_mcs: None,
            channel_mcs: None,
            last_layers: 1,
            last_estimate: None,
        }
    }

    /// Change T (1..10000 ms; the caller checks): growing re-includes this connection's
    /// subframes still in the ring, shrinking drops the oldest.
    pub fn set_window_ms(&mut self, window_ms: i64) {
        self.window_ms = window_ms;
        if self.active {
            self.move_lo(self.hi - self.window_ms + 1, None);
        }
    }

    /// The UE's PDSCH in subframe `t_ms`.
    pub fn add_subframe(&mut self, t_ms: i64, own_rbs: i64, mcs: Option<i64>, layers: i64) {
        self.last_layers = if layers == 2 { 2 } else { 1 };
        let scheduled = own_rbs > 0 && mcs.is_some();
        if !self.active {
            if !scheduled {
                return;
            }
            self.start(t_ms);
        } else if !scheduled && t_ms - self.last_scheduled_ms >= self.idle_timeout_ms {
            self.radio_idle();
            return;
        }
        if t_ms > self.hi {
            self.advance(t_ms);
        }
        if t_ms <= self.hi - RING_MS || t_ms < self.epoch_ms {
            return;
        }
        let i = t_ms.rem_euclid(RING_MS) as usize;
        self.claim(i, t_ms);
        let in_window = t_ms >= self.lo;
        if in_window {
            self.sum_s -= self.own_rbs[i];
            if self.mcs[i] >= 0 {
                self.sum_mcs -= self.mcs[i];
                self.n_sched -= 1;
                self.n_two -= i64::from(self.two_layers[i]);
            }
        }
        let valid_mcs = match mcs {
            Some(m) if scheduled => (0..=MAX_MCS).contains(&m).then_some(m),
            _ => None,
        };
        self.own_rbs[i] = own_rbs.max(0);
        self.mcs[i] = valid_mcs.unwrap_or(-1);
        self.two_layers[i] = layers == 2;
        if in_window {
            self.sum_s += self.own_rbs[i];
            if let Some(m) = valid_mcs {
                self.sum_mcs += m;
                self.n_sched += 1;
                self.n_two += i64::from(layers == 2);
            }
        }
        if scheduled {
            self.last_scheduled_ms = self.last_scheduled_ms.max(t_ms);
            if valid_mcs.is_some() {
                self.last_mcs = valid_mcs;
            }
        }
    }

    /// An RSRQ measurement (dB) made in subframe `t_ms`, with the channel-quality MCS.
    pub fn add_measurement(&mut self, t_ms: i64, rsrq_db: f64, channel_mcs: Option<i64>) {
        let channel_mcs = channel_mcs.filter(|m| (0..=MAX_MCS).contains(m));
        if channel_mcs.is_some() {
            self.channel_mcs = channel_mcs;
        }
        let raw = load_from_rsrq_db_unclamped(rsrq_db, self.n_antennas);
        let r = match self.clamp {
            Clamp::Sample => raw.clamp(0.0, 1.0),
            Clamp::Window => raw,
        };
        if !self.active {
            return;
        }
        if t_ms > self.hi {
            self.advance(t_ms);
        }
        if t_ms <= self.hi - RING_MS || t_ms < self.epoch_ms {
            return;
        }
        self.last_r = Some(r);
        let i = t_ms.rem_euclid(RING_MS) as usize;
        self.claim(i, t_ms);
        let ppb = (r * PPB + 0.5) as i64;
        let in_window = t_ms >= self.lo;
        if in_window && self.meas_t[i] == t_ms {
            self.sum_r -= self.r_ppb[i];
            self.n_meas -= 1;
            if self.chan_mcs[i] >= 0 {
                self.sum_chan -= self.chan_mcs[i];
                self.n_chan -= 1;
            }
        }
        self.meas_t[i] = t_ms;
        self.r_ppb[i] = ppb;
        self.chan_mcs[i] = channel_mcs.unwrap_or(-1);
        if in_window {
            self.sum_r += ppb;
            self.n_meas += 1;
            if let Some(c) = channel_mcs {
                self.sum_chan += c;
                self.n_chan += 1;
            }
        }
    }

    /// Freeze: the radio went idle.
    pub fn radio_idle(&mut self) {
        if self.active {
            self.last_estimate = Some(self.compute());
        }
        self.active = false;
    }

    /// The current window's estimate; while frozen, the last one; None before any.
    pub fn estimate(&self) -> Option<Estimate> {
        if !self.active {
            return self.last_estimate;
        }
        Some(self.compute())
    }

    fn valid(&self, i: usize, t_ms: i64) -> bool {
        self.slot_t[i] == t_ms && t_ms >= self.epoch_ms
    }

    /// S_k of subframe `t_ms` (0 when not scheduled or not held).
    pub fn own_rbs_at(&self, t_ms: i64) -> i64 {
        let i = t_ms.rem_euclid(RING_MS) as usize;
        if self.active && self.valid(i, t_ms) {
            self.own_rbs[i]
        } else {
            0
        }
    }

    /// What the UE's transport block of subframe `t_ms` carried, bits.
    pub fn own_bits_at(&self, t_ms: i64) -> i64 {
        let i = t_ms.rem_euclid(RING_MS) as usize;
        if !(self.active && self.valid(i, t_ms)) || self.mcs[i] < 0 || self.own_rbs[i] <= 0 {
            return 0;
        }
        let n = self.own_rbs[i].clamp(1, self.n_rb);
        tbs(self.mcs[i].clamp(0, MAX_MCS), n, if self.two_layers[i] { 2 } else { 1 })
    }

    fn reset_sums(&mut self) {
        self.sum_r = 0;
        self.n_meas = 0;
        self.sum_s = 0;
        self.sum_mcs = 0;
        self.n_sched = 0;
        self.n_two = 0;
        self.sum_chan = 0;
        self.n_chan = 0;
    }

    fn start(&mut self, t_ms: i64) {
        self.active = true;
        self.epoch_ms = t_ms;
        self.hi = t_ms - 1;
        self.lo = t_ms;
        self.last_scheduled_ms = t_ms;
        self.reset_sums();
    }

    fn claim(&mut self, i: usize, t_ms: i64) {
        if self.slot_t[i] != t_ms {
            self.slot_t[i] = t_ms;
            self.meas_t[i] = -1;
            self.chan_mcs[i] = -1;
            self.own_rbs[i] = 0;
            self.mcs[i] = -1;
            self.two_layers[i] = false;
        }
    }

    fn advance(&mut self, t_ms: i64) {
        let old_hi = self.hi;
        self.hi = t_ms;
        self.move_lo(t_ms - self.window_ms + 1, Some(old_hi));
    }

    fn move_lo(&mut self, new_lo: i64, old_hi: Option<i64>) {
        let old_hi = old_hi.unwrap_or(self.hi);
        let new_lo = new_lo.max(self.epoch_ms).max(self.hi - RING_MS + 1);
        let lo = self.lo;
        if new_lo > lo {
            if new_lo > old_hi {
                self.reset_sums();
            } else {
                for u in lo..new_lo {
                    self.account(u, -1);
                }
            }
        } else if new_lo < lo {
            for u in new_lo..lo {
                self.account(u, 1);
            }
        }
        self.lo = new_lo;
    }

    fn account(&mut self, u: i64, sign: i64) {
        let i = u.rem_euclid(RING_MS) as usize;
        if !self.valid(i, u) {
            return;
        }
        self.sum_s += sign * self.own_rbs[i];
        if self.mcs[i] >= 0 {
            self.sum_mcs += sign * self.mcs[i];
            self.n_sched += sign;
            self.n_two += sign * i64::from(self.two_layers[i]);
        }
        if self.meas_t[i] == u {
            self.sum_r += sign * self.r_ppb[i];
            self.n_meas += sign;
            if self.chan_mcs[i] >= 0 {
                self.sum_chan += sign * self.chan_mcs[i];
                self.n_chan += sign;
            }
        }
    }

    fn compute(&self) -> Estimate {
        let window = self.window_ms;
        let n_rb = self.n_rb;
        let load =
            if self.n_meas != 0 { self.sum_r as f64 / self.n_meas as f64 / PPB } else { self.last_r.unwrap_or(0.0) };
        let load = load.clamp(0.0, 1.0);
        let n_t = n_rb * window;
        let n_a = n_t as f64 * load;
        let n_i = n_t as f64 - n_a;
        let n_s = self.sum_s;
        // A window not filled yet extrapolates the own share at its observed rate.
        let elapsed = self.hi - self.lo + 1;
        let n_s_window =
            if 0 < elapsed && elapsed < window { (n_s * window) as f64 / elapsed as f64 } else { n_s as f64 };
        let n_f = match self.variant {
            Variant::Claw => py_min(n_s_window + n_i, n_t as f64),
            Variant::Cqic => py_min(n_s_window, n_t as f64),
        };
        let layers = if self.n_sched != 0 {
            if 2 * self.n_two > self.n_sched {
                2
            } else {
                1
            }
        } else {
            self.last_layers
        };
        let (mean_mcs, source) = if self.n_sched < MIN_SCHEDULED_SUBFRAMES && self.n_chan != 0 {
            (Some(self.sum_chan as f64 / self.n_chan as f64), McsSource::ChannelWindow)
        } else if self.n_sched != 0 {
            (Some(self.sum_mcs as f64 / self.n_sched as f64), McsSource::Window)
        } else if let Some(m) = self.last_mcs {
            (Some(m as f64), McsSource::Last)
        } else if let Some(m) = self.channel_mcs {
            (Some(m as f64), McsSource::Channel)
        } else {
            (None, McsSource::None)
        };
        let n_prb = ((n_f / window as f64 + 0.5).floor() as i64).clamp(1, n_rb);
        let w_claw = match mean_mcs {
            None => 0,
            Some(m) => {
                let mcs = ((m + 0.5).floor() as i64).clamp(0, MAX_MCS);
                window * tbs(mcs, n_prb, layers) / 8
            }
        };
        Estimate {
            t_ms: self.hi,
            window_ms: window,
            samples: self.n_meas,
            scheduled_subframes: self.n_sched,
            load,
            n_t_rbs: n_t,
            n_a_rbs: n_a,
            n_i_rbs: n_i,
            n_s_rbs: n_s,
            n_f_rbs: n_f,
            mean_mcs,
            mcs_source: source,
            layers,
            n_prb,
            w_claw_bytes: w_claw,
        }
    }
}

/// Python's `min(a, b)`: `a` unless `b < a`.
fn py_min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_cell_window_has_every_rb_free() {
        let mut a = LoadAnalyzer::new(50, 2, Variant::Claw, DEFAULT_IDLE_TIMEOUT_MS, Clamp::Window);
        // RSRQ of an idle 2-antenna cell: 10·log10(1 / N_ref) with N_ref = 4 → r = 0.
        let idle_rsrq = -10.0 * 4f64.log10();
        for t in 0..200 {
            a.add_subframe(t, 5, Some(20), 1);
            a.add_measurement(t, idle_rsrq, Some(20));
        }
        let e = a.estimate().unwrap();
        assert_eq!((e.t_ms, e.window_ms, e.samples, e.n_t_rbs, e.n_s_rbs), (199, 100, 100, 5000, 500));
        assert!(e.load.abs() < 1e-9 && (e.n_f_rbs - 5000.0).abs() < 1e-6);
        assert_eq!((e.mcs_source, e.n_prb, e.layers), (McsSource::Window, 50, 1));
        assert_eq!(e.w_claw_bytes, 100 * tbs(20, 50, 1) / 8);
        assert_eq!(a.own_bits_at(199), tbs(20, 5, 1));
        assert_eq!(window_ms_from_srtt_us(49_400), 49);
        assert_eq!(window_ms_from_srtt_us(0), 1);
    }
}

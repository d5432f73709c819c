//! One UE's client logic without I/O: diag messages and server echoes in; feedback
//! reports, loss events and per-subframe rows out. The reference is `claw/client/core.py`
//! (its docstring gives the per-subframe steps, the detector's cadence and the reasons);
//! this is the same logic, step for step, so the two give the same rows and reports.

use std::collections::VecDeque;

use crate::analyzer::{
    window_ms_from_srtt_us, Clamp, Estimate, LoadAnalyzer, Variant, DEFAULT_IDLE_TIMEOUT_MS, DEFAULT_WINDOW_MS,
};
use crate::detector::{Bottleneck, DetectorCache, SaturationDetector};
use crate::feed::{
    FeedDecoder, FeedFormatError, LossEvent, LossKind, PdschSubframe, MAC_DL_TRANSPORT_BLOCK, PDCP_DL_STATS,
    PDSCH_STAT, RLC_DL_STATS, SERV_CELL_MEASUREMENT,
};
use crate::feedback::{Echo, Feedback};
use crate::json::Value;

/// Most often feedback can be sent: every subframe, ms.
pub const MIN_FEEDBACK_PERIOD_MS: i64 = 1;
/// Least often: the feedback's longest window, ms.
pub const MAX_FEEDBACK_PERIOD_MS: i64 = 10_000;
/// Chains of back-to-back bottleneck checks while the UE downloads.
const CHECK_CHAINS: i64 = 2;
/// Scheduled in this many of the last `RECEIVING_OF` subframes: the UE is downloading.
const RECEIVING_SUBFRAMES: usize = 5;
const RECEIVING_OF: usize = 10;
/// Recent W_claw updates kept.
const RECENT_UPDATES: usize = 256;

/// What one client needs to know (the reference's `ClientConfig`).
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub ue_id: u16,
    pub n_antennas: i64,
    pub n_rb: Option<i64>,
    pub variant: Variant,
    pub bottleneck_detector: bool,
    pub feedback_period_ms: i64,
    pub idle_timeout_ms: i64,
    pub first_seq: u32,
    pub clamp: Clamp,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            ue_id: 0,
            n_antennas: 2,
            n_rb: None,
            variant: Variant::Claw,
            bottleneck_detector: true,
            feedback_period_ms: 100,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            first_seq: 1,
            clamp: Clamp::Window,
        }
    }
}

/// One closed subframe, as the estimates log records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub t_ms: i64,
    pub unix_s: Option<f64>,
    pub active: bool,
    pub estimate: Option<Estimate>,
    pub saturated: bool,
    pub bottleneck: Bottleneck,
    pub degraded: bool,
    pub verdict: Option<Bottleneck>,
    pub feedback_seq: Option<u32>,
    pub events: Vec<LossEvent>,
}

/// What one message caused.
#[derive(Debug, Default)]
pub struct Step {
    pub rows: Vec<Row>,
    pub feedback: Vec<Feedback>,
    pub events: Vec<LossEvent>,
}

/// A pending bottleneck check (see the reference's `_Check`).
#[derive(Debug, Clone)]
struct Check {
    start_ms: i64,
    window_ms: i64,
    n_f_rbs: f64,
    offered_bytes: f64,
    seq: u32,
    u_rbs: i64,
    u_bits: i64,
    limited_by_w_claw: Option<bool>,
}

impl Check {
    fn window_end_ms(&self) -> i64 {
        self.start_ms + self.window_ms
    }

    fn expires_ms(&self) -> i64 {
        self.start_ms + 2 * self.window_ms
    }
}

/// What the client did (the reference's `Counters`, same names).
#[derive(Debug, Clone, Default)]
pub struct Counters {
    pub messages: u64,
    pub subframes: u64,
    pub feedback: u64,
    pub echoes: u64,
    pub echoes_other_ue: u64,
    pub wireless_events: u64,
    pub overflow_events: u64,
    pub verdicts: u64,
    pub checks_without_evidence: u64,
    pub checks_unanswered: u64,
    pub checks_overlapping: u64,
    pub bad_messages: u64,
}

impl Counters {
    /// As a JSON object, in the reference's field order.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"messages\": {}, \"subframes\": {}, \"feedback\": {}, \"echoes\": {}, \"echoes_other_ue\": {}, \
             \"wireless_events\": {}, \"overflow_events\": {}, \"verdicts\": {}, \"checks_without_evidence\": {}, \
             \"checks_unanswered\": {}, \"checks_overlapping\": {}, \"bad_messages\": {}}}",
            self.messages,
            self.subframes,
            self.feedback,
            self.echoes,
            self.echoes_other_ue,
            self.wireless_events,
            self.overflow_events,
            self.verdicts,
            self.checks_without_evidence,
            self.checks_unanswered,
            self.checks_overlapping,
            self.bad_messages
        )
    }
}

/// The client's logic for one UE.
pub struct ClientCore {
    config: ClientConfig,
    decoder: FeedDecoder,
    analyzer: Option<LoadAnalyzer>,
    early_pdsch: Vec<PdschSubframe>,
    detectors: DetectorCache,
    saturation: SaturationDetector,
    pub counters: Counters,
    seq: u32,
    open_t: Option<i64>,
    last_closed: Option<i64>,
    open_unix: Option<f64>,
    open_events: Vec<LossEvent>,
    was_active: bool,
    window_end_ms: Option<i64>,
    last_feedback_ms: Option<i64>,
    checks: Vec<Check>,
    counted_end_ms: Option<i64>,
    server_has_flow: bool,
    scheduled: VecDeque<bool>,
    /// (diag time, N_f, window T, W_claw bytes) of the latest W_claw updates, oldest first.
    updates: VecDeque<(i64, f64, i64, i64)>,
    window_ms: i64,
}

impl ClientCore {
    pub fn new(config: ClientConfig) -> Self {
        let mut core = ClientCore {
            decoder: FeedDecoder::default(),
            analyzer: None,
            early_pdsch: Vec::new(),
            detectors: DetectorCache::default(),
            saturation: SaturationDetector::default(),
            counters: Counters::default(),
            seq: config.first_seq,
            open_t: None,
            last_closed: None,
            open_unix: None,
            open_events: Vec::new(),
            was_active: false,
            window_end_ms: None,
            last_feedback_ms: None,
            checks: Vec::new(),
            counted_end_ms: None,
            server_has_flow: false,
            scheduled: VecDeque::with_capacity(RECEIVING_OF),
            updates: VecDeque::with_capacity(RECENT_UPDATES),
            window_ms: DEFAULT_WINDOW_MS,
            config,
        };
        if let Some(n_rb) = core.config.n_rb {
            core.make_analyzer(n_rb);
        }
        core
    }

    fn make_analyzer(&mut self, n_rb: i64) {
        let c = &self.config;
        self.analyzer = Some(LoadAnalyzer::new(n_rb, c.n_antennas, c.variant, c.idle_timeout_ms, c.clamp));
    }

    fn uses_hybrid(&self) -> bool {
        self.config.variant == Variant::Claw
    }

    fn uses_detector(&self) -> bool {
        self.config.variant == Variant::Claw && self.config.bottleneck_detector
    }

    /// The window T in force, ms.
    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// Take one diag message. An error leaves what was done before it (as the reference).
    pub fn on_message(&mut self, message: &Value<'_>, step: &mut Step) -> Result<(), FeedFormatError> {
        self.counters.messages += 1;
        let kind = message.get("type_id").and_then(Value::as_str).unwrap_or("");
        let unix_s = match message.get("timestamp") {
            Some(Value::Num(x, _)) => Some(*x),
            Some(Value::Bool(b)) => Some(f64::from(u8::from(*b))),
            _ => None,
        };
        match kind {
            PDSCH_STAT => {
                for sf in self.decoder.pdsch(message)? {
                    self.reach(sf.t_ms, unix_s, step);
                    match self.analyzer.as_mut() {
                        Some(a) => a.add_subframe(sf.t_ms, sf.own_rbs, sf.mcs, sf.layers),
                        None => {
                            // N_rb comes with this subframe's measurement: keep it until then.
                            self.early_pdsch.retain(|p| p.t_ms == sf.t_ms);
                            self.early_pdsch.push(sf);
                        }
                    }
                }
            }
            SERV_CELL_MEASUREMENT => {
                for m in self.decoder.measurements(message)? {
                    if self.analyzer.is_none() {
                        let Some(n_rb) = m.n_rb() else { continue };
                        self.make_analyzer(n_rb);
                        let window = self.window_ms;
                        let early = std::mem::take(&mut self.early_pdsch);
                        let a = self.analyzer.as_mut().expect("made above");
                        a.set_window_ms(window);
                        for sf in early.iter().filter(|sf| sf.t_ms == m.t_ms) {
                            a.add_subframe(sf.t_ms, sf.own_rbs, sf.mcs, sf.layers);
                        }
                    }
                    self.reach(m.t_ms, unix_s, step);
                    if let Some(a) = self.analyzer.as_mut() {
                        a.add_measurement(m.t_ms, m.rsrq_db, m.channel_mcs);
                    }
                }
            }
            MAC_DL_TRANSPORT_BLOCK => {
                if let Some((sfn, sf)) = FeedDecoder::mac_subframe(message) {
                    let t = self.decoder.clock.unwrap(sfn, sf)?;
                    self.reach(t, unix_s, step);
                }
            }
            RLC_DL_STATS | PDCP_DL_STATS => {
                let ts = message.get("timestamp").and_then(Value::as_finite);
                for event in self.decoder.loss_events(message, kind, ts)? {
                    step.events.push(event);
                    self.open_events.push(event);
                    match event.kind {
                        LossKind::Wireless => self.counters.wireless_events += 1,
                        LossKind::Overflow => self.counters.overflow_events += 1,
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Take an authenticated server echo; false (ignored) when it is for another UE.
    pub fn on_echo(&mut self, echo: &Echo) -> bool {
        if echo.ue_id != self.config.ue_id {
            self.counters.echoes_other_ue += 1;
            return false;
        }
        self.counters.echoes += 1;
        self.server_has_flow = echo.cwnd_packets > 0;
        if echo.srtt_us > 0 {
            self.window_ms = window_ms_from_srtt_us(echo.srtt_us);
            let window = self.window_ms;
            if let Some(a) = self.analyzer.as_mut() {
                a.set_window_ms(window);
            }
        }
        for check in &mut self.checks {
            if echo.seq == check.seq {
                check.limited_by_w_claw = Some(echo.cwnd_limited);
            }
        }
        true
    }

    /// Close the subframe still open (the feed ended).
    pub fn finish(&mut self, step: &mut Step) {
        if self.open_t.is_some() {
            self.close(step);
        }
    }

    fn now_s(&self) -> f64 {
        let t = match self.open_t {
            Some(t) => t,
            None => self.decoder.clock.latest_ms().unwrap_or(0),
        };
        t as f64 / 1000.0
    }

    /// (bottleneck state, degraded) towards the server.
    fn detector_state(&self) -> (Bottleneck, bool) {
        if !self.uses_detector() {
            return (Bottleneck::Cellular, false);
        }
        match self.detectors.peek(self.now_s()) {
            Some(d) => (d.state, d.degraded),
            None => (Bottleneck::Cellular, false),
        }
    }

    fn reach(&mut self, t_ms: i64, unix_s: Option<f64>, step: &mut Step) {
        if matches!(self.open_t, Some(open) if t_ms > open) {
            self.close(step);
        }
        if self.open_t.is_none_or(|open| t_ms > open) {
            if self.open_t.is_none() && matches!(self.last_closed, Some(last) if t_ms <= last) {
                return; // a late message about a subframe already closed
            }
            self.open_t = Some(t_ms);
            self.open_unix = unix_s;
        }
    }

    fn close(&mut self, step: &mut Step) {
        let t = self.open_t.take().expect("a subframe is open");
        self.last_closed = Some(t);
        self.counters.subframes += 1;
        let active = self.analyzer.as_ref().is_some_and(|a| a.active);
        if !active && self.was_active {
            // The radio went idle: windows and checks start afresh with the next connection.
            self.window_end_ms = None;
            self.checks.clear();
            self.counted_end_ms = None;
            self.server_has_flow = false;
            self.scheduled.clear();
            self.updates.clear();
            self.saturation.reset();
        }
        self.was_active = active;
        let estimate = self.analyzer.as_ref().and_then(LoadAnalyzer::estimate);
        let mut verdict = None;
        let mut seq = None;
        if let (true, Some(estimate)) = (active, estimate) {
            let window = estimate.window_ms;
            match self.window_end_ms {
                None => self.window_end_ms = Some(t + window),
                Some(end) if t >= end => {
                    if self.uses_hybrid() {
                        self.saturation.observe(estimate.n_i_rbs, estimate.n_t_rbs as f64);
                    }
                    self.window_end_ms = Some(t + window);
                }
                Some(_) => {}
            }
            let own = self.analyzer.as_ref().map_or(0, |a| a.own_rbs_at(t));
            if self.scheduled.len() == RECEIVING_OF {
                self.scheduled.pop_front();
            }
            self.scheduled.push_back(own > 0);
            let window_ends_here = self.checks.iter().any(|c| c.window_end_ms() == t);
            verdict = self.advance_checks(t);
            let period_over = self.last_feedback_ms.is_none_or(|last| t - last >= self.config.feedback_period_ms);
            let check_wanted = self.uses_detector() && self.check_starts(t, window, window_ends_here, period_over);
            if estimate.mean_mcs.is_some() && (period_over || check_wanted) {
                let feedback = self.feedback(t, &estimate);
                step.feedback.push(feedback);
                seq = Some(feedback.seq);
                self.last_feedback_ms = Some(t);
                if check_wanted {
                    let (n_f_rbs, offered_bytes) = self.reference(t, window, estimate.n_f_rbs, estimate.w_claw_bytes);
                    self.checks.push(Check {
                        start_ms: t,
                        window_ms: window,
                        n_f_rbs,
                        offered_bytes,
                        seq: feedback.seq,
                        u_rbs: 0,
                        u_bits: 0,
                        limited_by_w_claw: None,
                    });
                }
                if self.updates.len() == RECENT_UPDATES {
                    self.updates.pop_front();
                }
                self.updates.push_back((t, estimate.n_f_rbs, window, estimate.w_claw_bytes));
            }
        }
        let (state, degraded) = self.detector_state();
        step.rows.push(Row {
            t_ms: t,
            unix_s: self.open_unix,
            active,
            estimate,
            saturated: self.saturation.saturated,
            bottleneck: state,
            degraded,
            verdict,
            feedback_seq: seq,
            events: std::mem::take(&mut self.open_events),
        });
    }

    /// (N_f, the window offered in bytes) for a check started by the update at `t_ms`.
    fn reference(&self, t_ms: i64, window_ms: i64, n_f_rbs: f64, w_claw_bytes: i64) -> (f64, f64) {
        let (mut reference, mut offered) = (n_f_rbs, w_claw_bytes as f64);
        for &(sent_ms, n_f, update_window_ms, w_claw) in self.updates.iter().rev() {
            let r = n_f * window_ms as f64 / update_window_ms as f64;
            if r < reference {
                reference = r;
            }
            let o = (w_claw * window_ms) as f64 / update_window_ms as f64;
            if o < offered {
                offered = o;
            }
            if sent_ms <= t_ms - window_ms {
                break;
            }
        }
        (reference, offered)
    }

    /// Whether a bottleneck check, with the report that starts it, begins at `t_ms`.
    fn check_starts(&self, t_ms: i64, window_ms: i64, window_ends_here: bool, period_over: bool) -> bool {
        let mut open = self.checks.iter().filter(|c| c.window_end_ms() > t_ms);
        let first_open = open.clone().next();
        let receiving = self.scheduled.iter().filter(|&&s| s).count() >= RECEIVING_SUBFRAMES;
        if !(self.server_has_flow || receiving) {
            return period_over && first_open.is_none();
        }
        if first_open.is_none() || window_ends_here {
            return true;
        }
        let n_open = open.clone().count() as i64;
        let last_start = open.next_back().map_or(0, |c| c.start_ms);
        // ceil(T / chains), as the reference's -(-T // chains).
        n_open < CHECK_CHAINS && t_ms - last_start >= (window_ms + CHECK_CHAINS - 1).div_euclid(CHECK_CHAINS)
    }

    /// Count subframe `t_ms` into the pending checks; judge or drop the due ones in the order
    /// their windows end; the last verdict judged, if any.
    fn advance_checks(&mut self, t_ms: i64) -> Option<Bottleneck> {
        let a = self.analyzer.as_ref().expect("active implies an analyzer");
        let own_rbs = if self.checks.is_empty() { 0 } else { a.own_rbs_at(t_ms) };
        let own_bits = if own_rbs != 0 { a.own_bits_at(t_ms) } else { 0 };
        for check in &mut self.checks {
            if check.start_ms < t_ms && t_ms <= check.window_end_ms() {
                check.u_rbs += own_rbs;
                check.u_bits += own_bits;
            }
        }
        let mut order: Vec<usize> = (0..self.checks.len()).collect();
        order.sort_by_key(|&i| self.checks[i].window_end_ms()); // stable, as Python's sorted
        let mut remove = vec![false; self.checks.len()];
        let mut verdict = None;
        for i in order {
            let check = &self.checks[i];
            if t_ms < check.window_end_ms() {
                continue;
            }
            let Some(limited) = check.limited_by_w_claw else {
                if t_ms >= check.expires_ms() {
                    self.counters.checks_unanswered += 1;
                    remove[i] = true;
                }
                continue;
            };
            remove[i] = true;
            if !limited {
                self.counters.checks_without_evidence += 1;
                continue;
            }
            if matches!(self.counted_end_ms, Some(end) if check.start_ms < end) {
                // Overlaps the last counted window: three verdicts must cover three windows.
                self.counters.checks_overlapping += 1;
                continue;
            }
            self.counted_end_ms = Some(check.window_end_ms());
            self.counters.verdicts += 1;
            // The detector's clock (its cache's 60 s) is the end of the judged window.
            let now_s = check.window_end_ms() as f64 / 1000.0;
            let (n_f, u_rbs, offered, received) =
                (check.n_f_rbs, check.u_rbs as f64, check.offered_bytes, check.u_bits as f64 / 8.0);
            verdict = Some(self.detectors.observe(now_s, n_f, u_rbs, offered, received));
        }
        let mut i = 0;
        self.checks.retain(|_| {
            i += 1;
            !remove[i - 1]
        });
        verdict
    }

    fn feedback(&mut self, t_ms: i64, estimate: &Estimate) -> Feedback {
        let (state, degraded) = self.detector_state();
        let wireline = self.uses_detector() && (degraded || state == Bottleneck::Wireline);
        let saturated = self.uses_hybrid() && self.saturation.saturated;
        let feedback = Feedback {
            ue_id: self.config.ue_id,
            seq: self.seq,
            diag_time_ms: t_ms,
            w_claw_bytes: estimate.w_claw_bytes,
            load: estimate.load,
            n_f_rbs: ((estimate.n_f_rbs + 0.5) as i64).min(estimate.n_t_rbs),
            n_t_rbs: estimate.n_t_rbs,
            window_ms: estimate.window_ms,
            saturated,
            wireline,
        };
        self.seq = self.seq.wrapping_add(1);
        self.counters.feedback += 1;
        feedback
    }
}

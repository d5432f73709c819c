"""One UE's CLAW client logic without I/O: diag messages and server echoes in; feedback
reports, loss events and per-subframe estimate rows out. The daemon (:mod:`.daemon`) does
the sockets, the BPF map and the log file around it; the offline replay (:mod:`.offline`)
drives the same object from a recorded diag file, so what is scored is what runs.

Timing is diag time (ms, t = 10·SFN + subframe unwrapped): the feedback period, the
window-by-window rules (saturation, bottleneck detector) and the detector cache's 60 s all
count subframes, so a run is reproducible from its feed.

Per subframe (closed when the first message about a later subframe arrives, so a
subframe's row holds every message of it whatever their order; 1 ms of latency):

1. the analyzer's estimate of the window ending there;
2. at the end of each window (every T ms since the connection started): the saturation
   rule observes N_I and N_t;
3. every pending bottleneck check adds the subframe's own RBs to its U while the subframe
   lies in the T_u subframes after the W_claw update that started it (T_u = the update's
   window, so U and N_f count the same number of subframes), and is judged once that
   window is over and the server's echo of the update's own report has arrived: the echo's
   flag says whether the server's flow was held back by the network (not by the
   application or the receiver) at CLAW's window throughout the server-side window whose
   data reached the UE in U's window. Flagged: the detector judges U against N_f, the
   smallest (as a rate) of the update's and of the earlier updates whose W_claw the server
   was applying while it sent that data. Not flagged: no verdict (nothing was offered at
   W_claw). No echo within another T_u: the check is dropped. See claw/DESIGN.md,
   Bottleneck detector;
4. when the feedback period has elapsed, or a bottleneck check is to start: a
   :class:`~clawbed.claw.feedback.Feedback` (never before the first downlink subframe,
   never while the radio is idle, never without any MCS known). While the server reports a
   flow to this UE (or the UE is scheduled in most subframes), checks run in two chains of
   back-to-back windows half a window apart, each started by a W_claw update of its own;
   otherwise a periodic update starts one when none is open. A verdict counts only if its
   window does not overlap the last counted one, so three consecutive verdicts cover three
   windows (claw/DESIGN.md, "Departure: the detector's cadence").
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from clawbed.claw.client.analyzer import (
    DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_WINDOW_MS,
    CellParams,
    Estimate,
    LoadAnalyzer,
    Variant,
    window_ms_from_srtt_us,
)
from clawbed.claw.client.detector import Bottleneck, DetectorCache, SaturationDetector
from clawbed.claw.client.feed import (
    MAC_DL_TRANSPORT_BLOCK,
    PDCP_DL_STATS,
    PDSCH_STAT,
    RLC_DL_STATS,
    SERV_CELL_MEASUREMENT,
    FeedDecoder,
    LossEvent,
    PdschSubframe,
)
from clawbed.claw.client.limits import MAX_FEEDBACK_PERIOD_MS, MIN_FEEDBACK_PERIOD_MS
from clawbed.claw.feedback import Echo, Feedback

#: Chains of back-to-back bottleneck checks while the UE downloads, offset by T / this: the
#: first window with evidence starts at most that long after the flow can give it
#: (claw/DESIGN.md, "Departure: the detector's cadence").
CHECK_CHAINS = 2
#: The UE counts as downloading (the chains start before the server's echo says so) when it
#: was scheduled in at least this many of the last ``RECEIVING_OF`` subframes: a ping or an
#: echo takes a subframe or two, a download nearly every one.
RECEIVING_SUBFRAMES, RECEIVING_OF = 5, 10
#: Recent W_claw updates kept to find the ones in force at the server during a check's
#: window (at least 2 T / period + 1: 201 at T = 10 s and a 100 ms period, more than enough
#: at any period for the windows that matter).
RECENT_UPDATES = 256


@dataclass(frozen=True)
class ClientConfig:
    """What one client needs to know (see the CLI for the defaults' reasons)."""

    #: The UE's id in feedback reports (0..65535).
    ue_id: int
    #: The cell's transmit antennas N_ant (1 or 2): from the cell configuration.
    n_antennas: int = 2
    #: The cell's N_rb; None: from the first measurement's RSRQ, RSRP and RSSI (Eq. 1).
    n_rb: int | None = None
    variant: Variant = Variant.CLAW
    #: Whether CLAW's wireline-bottleneck detector runs (§4.4). Off: the paper's "CLAW without
    #: detector" of Fig 14, which keeps W_claw and hybrid mode behind a wireline bottleneck.
    bottleneck_detector: bool = True
    #: Feedback period, ms of diag time (1: every subframe).
    feedback_period_ms: int = 100
    #: Without a scheduled subframe for this long, the radio counts as idle, ms.
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS
    #: The server agent's address: the key of the bottleneck detector's cache.
    server: str = ""
    #: Sequence number of the first report.
    first_seq: int = 1
    #: Where Eq. 7 is clamped to [0, 1]: the window's mean L (``window``, the default; see
    #: claw/DESIGN.md) or each r_k (``sample``, the spec's rule).
    clamp: str = "window"

    def __post_init__(self) -> None:
        if not 0 <= self.ue_id <= 0xFFFF:
            raise ValueError(f"ue_id {self.ue_id} outside 0..65535")
        if not MIN_FEEDBACK_PERIOD_MS <= self.feedback_period_ms <= MAX_FEEDBACK_PERIOD_MS:
            raise ValueError(f"feedback period {self.feedback_period_ms} ms outside "
                             f"{MIN_FEEDBACK_PERIOD_MS}..{MAX_FEEDBACK_PERIOD_MS}")
        if self.n_antennas not in (1, 2):
            raise ValueError(f"n_antennas {self.n_antennas} must be 1 or 2")
        if self.clamp not in ("window", "sample"):
            raise ValueError(f"clamp {self.clamp!r} must be 'window' or 'sample'")
        if not 0 <= self.first_seq <= 0xFFFFFFFF:
            raise ValueError(f"first_seq {self.first_seq} is not a u32")


@dataclass
class Row:
    """One closed subframe, as the estimates log records it."""

    t_ms: int
    #: Unix time of the subframe from the feed's ``timestamp`` (s), if it had one.
    unix_s: float | None
    active: bool
    estimate: Estimate | None
    saturated: bool
    bottleneck: Bottleneck
    degraded: bool
    #: The bottleneck verdict judged in this subframe, if any.
    verdict: Bottleneck | None = None
    #: Sequence number of the feedback sent in this subframe, if any.
    feedback_seq: int | None = None
    #: Loss events seen while this subframe was open.
    events: list[LossEvent] = field(default_factory=list)


@dataclass
class Step:
    """What one message caused."""

    rows: list[Row] = field(default_factory=list)
    feedback: list[Feedback] = field(default_factory=list)
    events: list[LossEvent] = field(default_factory=list)


@dataclass
class _Check:
    """A pending bottleneck check, started by the W_claw update (report ``seq``) sent in
    subframe ``start_ms``: U counts the own RBs of subframes start_ms+1 .. start_ms+window_ms."""

    start_ms: int
    #: The update's window T, ms: N_f's length, hence U's.
    window_ms: int
    #: N_f the window is judged against, RBs (see :meth:`ClientCore._reference`).
    n_f_rbs: float
    #: What the server surely offered over the window, bytes: the smallest W_claw in force,
    #: as a rate over the window (see :meth:`ClientCore._reference`).
    offered_bytes: float
    #: Sequence number of the update's report: its echo carries the check's evidence.
    seq: int
    #: U so far: own RBs (per subframe, summed) of the window's subframes closed so far.
    u_rbs: int = 0
    #: What those RBs carried, bits (the UE's transport blocks).
    u_bits: int = 0
    #: The echo's flag once it arrived: held back by the network at CLAW's window throughout.
    limited_by_w_claw: bool | None = None

    @property
    def window_end_ms(self) -> int:
        """The last subframe of U's window."""
        return self.start_ms + self.window_ms

    @property
    def expires_ms(self) -> int:
        """Without its echo by then, the check is dropped (the echo takes about one RTT ≈ T)."""
        return self.start_ms + 2 * self.window_ms


@dataclass
class Counters:
    """What the client did, for its exit report."""

    messages: int = 0
    subframes: int = 0
    feedback: int = 0
    echoes: int = 0
    echoes_other_ue: int = 0
    wireless_events: int = 0
    overflow_events: int = 0
    verdicts: int = 0
    #: Checks whose echo said the flow was not limited by CLAW's window: no verdict.
    checks_without_evidence: int = 0
    #: Checks whose echo never came: no verdict.
    checks_unanswered: int = 0
    #: Checks with evidence whose window overlapped the last counted verdict's: no verdict.
    checks_overlapping: int = 0
    bad_messages: int = 0


class ClientCore:
    """The client's logic for one UE (see the module docstring)."""

    def __init__(self, config: ClientConfig, *, detectors: DetectorCache | None = None) -> None:
        self.config = config
        self.decoder = FeedDecoder()
        self.analyzer: LoadAnalyzer | None = None
        self._early_pdsch: list[PdschSubframe] = []
        if config.n_rb is not None:
            self._make_analyzer(config.n_rb)
        self.detectors = detectors if detectors is not None else DetectorCache()
        self.saturation = SaturationDetector()
        self.counters = Counters()
        self._seq = config.first_seq
        self._open_t: int | None = None
        self._last_closed: int | None = None
        self._open_unix: float | None = None
        self._open_events: list[LossEvent] = []
        self._was_active = False
        self._window_end_ms: int | None = None
        self._last_feedback_ms: int | None = None
        #: Pending bottleneck checks, oldest first.
        self._checks: list[_Check] = []
        #: The end of the window of the last verdict counted, ms: a later check counts only
        #: if its window starts there or later.
        self._counted_end_ms: int | None = None
        #: The last echo reported a flow from the server to this UE (a window > 0).
        self._server_has_flow = False
        #: Whether the UE was scheduled, for the last RECEIVING_OF subframes.
        self._scheduled: deque[bool] = deque(maxlen=RECEIVING_OF)
        #: (diag time, N_f, window T, W_claw bytes) of the latest W_claw updates, oldest first.
        self._updates: deque[tuple[int, float, int, int]] = deque(maxlen=RECENT_UPDATES)
        self._window_ms = DEFAULT_WINDOW_MS

    # -- inputs ------------------------------------------------------------------------------

    def _make_analyzer(self, n_rb: int) -> None:
        self.analyzer = LoadAnalyzer(CellParams(n_rb, self.config.n_antennas), variant=self.config.variant,
                                     idle_timeout_ms=self.config.idle_timeout_ms, clamp=self.config.clamp)

    @property
    def uses_hybrid(self) -> bool:
        """CQIC has no hybrid (saturated-cell) mode."""
        return self.config.variant is Variant.CLAW

    @property
    def uses_detector(self) -> bool:
        """CQIC has no bottleneck detector; CLAW's can be switched off."""
        return self.config.variant is Variant.CLAW and self.config.bottleneck_detector

    @property
    def window_ms(self) -> int:
        """The window T in force, ms."""
        return self._window_ms

    def on_message(self, message: dict[str, Any]) -> Step:
        """Take one diag message (a MobileInsight-shaped dict)."""
        self.counters.messages += 1
        step = Step()
        kind = message.get("type_id")
        unix_s = message.get("timestamp")
        unix_s = float(unix_s) if isinstance(unix_s, (int, float)) else None
        if kind == PDSCH_STAT:
            for sf in self.decoder.pdsch(message):
                self._reach(sf.t_ms, unix_s, step)
                if self.analyzer is not None:
                    self.analyzer.add_subframe(sf.t_ms, sf.own_rbs, sf.mcs, sf.layers)
                else:
                    # N_rb comes with this subframe's measurement: keep the PDSCH until then.
                    self._early_pdsch = [p for p in self._early_pdsch if p.t_ms == sf.t_ms] + [sf]
        elif kind == SERV_CELL_MEASUREMENT:
            for m in self.decoder.measurements(message):
                if self.analyzer is None:
                    n_rb = m.n_rb()
                    if n_rb is None:
                        continue
                    self._make_analyzer(n_rb)
                    assert self.analyzer is not None
                    self.analyzer.set_window_ms(self._window_ms)
                    for sf in self._early_pdsch:
                        if sf.t_ms == m.t_ms:
                            self.analyzer.add_subframe(sf.t_ms, sf.own_rbs, sf.mcs, sf.layers)
                    self._early_pdsch = []
                self._reach(m.t_ms, unix_s, step)
                assert self.analyzer is not None
                self.analyzer.add_measurement(m.t_ms, m.rsrq_db, m.channel_mcs)
        elif kind == MAC_DL_TRANSPORT_BLOCK:
            at = self.decoder.subframe_of(message)
            if at is not None:
                self._reach(self.decoder.clock.unwrap(*at), unix_s, step)
        elif kind in (RLC_DL_STATS, PDCP_DL_STATS):
            for event in self.decoder.loss_events(message):
                step.events.append(event)
                self._open_events.append(event)
                if event.kind.value == "rlc-loss":
                    self.counters.wireless_events += 1
                else:
                    self.counters.overflow_events += 1
        return step

    def on_echo(self, echo: Echo) -> bool:
        """Take an authenticated server echo: its smoothed RTT becomes T; when it answers the
        report that started the pending bottleneck check, its cwnd-limited flag is that
        check's evidence. False (ignored) when it is for another UE."""
        if echo.ue_id != self.config.ue_id:
            self.counters.echoes_other_ue += 1
            return False
        self.counters.echoes += 1
        self._server_has_flow = echo.cwnd_packets > 0
        if echo.srtt_us > 0:
            self._window_ms = window_ms_from_srtt_us(echo.srtt_us)
            if self.analyzer is not None:
                self.analyzer.set_window_ms(self._window_ms)
        for check in self._checks:
            if echo.seq == check.seq:
                check.limited_by_w_claw = echo.cwnd_limited
        return True

    def finish(self) -> Step:
        """Close the subframe still open (the feed ended)."""
        step = Step()
        if self._open_t is not None:
            self._close(step)
        return step

    # -- state -------------------------------------------------------------------------------

    @property
    def detector_state(self) -> tuple[Bottleneck, bool]:
        """(bottleneck state, degraded) towards the configured server."""
        d = self.detectors.peek(self.config.server, self._now_s()) if self.uses_detector else None
        return (d.state, d.degraded) if d is not None else (Bottleneck.CELLULAR, False)

    def _now_s(self) -> float:
        t = self._open_t if self._open_t is not None else (self.decoder.clock.latest_ms or 0)
        return t / 1000.0

    # -- subframes ---------------------------------------------------------------------------

    def _reach(self, t_ms: int, unix_s: float | None, step: Step) -> None:
        """A message about subframe ``t_ms``: close the open subframe if this one is later."""
        if self._open_t is not None and t_ms > self._open_t:
            self._close(step)
        if self._open_t is None or t_ms > self._open_t:
            if self._open_t is None and self._last_closed is not None and t_ms <= self._last_closed:
                return  # a late message about a subframe already closed
            self._open_t, self._open_unix = t_ms, unix_s

    def _close(self, step: Step) -> None:
        t = self._open_t
        assert t is not None
        self._open_t = None
        self._last_closed = t
        self.counters.subframes += 1
        a = self.analyzer
        active = a is not None and a.active
        if not active and self._was_active:
            # The radio went idle: windows and checks start afresh with the next connection.
            self._window_end_ms = None
            self._checks = []
            self._counted_end_ms = None
            self._server_has_flow = False
            self._scheduled.clear()
            self._updates.clear()
            self.saturation.reset()
        self._was_active = active
        estimate = a.estimate() if a is not None else None
        verdict: Bottleneck | None = None
        seq: int | None = None
        if active and estimate is not None:
            assert a is not None  # active implies an analyzer
            window = estimate.window_ms
            if self._window_end_ms is None:
                self._window_end_ms = t + window
            elif t >= self._window_end_ms:
                if self.uses_hybrid:
                    self.saturation.observe(estimate.n_i_rbs, estimate.n_t_rbs)
                self._window_end_ms = t + window
            self._scheduled.append(a.own_rbs_at(t) > 0)
            window_ends_here = any(c.window_end_ms == t for c in self._checks)
            verdict = self._advance_checks(t)
            period_over = (self._last_feedback_ms is None
                           or t - self._last_feedback_ms >= self.config.feedback_period_ms)
            check_wanted = self.uses_detector and self._check_starts(t, window, window_ends_here, period_over)
            if estimate.mean_mcs is not None and (period_over or check_wanted):
                feedback = self._feedback(t, estimate)
                step.feedback.append(feedback)
                seq = feedback.seq
                self._last_feedback_ms = t
                if check_wanted:
                    n_f_rbs, offered_bytes = self._reference(t, window, estimate.n_f_rbs, estimate.w_claw_bytes)
                    self._checks.append(_Check(t, window, n_f_rbs, offered_bytes, feedback.seq))
                self._updates.append((t, estimate.n_f_rbs, window, estimate.w_claw_bytes))
        state, degraded = self.detector_state
        step.rows.append(Row(t, self._open_unix, active, estimate, self.saturation.saturated, state, degraded,
                             verdict, seq, self._open_events))
        self._open_events = []

    def _reference(self, t_ms: int, window_ms: int, n_f_rbs: float, w_claw_bytes: int) -> tuple[float, float]:
        """(N_f, the window offered in bytes) for a check started by the update at ``t_ms``
        (N_f ``n_f_rbs``, W_claw ``w_claw_bytes``, window T).

        The data that reaches the UE in the T after the update left the server in the T
        before the update's report reached it, under the W_claw of earlier updates: the last
        one sent at or before t − T and every one sent since. The smallest of their N_f and
        the update's is what the server offered for sure; a fresh connection's first,
        small W_claw (a window of a few subframes) then does not read as "wireline".
        Updates over another window T' are compared as rates: N_f' · T / T' (T grows with
        the queue behind a wired bottleneck, and a 70 ms N_f against a 140 ms U halves the
        ratio the detector judges). The bytes offered likewise: the smallest W_claw as a rate,
        W_claw' · T / T' (what the free RBs carry in T at the MCS and layers each update
        estimated).
        """
        reference, offered = n_f_rbs, float(w_claw_bytes)
        for sent_ms, n_f, update_window_ms, w_claw in reversed(self._updates):
            reference = min(reference, n_f * window_ms / update_window_ms)
            offered = min(offered, w_claw * window_ms / update_window_ms)
            if sent_ms <= t_ms - window_ms:
                break
        return reference, offered

    def _check_starts(self, t_ms: int, window_ms: int, window_ends_here: bool, period_over: bool) -> bool:
        """Whether a bottleneck check, with the report that starts it, begins at subframe
        ``t_ms`` (after the checks were advanced to it).

        While the server reports a flow to this UE, or the UE is being scheduled in most
        subframes (a download began; the echo saying so is an RTT away), checks run in two
        chains of back-to-back windows, half a window apart: one begins when none is open,
        when an open one's window ends here (its successor; two chains that meet here
        merge), and when only one is open and it began at least T / 2 ago (the second chain).
        Otherwise a periodic report starts one when none is open.
        """
        open_checks = [c for c in self._checks if c.window_end_ms > t_ms]
        if not (self._server_has_flow or sum(self._scheduled) >= RECEIVING_SUBFRAMES):
            return period_over and not open_checks
        if not open_checks or window_ends_here:
            return True
        return (len(open_checks) < CHECK_CHAINS
                and t_ms - open_checks[-1].start_ms >= -(-window_ms // CHECK_CHAINS))

    def _advance_checks(self, t_ms: int) -> Bottleneck | None:
        """Count subframe ``t_ms`` into the U of every pending check whose window holds it;
        judge or drop the checks that are due (see the module docstring, step 3), in the
        order their windows end; the last verdict judged, if any."""
        assert self.analyzer is not None
        own_rbs = self.analyzer.own_rbs_at(t_ms) if self._checks else 0
        own_bits = self.analyzer.own_bits_at(t_ms) if own_rbs else 0
        for check in self._checks:
            if check.start_ms < t_ms <= check.window_end_ms:
                check.u_rbs += own_rbs
                check.u_bits += own_bits
        verdict: Bottleneck | None = None
        for check in sorted(self._checks, key=lambda c: c.window_end_ms):
            if t_ms < check.window_end_ms:
                continue
            if check.limited_by_w_claw is None:
                if t_ms >= check.expires_ms:
                    self.counters.checks_unanswered += 1
                    self._checks.remove(check)
                continue
            self._checks.remove(check)
            if not check.limited_by_w_claw:
                self.counters.checks_without_evidence += 1
                continue
            if self._counted_end_ms is not None and check.start_ms < self._counted_end_ms:
                # Its window overlaps the last counted one: three consecutive verdicts must
                # cover three windows, not one stretch of the flow seen twice.
                self.counters.checks_overlapping += 1
                continue
            self._counted_end_ms = check.window_end_ms
            self.counters.verdicts += 1
            # The detector's clock (its cache's 60 s) is the end of the judged window.
            verdict = self.detectors.observe(self.config.server, check.window_end_ms / 1000.0, check.n_f_rbs,
                                             check.u_rbs, True, offered_bytes=check.offered_bytes,
                                             received_bytes=check.u_bits / 8)
        return verdict

    def _feedback(self, t_ms: int, estimate: Estimate) -> Feedback:
        state, degraded = self.detector_state
        wireline = self.uses_detector and (degraded or state is Bottleneck.WIRELINE)
        saturated = self.uses_hybrid and self.saturation.saturated
        feedback = Feedback(
            ue_id=self.config.ue_id, seq=self._seq, diag_time_ms=t_ms, w_claw_bytes=estimate.w_claw_bytes,
            load=estimate.load, n_f_rbs=min(int(estimate.n_f_rbs + 0.5), estimate.n_t_rbs),
            n_t_rbs=estimate.n_t_rbs, window_ms=estimate.window_ms, saturated=saturated, wireline=wireline,
        )
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        self.counters.feedback += 1
        return feedback

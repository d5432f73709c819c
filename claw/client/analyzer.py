"""The cellular load analyzer of CLAW (paper §4.2–4.3.1; ``docs/claw-spec.md``).

Per UE, over a sliding window of the last T subframes (T = the server-echoed smoothed RTT
in ms, 100 ms before the first echo):

- r_k from the RSRQ Q_k of each measurement (Eq. 7); L = the mean of the r_k measured
  in the window (Eq. 8), clamped to [0, 1]. **Departure** (``claw/DESIGN.md``, Client): the
  spec clamps each r_k; with RSRQ measurement noise that biases L towards 0.5 near an idle
  or a full cell (−0.05 at a load of 0.95 with 0.5 dB noise), so by default the mean is
  clamped instead (``clamp="sample"`` restores the spec's rule);
- N_t = N_rb · T, N_a = N_t · L, N_I = N_t − N_a, N_s = Σ S_k, N_f = min(N_s + N_I, N_t)
  (CQIC: N_f = min(N_s, N_t));
- the mean MCS of the subframes in the window where the UE was scheduled (else the last
  known MCS, else the channel-quality MCS the feed reports). **Departure**
  (``claw/DESIGN.md``, Client): a window with fewer than :data:`MIN_SCHEDULED_SUBFRAMES`
  scheduled subframes (an idle UE's, or a connection's first) takes the mean channel-quality MCS
  the feed reported over the window instead — the MCS of two or three subframes is as noisy
  as the channel itself and would set the first W_claw of a flow by luck;
- W_claw = T · TBS(I_TBS(mean MCS), round(N_f / T)) / 8 bytes, N_PRB clamped to [1, N_rb],
  the two-layer TBS when the feed reports two layers.

**Units:** resource blocks *per subframe* throughout (an RB pair per 1 ms subframe, not per
0.5 ms slot): a fully idle 50-RB cell over T = 100 ms has N_t = N_I = N_f = 5000. Times are
ms of diag time, t = 10·SFN + subframe unwrapped across the 10240 ms SFN cycle.

**Cost:** O(1) amortised per subframe. Subframes live in a ring indexed by t mod
:data:`RING_MS`, each slot tagged with its time, and the window keeps integer running sums
(loads in parts per billion), so sliding never re-sums, never drifts, and growing T back
over subframes still in the ring only adds the slots it uncovers.

**Idle:** the analyzer is frozen (it ignores the feed and keeps its last estimate) while
the radio is idle. It starts on the first downlink subframe of a connection — the first
subframe in which the UE is scheduled (a transport block on ``Num RBs`` > 0) — with an
empty window, and freezes again after ``idle_timeout_ms`` without a scheduled subframe
(the feed of this testbed has no RRC state; the default is LTE's ~10 s inactivity tail) or
when told so (:meth:`LoadAnalyzer.radio_idle`).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from clawbed import lte
from clawbed.claw.client.limits import DEFAULT_IDLE_TIMEOUT_MS as DEFAULT_IDLE_TIMEOUT_MS

#: Below this many scheduled subframes in the window, the mean MCS is the channel-quality
#: MCS's mean over the window (when the feed reports one); a tenth of the 100-ms default T.
MIN_SCHEDULED_SUBFRAMES = 10
#: Subframes kept, ms: at least the longest window the feedback can carry (10 s).
RING_MS = 16384
#: Longest window T, ms (the feedback's ``window_ms`` range).
MAX_WINDOW_MS = 10_000
#: Window before the server's first RTT echo, ms.
DEFAULT_WINDOW_MS = 100
#: SFN cycle, ms.
SFN_CYCLE_MS = lte.SFN_CYCLE * 10
#: Loads are summed as integers in these units (parts per billion) so running sums are exact.
_PPB = 1_000_000_000


class Variant(str, enum.Enum):
    """Which estimator: CLAW (own + idle RBs) or the CQIC baseline (own RBs only)."""

    CLAW = "claw"
    CQIC = "cqic"


@dataclass(frozen=True)
class CellParams:
    """The cell as configured: N_rb (RBs per subframe) and the BS's transmit antennas N_ant."""

    n_rb: int
    n_antennas: int

    def __post_init__(self) -> None:
        if self.n_rb not in lte.VALID_N_RB:
            raise ValueError(f"n_rb {self.n_rb} is not an LTE cell size ({sorted(lte.VALID_N_RB)})")
        if self.n_antennas not in (1, 2):
            raise ValueError(f"n_antennas {self.n_antennas} must be 1 or 2")


def load_from_rsrq_db(rsrq_db: float, n_antennas: int) -> float:
    """r_k, the fraction of the cell's RBs allocated in a subframe, from its RSRQ in dB
    (Eq. 7 with N_ref = 2·N_ant, N_subc = 12), clamped to [0, 1]. Scalar twin of
    :func:`clawbed.lte.load_from_rsrq` (no numpy: it runs every subframe)."""
    n_ref = 2 * n_antennas
    r = (10.0 ** (-rsrq_db / 10.0) - n_ref) / ((lte.N_SUBC - n_ref) * n_antennas)
    return 0.0 if r < 0.0 else 1.0 if r > 1.0 else r


def load_from_rsrq_db_unclamped(rsrq_db: float, n_antennas: int) -> float:
    """Eq. 7 without the clamp (measurement noise can put it outside [0, 1])."""
    n_ref = 2 * n_antennas
    return (10.0 ** (-rsrq_db / 10.0) - n_ref) / ((lte.N_SUBC - n_ref) * n_antennas)


def window_ms_from_srtt_us(srtt_us: int) -> int:
    """The window T, ms, for a smoothed RTT in µs: rounded to whole subframes, 1..10000."""
    return min(max(int(srtt_us / 1000.0 + 0.5), 1), MAX_WINDOW_MS)


class SfnClock:
    """Unwraps (SFN, subframe) into a monotone diag time t = 10·SFN + subframe + k·10240 ms.

    A step forward of less than half a cycle is a step forward (a wrap included); a step
    back of less than half a cycle is a late message about an earlier subframe, placed
    before the latest one without moving the clock.
    """

    def __init__(self) -> None:
        self._last_raw: int | None = None
        self._last_t = 0

    def unwrap(self, sfn: int, subframe: int) -> int:
        if not 0 <= sfn < lte.SFN_CYCLE or not 0 <= subframe <= 9:
            raise ValueError(f"SFN {sfn} / subframe {subframe} outside 0..{lte.SFN_CYCLE - 1} / 0..9")
        raw = 10 * sfn + subframe
        if self._last_raw is None:
            self._last_raw, self._last_t = raw, raw
            return raw
        delta = (raw - self._last_raw) % SFN_CYCLE_MS
        if delta > SFN_CYCLE_MS // 2:
            return self._last_t + delta - SFN_CYCLE_MS
        self._last_raw = raw
        self._last_t += delta
        return self._last_t

    @property
    def latest_ms(self) -> int | None:
        """The latest time unwrapped, or None before the first."""
        return None if self._last_raw is None else self._last_t


@dataclass(frozen=True)
class Estimate:
    """The analyzer's view of the window ending at ``t_ms`` (RBs are per-subframe RBs)."""

    #: Last subframe of the window, diag ms.
    t_ms: int
    #: Window length T, ms.
    window_ms: int
    #: RSRQ measurements in the window (K of Eq. 8); 0: L is the last measured r_k.
    samples: int
    #: Subframes of the window in which the UE was scheduled.
    scheduled_subframes: int
    #: Cell load L (Eq. 8), 0..1.
    load: float
    #: N_t = N_rb · T.
    n_t_rbs: int
    #: N_a = N_t · L.
    n_a_rbs: float
    #: N_I = N_t − N_a.
    n_i_rbs: float
    #: N_s = Σ S_k, the UE's own RBs in the window.
    n_s_rbs: int
    #: N_f = min(N_s + N_I, N_t) (CQIC: min(N_s, N_t)).
    n_f_rbs: float
    #: The MCS used for W_claw (a mean over scheduled subframes, or a fallback), or None
    #: when no MCS is known yet (then W_claw is 0 and must not be sent).
    mean_mcs: float | None
    #: Where ``mean_mcs`` came from: ``window`` (scheduled subframes), ``channel-window`` (the
    #: channel-quality MCS over the window, when few were scheduled), ``last``, ``channel``
    #: (the last channel-quality MCS) or ``none``.
    mcs_source: str
    #: Spatial layers used for the TBS (1 or 2).
    layers: int
    #: N_PRB = round(N_f / T) clamped to [1, N_rb].
    n_prb: int
    #: W_claw = T · TBS(I_TBS(mean MCS), N_PRB) / 8, bytes.
    w_claw_bytes: int

    def cwnd_packets(self, mss_bytes: int) -> int:
        """The congestion window W_claw stands for, packets: ceil(W_claw / MSS)."""
        return -(-self.w_claw_bytes // mss_bytes)


class LoadAnalyzer:
    """One UE's cellular load analyzer (see the module docstring).

    Feed it, in any order within a subframe, :meth:`add_subframe` (the UE's PDSCH: own RBs,
    MCS, layers) and :meth:`add_measurement` (RSRQ); read :meth:`estimate` whenever needed.
    """

    def __init__(self, cell: CellParams, *, variant: Variant = Variant.CLAW,
                 window_ms: int = DEFAULT_WINDOW_MS, idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
                 clamp: str = "window") -> None:
        if clamp not in ("sample", "window"):
            raise ValueError(f"clamp {clamp!r} must be 'sample' or 'window'")
        self.clamp = clamp
        if idle_timeout_ms < 1:
            raise ValueError(f"idle_timeout_ms {idle_timeout_ms} must be at least 1")
        self.cell = cell
        self.variant = Variant(variant)
        self.idle_timeout_ms = idle_timeout_ms
        self._window_ms = self._checked_window(window_ms)
        # TBS bits by [layers][mcs][n_prb], as nested lists: a list index is cheaper per
        # subframe than a numpy scalar lookup.
        self._tbs = {layers: lte.tbs_grid(cell.n_rb, layers).tolist() for layers in (1, 2)}
        # The ring: per slot, the time it holds (-1: none), and that subframe's data.
        self._slot_t = [-1] * RING_MS
        self._meas_t = [-1] * RING_MS          # time of the slot's measurement (-1: none)
        self._r_ppb = [0] * RING_MS
        self._own_rbs = [0] * RING_MS
        self._mcs = [-1] * RING_MS             # -1: not scheduled (or an MCS outside 0..28)
        self._chan_mcs = [-1] * RING_MS        # channel-quality MCS measured (-1: none)
        self._two_layers = [False] * RING_MS
        self.active = False
        self._epoch_ms = 0                     # first subframe of the current connection
        self._hi = -1                          # latest subframe, diag ms
        self._lo = 0                           # first subframe in the window
        self._last_scheduled_ms = 0
        self._reset_sums()
        # Fallbacks that survive windows and connections.
        self._last_r: float | None = None
        self._last_mcs: int | None = None
        self._channel_mcs: int | None = None
        self._last_layers = 1
        self._last_estimate: Estimate | None = None

    # -- configuration -----------------------------------------------------------------------

    @staticmethod
    def _checked_window(window_ms: int) -> int:
        if not 1 <= window_ms <= MAX_WINDOW_MS:
            raise ValueError(f"window {window_ms} ms outside 1..{MAX_WINDOW_MS}")
        return int(window_ms)

    @property
    def window_ms(self) -> int:
        """The window T, ms."""
        return self._window_ms

    def set_window_ms(self, window_ms: int) -> None:
        """Change T (e.g. from a new server echo). Growing T re-includes the subframes of
        this connection still in the ring; shrinking it drops the oldest."""
        self._window_ms = self._checked_window(window_ms)
        if self.active:
            self._move_lo(self._hi - self._window_ms + 1)

    def set_srtt_us(self, srtt_us: int) -> None:
        """T from the server's smoothed RTT (µs)."""
        self.set_window_ms(window_ms_from_srtt_us(srtt_us))

    # -- input -------------------------------------------------------------------------------

    def add_subframe(self, t_ms: int, own_rbs: int, mcs: int | None, layers: int = 1) -> None:
        """The UE's PDSCH in subframe ``t_ms``: its RBs S_k (0 when not scheduled), the MCS
        of its transport block (None when it had none) and the spatial layers reported."""
        self._last_layers = 2 if layers == 2 else 1
        scheduled = own_rbs > 0 and mcs is not None
        if not self.active:
            if not scheduled:
                return
            self._start(t_ms)
        elif scheduled is False and t_ms - self._last_scheduled_ms >= self.idle_timeout_ms:
            self.radio_idle()
            return
        if t_ms > self._hi:
            self._advance(t_ms)
        if t_ms <= self._hi - RING_MS or t_ms < self._epoch_ms:
            return  # older than anything kept
        i = t_ms % RING_MS
        self._claim(i, t_ms)
        in_window = t_ms >= self._lo
        if in_window:
            self._sum_s -= self._own_rbs[i]
            if self._mcs[i] >= 0:
                self._sum_mcs -= self._mcs[i]
                self._n_sched -= 1
                self._n_two -= self._two_layers[i]
        valid_mcs = scheduled and 0 <= mcs <= lte.MAX_MCS  # type: ignore[operator]
        self._own_rbs[i] = max(own_rbs, 0)
        self._mcs[i] = mcs if valid_mcs else -1  # type: ignore[assignment]
        self._two_layers[i] = layers == 2
        if in_window:
            self._sum_s += self._own_rbs[i]
            if valid_mcs:
                self._sum_mcs += mcs  # type: ignore[operator]
                self._n_sched += 1
                self._n_two += layers == 2
        if scheduled:
            self._last_scheduled_ms = max(self._last_scheduled_ms, t_ms)
            if valid_mcs:
                self._last_mcs = mcs

    def add_measurement(self, t_ms: int, rsrq_db: float, channel_mcs: int | None = None) -> None:
        """An RSRQ measurement (dB) made in subframe ``t_ms``, with the channel-quality MCS
        the feed reported with it (None: none)."""
        if channel_mcs is not None and not 0 <= channel_mcs <= lte.MAX_MCS:
            channel_mcs = None
        if channel_mcs is not None:
            self._channel_mcs = channel_mcs
        r = load_from_rsrq_db(rsrq_db, self.cell.n_antennas) if self.clamp == "sample" else \
            load_from_rsrq_db_unclamped(rsrq_db, self.cell.n_antennas)
        if not self.active:
            return
        if t_ms > self._hi:
            self._advance(t_ms)
        if t_ms <= self._hi - RING_MS or t_ms < self._epoch_ms:
            return
        self._last_r = r
        i = t_ms % RING_MS
        self._claim(i, t_ms)
        ppb = int(r * _PPB + 0.5)
        in_window = t_ms >= self._lo
        if in_window and self._meas_t[i] == t_ms:
            self._sum_r -= self._r_ppb[i]
            self._n_meas -= 1
            if self._chan_mcs[i] >= 0:
                self._sum_chan -= self._chan_mcs[i]
                self._n_chan -= 1
        self._meas_t[i] = t_ms
        self._r_ppb[i] = ppb
        self._chan_mcs[i] = -1 if channel_mcs is None else channel_mcs
        if in_window:
            self._sum_r += ppb
            self._n_meas += 1
            if channel_mcs is not None:
                self._sum_chan += channel_mcs
                self._n_chan += 1

    def radio_idle(self) -> None:
        """Freeze: the radio went idle. The next scheduled subframe starts a fresh window."""
        if self.active:
            self._last_estimate = self._compute()
        self.active = False

    # -- output ------------------------------------------------------------------------------

    def estimate(self) -> Estimate | None:
        """The estimate of the current window (O(1)); while frozen, the last one made before
        the radio went idle; None before the first downlink subframe."""
        if not self.active:
            return self._last_estimate
        return self._compute()

    def own_rbs_at(self, t_ms: int) -> int:
        """S_k of subframe ``t_ms``, RBs: 0 when the UE was not scheduled then, or when the
        subframe is not held (before this connection, or older than the ring)."""
        i = t_ms % RING_MS
        return self._own_rbs[i] if self.active and self._valid(i, t_ms) else 0

    def own_bits_at(self, t_ms: int) -> int:
        """What the UE's transport block of subframe ``t_ms`` carried, bits: the TBS of its
        MCS, RBs and layers (the PDSCH record's TB size); 0 when it was not scheduled, or
        with a reserved MCS (29–31: a retransmission), or when the subframe is not held."""
        i = t_ms % RING_MS
        if not (self.active and self._valid(i, t_ms)) or self._mcs[i] < 0 or self._own_rbs[i] <= 0:
            return 0
        return self.tbs_bits(self._mcs[i], self._own_rbs[i], 2 if self._two_layers[i] else 1)

    def tbs_bits(self, mcs: int, n_prb: int, layers: int = 1) -> int:
        """TBS bits for MCS ``mcs`` on ``n_prb`` PRBs clamped to [1, N_rb] (the capacity
        formula's F), ``layers`` 1 or 2."""
        n = min(max(n_prb, 1), self.cell.n_rb)
        return self._tbs[2 if layers == 2 else 1][min(max(mcs, 0), lte.MAX_MCS)][n]

    # -- internals ---------------------------------------------------------------------------

    def _reset_sums(self) -> None:
        self._sum_r = 0      # Σ r_k, ppb, over the window's measurements
        self._n_meas = 0     # K
        self._sum_s = 0      # Σ S_k
        self._sum_mcs = 0    # Σ MCS over scheduled subframes
        self._n_sched = 0    # scheduled subframes with a valid MCS
        self._n_two = 0      # ... of which two-layer
        self._sum_chan = 0   # Σ channel-quality MCS over the window's measurements
        self._n_chan = 0     # ... measurements that carried one

    def _start(self, t_ms: int) -> None:
        """A connection starts at ``t_ms``: an empty window from there."""
        self.active = True
        self._epoch_ms = t_ms
        self._hi = t_ms - 1
        self._lo = t_ms
        self._last_scheduled_ms = t_ms
        self._reset_sums()

    def _claim(self, i: int, t_ms: int) -> None:
        """Make slot ``i`` hold subframe ``t_ms`` (clearing what an older time left there)."""
        if self._slot_t[i] != t_ms:
            self._slot_t[i] = t_ms
            self._meas_t[i] = -1
            self._chan_mcs[i] = -1
            self._own_rbs[i] = 0
            self._mcs[i] = -1
            self._two_layers[i] = False

    def _valid(self, i: int, t_ms: int) -> bool:
        return self._slot_t[i] == t_ms and t_ms >= self._epoch_ms

    def _advance(self, t_ms: int) -> None:
        """Slide the window's end forward to ``t_ms``."""
        old_hi, self._hi = self._hi, t_ms
        self._move_lo(t_ms - self._window_ms + 1, old_hi)

    def _move_lo(self, new_lo: int, old_hi: int | None = None) -> None:
        """Move the window's start to ``new_lo``, adding or removing the slots crossed.
        ``old_hi``: the window's end before an advance (nothing later was ever counted)."""
        old_hi = self._hi if old_hi is None else old_hi
        new_lo = max(new_lo, self._epoch_ms, self._hi - RING_MS + 1)
        lo = self._lo
        if new_lo > lo:
            if new_lo > old_hi:
                self._reset_sums()  # the whole old window fell out (a gap in the feed)
            else:
                for u in range(lo, new_lo):
                    self._account(u, -1)
        elif new_lo < lo:
            for u in range(new_lo, lo):
                self._account(u, +1)
        self._lo = new_lo

    def _account(self, u: int, sign: int) -> None:
        i = u % RING_MS
        if not self._valid(i, u):
            return
        self._sum_s += sign * self._own_rbs[i]
        if self._mcs[i] >= 0:
            self._sum_mcs += sign * self._mcs[i]
            self._n_sched += sign
            self._n_two += sign * self._two_layers[i]
        if self._meas_t[i] == u:
            self._sum_r += sign * self._r_ppb[i]
            self._n_meas += sign
            if self._chan_mcs[i] >= 0:
                self._sum_chan += sign * self._chan_mcs[i]
                self._n_chan += sign

    def _compute(self) -> Estimate:
        window = self._window_ms
        n_rb = self.cell.n_rb
        if self._n_meas:
            load = self._sum_r / self._n_meas / _PPB
        else:
            load = self._last_r if self._last_r is not None else 0.0
        load = 0.0 if load < 0.0 else 1.0 if load > 1.0 else load
        n_t = n_rb * window
        n_a = n_t * load
        n_i = n_t - n_a
        n_s = self._sum_s
        # A window that has not filled yet (a connection's first T ms) has seen only
        # `elapsed` subframes of the UE's own allocation while N_t, N_a and N_I are already
        # for the whole window: the own share is extrapolated at its observed rate, or a
        # fresh connection would get a W_claw of a few subframes' worth (claw/DESIGN.md).
        elapsed = self._hi - self._lo + 1
        n_s_window = n_s * window / elapsed if 0 < elapsed < window else float(n_s)
        n_f = float(min(n_s_window + n_i, n_t)) if self.variant is Variant.CLAW else float(min(n_s_window, n_t))
        layers = (2 if 2 * self._n_two > self._n_sched else 1) if self._n_sched else self._last_layers
        mean_mcs: float | None
        if self._n_sched < MIN_SCHEDULED_SUBFRAMES and self._n_chan:
            mean_mcs, source = self._sum_chan / self._n_chan, "channel-window"
        elif self._n_sched:
            mean_mcs, source = self._sum_mcs / self._n_sched, "window"
        else:
            if self._last_mcs is not None:
                mean_mcs, source = float(self._last_mcs), "last"
            elif self._channel_mcs is not None:
                mean_mcs, source = float(self._channel_mcs), "channel"
            else:
                mean_mcs, source = None, "none"
        n_prb = min(max(int(math.floor(n_f / window + 0.5)), 1), n_rb)
        if mean_mcs is None:
            w_claw = 0
        else:
            mcs = min(max(int(math.floor(mean_mcs + 0.5)), 0), lte.MAX_MCS)
            w_claw = window * self._tbs[layers][mcs][n_prb] // 8
        return Estimate(
            t_ms=self._hi, window_ms=window, samples=self._n_meas, scheduled_subframes=self._n_sched,
            load=load, n_t_rbs=n_t, n_a_rbs=n_a, n_i_rbs=n_i, n_s_rbs=n_s, n_f_rbs=n_f,
            mean_mcs=mean_mcs, mcs_source=source, layers=layers, n_prb=n_prb, w_claw_bytes=w_claw,
        )

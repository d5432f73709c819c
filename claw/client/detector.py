"""CLAW's network bottleneck detector (paper §4.4) and the channel-saturation rule (§4.3.1),
as ``docs/claw-spec.md`` settles them. Pure state machines: no clock of their own
(callers pass times), no I/O.

Bottleneck detector, once per window: U = N_s of the window that follows a W_claw update;
if the server reported the flow "cwnd-limited" in that window (held back by the network at
CLAW's window: claw/DESIGN.md) and U < δ·N_f (δ = 0.8, N_f of the update), the verdict is
"wireline", else "cellular". Three consecutive equal verdicts switch the state. Verdicts
that alternate for six consecutive windows (c, w, c, w, c, w) mean the two bottlenecks are
comparable: the client degrades to plain Cubic for that server (it reports "wireline" from
then on, so the server runs its Cubic window) until the cached state expires. The state
is cached per server address for 60 s after its last use.

Saturation: the channel is saturated when the idle RBs N_I were below 5 % of N_t in each of
the last two consecutive windows; one window at or above 5 % clears it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

#: δ: U below this fraction of N_f, and the bytes received below this fraction of the
#: window offered (while the flow was held back by the network), is a wireline verdict.
DELTA = 0.8
#: Consecutive equal verdicts that switch the state.
SWITCH_AFTER = 3
#: Consecutive alternating verdicts that degrade to plain Cubic.
DEGRADE_AFTER = 6
#: How long a server's detector state is kept after its last use, s.
CACHE_TTL_S = 60.0
#: Idle RBs below this fraction of N_t make a window "saturated".
SATURATION_IDLE_FRACTION = 0.05
#: Consecutive saturated windows that declare saturation.
SATURATION_WINDOWS = 2


class Bottleneck(str, enum.Enum):
    """Where the path's bottleneck is."""

    CELLULAR = "cellular"
    WIRELINE = "wireline"


def verdict(n_f_rbs: float, u_rbs: float, cwnd_limited: bool, delta: float = DELTA, *,
            offered_bytes: float | None = None, received_bytes: float | None = None) -> Bottleneck:
    """One window's verdict: wireline iff the flow was cwnd-limited (held back by the
    network) and used U < δ·N_f RBs (RBs per subframe, summed over the window) and, when
    given, received fewer than δ·``offered_bytes`` (the window the server offered) in it
    (claw/DESIGN.md, "Departure: U in bytes too")."""
    short_of_rbs = u_rbs < delta * n_f_rbs
    short_of_bytes = offered_bytes is None or received_bytes is None or received_bytes < delta * offered_bytes
    return Bottleneck.WIRELINE if cwnd_limited and short_of_rbs and short_of_bytes else Bottleneck.CELLULAR


class BottleneckDetector:
    """One server's bottleneck state (starts cellular)."""

    def __init__(self, *, delta: float = DELTA, switch_after: int = SWITCH_AFTER,
                 degrade_after: int = DEGRADE_AFTER) -> None:
        if switch_after < 1 or degrade_after < 2:
            raise ValueError("switch_after must be ≥ 1 and degrade_after ≥ 2")
        self.delta = delta
        self.switch_after = switch_after
        self.degrade_after = degrade_after
        self.state = Bottleneck.CELLULAR
        #: Once set, the client runs plain Cubic towards this server (reports wireline).
        self.degraded = False
        self.last_verdict: Bottleneck | None = None
        self._same_run = 0
        self._alternating_run = 0
        self.verdicts = 0

    @property
    def wireline(self) -> bool:
        """What the feedback's bottleneck flag says: wireline state, or degraded to Cubic."""
        return self.degraded or self.state is Bottleneck.WIRELINE

    def observe(self, n_f_rbs: float, u_rbs: float, cwnd_limited: bool, *, offered_bytes: float | None = None,
                received_bytes: float | None = None) -> Bottleneck:
        """Judge one window (N_f of the update, U of the window after it, the server's
        cwnd-limited flag for that window, and optionally the window the server offered and
        the bytes the UE received, see :func:`verdict`); update the state; return the verdict."""
        v = verdict(n_f_rbs, u_rbs, cwnd_limited, self.delta, offered_bytes=offered_bytes,
                    received_bytes=received_bytes)
        self.verdicts += 1
        if self.last_verdict is None:
            self._same_run, self._alternating_run = 1, 1
        elif v is self.last_verdict:
            self._same_run += 1
            self._alternating_run = 1
        else:
            self._same_run = 1
            self._alternating_run += 1
        self.last_verdict = v
        if self.degraded:
            return v
        if self._same_run >= self.switch_after:
            self.state = v
        if self._alternating_run >= self.degrade_after:
            self.degraded = True
        return v


@dataclass
class _Entry:
    detector: BottleneckDetector
    touched_s: float


@dataclass
class DetectorCache:
    """Bottleneck detectors per server address, each forgotten ``ttl_s`` after its last use
    (so a new session to the same server within that time reuses the verdict)."""

    ttl_s: float = CACHE_TTL_S
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def get(self, server: str, now_s: float) -> BottleneckDetector:
        """The detector for ``server`` (a fresh one if none is cached or it expired); using
        it counts as a use."""
        entry = self._entries.get(server)
        if entry is None or now_s - entry.touched_s >= self.ttl_s:
            entry = _Entry(BottleneckDetector(), now_s)
            self._entries[server] = entry
        entry.touched_s = now_s
        return entry.detector

    def peek(self, server: str, now_s: float) -> BottleneckDetector | None:
        """``server``'s detector if cached and not expired, without counting as a use."""
        entry = self._entries.get(server)
        if entry is None or now_s - entry.touched_s >= self.ttl_s:
            return None
        return entry.detector

    def observe(self, server: str, now_s: float, n_f_rbs: float, u_rbs: float, cwnd_limited: bool, *,
                offered_bytes: float | None = None, received_bytes: float | None = None) -> Bottleneck:
        """:meth:`BottleneckDetector.observe` on ``server``'s detector."""
        return self.get(server, now_s).observe(n_f_rbs, u_rbs, cwnd_limited, offered_bytes=offered_bytes,
                                               received_bytes=received_bytes)

    def expire(self, now_s: float) -> None:
        """Drop every entry unused for ``ttl_s``."""
        for server in [s for s, e in self._entries.items() if now_s - e.touched_s >= self.ttl_s]:
            del self._entries[server]

    def __contains__(self, server: str) -> bool:
        return server in self._entries

    def __len__(self) -> int:
        return len(self._entries)


class SaturationDetector:
    """Saturated when N_I < 5 % of N_t in the last two consecutive windows."""

    def __init__(self, *, idle_fraction: float = SATURATION_IDLE_FRACTION,
                 windows: int = SATURATION_WINDOWS) -> None:
        if windows < 1:
            raise ValueError("windows must be ≥ 1")
        self.idle_fraction = idle_fraction
        self.windows = windows
        self._streak = 0
        self.saturated = False

    def observe(self, n_i_rbs: float, n_t_rbs: float) -> bool:
        """Judge one window; return whether the channel now counts as saturated."""
        if n_i_rbs < self.idle_fraction * n_t_rbs:
            self._streak += 1
        else:
            self._streak = 0
        self.saturated = self._streak >= self.windows
        return self.saturated

    def reset(self) -> None:
        self._streak = 0
        self.saturated = False

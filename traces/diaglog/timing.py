"""Placing (SFN, subframe) events on one millisecond time line.

An LTE cell numbers subframes ``SFN × 10 + subframe``, wrapping every 10 240 ms. A log
gives each event that number and a clock time (diag timestamp, or a sniffer's Unix time).
The clock is coarse: a diag log's packet timestamps stray up to ~±170 ms from the SFN time
of their records (the 2017 shared log; the modem batches packets).
:class:`SfnClock` keeps the SFN's exact spacing and uses the clock only to
count wraps: it anchors ``offset_ms`` (clock ms − SFN ms) on the first event and places each
later one at the SFN time, of all its 10 240-ms aliases, nearest to its clock time. When an
event lies more than :data:`REANCHOR_MS` from where the anchor puts it (a handover to a cell
with other SFN timing, a clock step), it re-anchors there and counts it.
"""

from __future__ import annotations

from dataclasses import dataclass

SFN_PERIOD_MS = 10_240
HALF_PERIOD_MS = SFN_PERIOD_MS // 2
#: Largest disagreement between an event's clock time and its SFN time (anchored) taken as
#: timestamp jitter; beyond it the SFN timing has changed (a handover, a clock step) and the
#: clock re-anchors. Well above the jitter, well below half the SFN period.
REANCHOR_MS = 1000


@dataclass
class SfnClock:
    """Maps (clock ms, SFN ms) pairs to absolute ms on the clock's scale, SFN-exact."""

    offset_ms: int | None = None
    reanchors: int = 0

    def place(self, clock_ms: float, sfn_ms: int) -> int:
        """Absolute ms (clock scale) of the event numbered ``sfn_ms`` (0..10239) seen at
        ``clock_ms``."""
        if self.offset_ms is None:
            self.offset_ms = round(clock_ms) - sfn_ms
            return round(clock_ms)
        base = self.offset_ms + sfn_ms
        # The alias base + k·10240 nearest to clock_ms.
        k = round((clock_ms - base) / SFN_PERIOD_MS)
        t = base + k * SFN_PERIOD_MS
        if abs(clock_ms - t) > REANCHOR_MS:
            self.reanchors += 1
            self.offset_ms = round(clock_ms) - sfn_ms
            return round(clock_ms)
        return t

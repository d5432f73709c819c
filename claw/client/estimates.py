"""The client's estimates log: one CSV row per subframe (or per period), to be scored
against the emulator's ground truth.

Columns (RBs are per-subframe RBs summed over the window; times ms of diag time):

=============  ==============================================================================
t_ms           last subframe of the window, diag time (10·SFN + subframe, unwrapped)
unix_s         Unix time of that subframe from the feed's ``timestamp`` (aligns with truth)
active         1 while the analyzer runs (a connection), 0 while frozen / before the first
window_ms      T
samples        RSRQ measurements in the window (K)
load           L
n_t_rbs        N_t = N_rb · T
n_a_rbs        N_a = N_t · L
n_i_rbs        N_I = N_t − N_a
n_s_rbs        N_s = Σ S_k
n_f_rbs        N_f
mean_mcs       the MCS used for W_claw (empty when none is known)
mcs_source     window | last | channel | none
layers         1 or 2
n_prb          round(N_f / T) clamped to [1, N_rb]
w_claw_bytes   W_claw
saturated      1 when the saturation rule holds
bottleneck     cellular | wireline (the detector's state)
degraded       1 when degraded to plain Cubic for the server
verdict        the bottleneck verdict judged in this subframe (empty: none)
feedback_seq   sequence number of the report sent in this subframe (empty: none)
events         loss events in this subframe: ``rlc-loss:N``/``overflow:N`` joined by ``;``
=============  ==============================================================================

Rows are flushed every :data:`FLUSH_ROWS` rows (and after the first), so an interrupted run loses at most that
many; a last line cut short is skipped by :func:`read_estimates`.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import IO

import numpy as np

from clawbed.claw.client.core import Row

COLUMNS = ("t_ms", "unix_s", "active", "window_ms", "samples", "load", "n_t_rbs", "n_a_rbs", "n_i_rbs",
           "n_s_rbs", "n_f_rbs", "mean_mcs", "mcs_source", "layers", "n_prb", "w_claw_bytes", "saturated",
           "bottleneck", "degraded", "verdict", "feedback_seq", "events")
#: Rows between flushes (100 ms of subframes).
FLUSH_ROWS = 100
_TEXT_COLUMNS = {"mcs_source", "bottleneck", "verdict", "events"}


class EstimateLog:
    """Writes :class:`~clawbed.claw.client.core.Row` objects as CSV.

    ``period_ms`` 1 logs every subframe; a longer period logs one row per period plus every
    row with a verdict, a feedback report or a loss event.
    """

    def __init__(self, path: Path | str, *, period_ms: int = 1) -> None:
        if period_ms < 1:
            raise ValueError(f"log period {period_ms} ms must be at least 1")
        self.path = Path(path)
        self.period_ms = period_ms
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f: IO[str] | None = self.path.open("w", newline="")
        self._f.write(",".join(COLUMNS) + "\n")
        self._pending = 0
        self._last_t: int | None = None
        self.rows = 0

    def write(self, row: Row) -> None:
        if self._f is None:
            raise ValueError(f"estimates log {self.path} is closed")
        notable = row.verdict is not None or row.feedback_seq is not None or row.events
        if (self.period_ms > 1 and not notable and self._last_t is not None
                and row.t_ms - self._last_t < self.period_ms):
            return
        self._last_t = row.t_ms
        e = row.estimate
        unix = "" if row.unix_s is None else f"{row.unix_s:.6f}"
        if e is None:
            fields = [str(row.t_ms), unix, str(int(row.active))] + [""] * 13
        else:
            fields = [str(row.t_ms), unix, str(int(row.active)), str(e.window_ms), str(e.samples), f"{e.load:.6f}",
                      str(e.n_t_rbs), f"{e.n_a_rbs:.3f}", f"{e.n_i_rbs:.3f}", str(e.n_s_rbs), f"{e.n_f_rbs:.3f}",
                      "" if e.mean_mcs is None else f"{e.mean_mcs:.4f}", e.mcs_source, str(e.layers), str(e.n_prb),
                      str(e.w_claw_bytes)]
        events = ";".join(f"{ev.kind.value}:{ev.count}" for ev in row.events)
        fields += [str(int(row.saturated)), row.bottleneck.value, str(int(row.degraded)),
                   "" if row.verdict is None else row.verdict.value,
                   "" if row.feedback_seq is None else str(row.feedback_seq), events]
        self._f.write(",".join(fields) + "\n")
        self.rows += 1
        self._pending += 1
        # The first row at once: a scheme takes the client as ready when its log has one.
        if self._pending >= FLUSH_ROWS or self.rows == 1:
            self.flush()

    def flush(self) -> None:
        if self._f is not None:
            self._f.flush()
            self._pending = 0

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> EstimateLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_estimates(path: Path | str) -> dict[str, np.ndarray]:
    """The log as columns: numbers as float64 (empty → NaN), text columns as str arrays."""
    path = Path(path)
    with path.open(newline="") as f:
        text = f.read()
    if text and not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]  # an interrupted writer's last, partial line
    rows = list(csv.reader(text.splitlines()))
    if not rows or tuple(rows[0]) != COLUMNS:
        raise ValueError(f"{path}: not a CLAW estimates log (header {rows[0] if rows else 'missing'})")
    body = rows[1:]
    out: dict[str, np.ndarray] = {}
    for j, name in enumerate(COLUMNS):
        values = [r[j] if j < len(r) else "" for r in body]
        if name in _TEXT_COLUMNS:
            out[name] = np.array(values, dtype=str)
        else:
            out[name] = np.array([float(v) if v != "" else np.nan for v in values], dtype=np.float64)
    return out

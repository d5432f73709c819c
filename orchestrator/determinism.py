"""The emulator's own regression check: the same trace and seed give the same ground truth.

PLT noise hides a small change to the cell model; the ground truth does not. Each build
(``clawbed-emu`` of the base and of the candidate) runs the same short scenarios on a real
cell (namespaces, TUNs, the real-time clock: the emulator has no offline mode), and the
two builds' ``truth.cbcol`` files are compared:

* **idle** — the trace, the seed, no traffic, :data:`IDLE_S` of emulated time
  (``duration_s``: the emulator stops itself, so both files have the same rows). With nothing
  queued no output depends on when a subframe ran, so every ground-truth column but the
  data plane's ``wake_lateness_us`` (wall-clock quality) must be **equal value for value**:
  the channel (MCS, layers), the other users' demand and allocation, RSRQ, RRC/DRX states.
* **flow** — the same, with a constant-rate UDP flow (:data:`FLOW_RATE`, more than the cell
  carries, so the base station's queue stays backlogged) from the core to the UE. When each
  packet arrives is wall-clock, so what is compared is the **delivered schedule**: over the
  subframes in which the queue was backlogged on both builds, the bytes delivered to the UE
  and the transport blocks' bits (:data:`SCHEDULE_COLUMNS`), summed, which must agree within
  :data:`SCHEDULE_TOLERANCE`; the trace-driven columns (:data:`FLOW_EXACT_COLUMNS`) must be
  equal throughout.

Each build is configured by its own revision's code (the run happens in that side's process,
``orchestrator/ab_side.py``: a config key one revision adds is not the other's to read) with
the same trace file and seed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clawbed.emulator.truth import Truth, read_truth
from clawbed.paths import REPO_ROOT

DEFAULT_TRACE = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
DEFAULT_SEED = 1
#: Emulated time of each scenario, s.
IDLE_S = 3.0
FLOW_S = 4.0
#: The flow's rate (IP bit/s): more than the busy-cell trace's UE is ever given, so its queue
#: stays backlogged and the schedule is the model's (channel, scheduler, HARQ), not the sender's.
FLOW_RATE = "40mbit"
FLOW_PAYLOAD_BYTES = 1400
FLOW_PORT = 9000
#: A subframe counts as backlogged when the UE's base-station queue held at least this much.
BACKLOG_BYTES = 20_000
#: The delivered schedule: these per-UE columns summed over the subframes backlogged on both
#: builds (the transport blocks sent, the bytes delivered).
SCHEDULE_COLUMNS = ("delivered_bytes", "tbs_bits")
#: The schedule's allowed relative difference. How close two runs of one build come depends
#: on the model's random draws: where a draw (HARQ's) is taken per transmission, a packet's
#: arrival, which is wall-clock, shifts which draw meets which subframe, and the realisations
#: differ (a quarter of the backlogged subframes; the sums 0.8-2.5 % (delivered) and
#: 0.1-1.5 % (TBS) apart in three pairs of runs of one build on busy-cell); where every
#: subframe's draws are its own, the backlogged schedule is equal subframe by subframe.
SCHEDULE_TOLERANCE = 0.05
#: The fewest subframes backlogged on both a flow comparison needs, ms.
MIN_BACKLOGGED_MS = 1000
#: Columns the flow cannot change (the trace's and the seed's alone), compared exactly.
FLOW_EXACT_COLUMNS = ("n_rb", "other_demand_rbs", "other_users", "ues[0].mcs", "ues[0].layers")
#: Columns that are wall-clock measurements, not the model's output.
WALL_CLOCK_COLUMNS = ("wake_lateness_us",)


@dataclass
class Difference:
    """What one scenario's comparison found (``ok`` False: the check fails)."""

    scenario: str
    ok: bool
    detail: str
    #: The first column that differs and the emulated time of its first difference, ms.
    column: str | None = None
    t_ms: int | None = None
    #: Flow: the delivered schedule's largest relative difference, over how many subframes.
    schedule_diff: float | None = None
    backlogged_ms: int | None = None


@dataclass
class DeterminismResult:
    """Both builds, the inputs, and each scenario's comparison."""

    base: str
    candidate: str
    trace: str
    seed: int
    differences: list[Difference] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.differences)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _columns(truth: Truth) -> dict[str, np.ndarray]:
    return dict(truth.columns)


def _first_difference(a: np.ndarray, b: np.ndarray) -> int | None:
    """The first index where two columns differ (NaN equals NaN), None when equal."""
    if a.dtype == object or b.dtype == object:
        neq = np.array([x != y for x, y in zip(a, b)], dtype=bool)
    else:
        fa, fb = a.astype(float), b.astype(float)
        neq = ~((fa == fb) | (np.isnan(fa) & np.isnan(fb)))
    hits = np.flatnonzero(neq)
    return int(hits[0]) if len(hits) else None


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (for messages)."""
    return value.item() if isinstance(value, np.generic) else value


def compare_exact(base: Truth, candidate: Truth, scenario: str, columns: tuple[str, ...] | None = None) -> Difference:
    """Every model column (or ``columns``) value for value over the rows both have."""
    cb, cc = _columns(base), _columns(candidate)
    names = [c for c in (columns or tuple(sorted(set(cb) | set(cc)))) if c not in (*WALL_CLOCK_COLUMNS, "t_ms")]
    rows = min(len(cb["t_ms"]), len(cc["t_ms"]))
    if rows == 0:
        return Difference(scenario, False, "no ground-truth rows on one side")
    if not np.array_equal(cb["t_ms"][:rows], cc["t_ms"][:rows]):
        return Difference(scenario, False, "the two files' subframes (t_ms) are not the same", "t_ms")
    for name in names:
        if name not in cb or name not in cc:
            side = "base" if name not in cb else "candidate"
            return Difference(scenario, False, f"column {name} missing from the {side}'s ground truth", name)
        at = _first_difference(cb[name][:rows], cc[name][:rows])
        if at is not None:
            t = int(cb["t_ms"][at])
            return Difference(scenario, False, f"{name} differs first at t = {t} ms: base {_plain(cb[name][at])!r}, "
                                               f"candidate {_plain(cc[name][at])!r}", name, t)
    return Difference(scenario, True, f"{len(names)} column(s) equal over {rows} subframes")


def compare_schedule(base: Truth, candidate: Truth, scenario: str) -> Difference:
    """The delivered schedule over the subframes backlogged on both builds, summed, within the
    tolerance, and the trace-driven columns exactly."""
    exact = compare_exact(base, candidate, scenario, FLOW_EXACT_COLUMNS)
    if not exact.ok:
        return exact
    rows = min(len(base["t_ms"]), len(candidate["t_ms"]))
    both = ((base.ue(0, "queue_bytes")[:rows].astype(float) >= BACKLOG_BYTES)
            & (candidate.ue(0, "queue_bytes")[:rows].astype(float) >= BACKLOG_BYTES))
    n = int(both.sum())
    if n < MIN_BACKLOGGED_MS:
        return Difference(scenario, False, f"only {n} subframe(s) backlogged on both builds (need {MIN_BACKLOGGED_MS}): "
                                           "the flow did not fill the queue", backlogged_ms=n)
    worst, parts = 0.0, []
    same = np.ones(n, dtype=bool)
    for column in SCHEDULE_COLUMNS:
        same &= base.ue(0, column)[:rows][both].astype(float) == candidate.ue(0, column)[:rows][both].astype(float)
    for column in SCHEDULE_COLUMNS:
        b = float(np.nansum(base.ue(0, column)[:rows][both].astype(float)))
        c = float(np.nansum(candidate.ue(0, column)[:rows][both].astype(float)))
        diff = abs(c - b) / b if b > 0 else float("inf")
        worst = max(worst, diff)
        parts.append(f"{column} base {b:,.0f}, candidate {c:,.0f} ({diff:.2%} apart)")
    ok = worst <= SCHEDULE_TOLERANCE
    detail = (f"over the {n} subframes backlogged on both: {'; '.join(parts)} (tolerance {SCHEDULE_TOLERANCE:.0%}); "
              f"{float(same.mean()):.1%} of them scheduled the same; {exact.detail}")
    return Difference(scenario, ok, detail, None if ok else "ues[0]." + SCHEDULE_COLUMNS[0],
                      schedule_diff=round(worst, 5), backlogged_ms=n)


def check(sides: dict[str, Any], out: Path, *, trace: Path = DEFAULT_TRACE, seed: int = DEFAULT_SEED) -> DeterminismResult:
    """Run the idle and the flow scenario on both ``sides`` (``ab.Side`` processes named base
    and candidate: each configures and runs its own build), base first, under ``out``, and
    compare their ground truth."""
    started = time.monotonic()
    result = DeterminismResult(sides["base"].built.describe(), sides["candidate"].built.describe(), str(trace), seed)
    for scenario, seconds, rate in (("idle", IDLE_S, None), ("flow", FLOW_S, FLOW_RATE)):
        truths = {}
        for name in ("base", "candidate"):
            where = out / scenario / name
            error = sides[name].request({"kind": "cell", "out": str(where), "trace": str(trace), "seed": seed,
                                         "seconds": seconds, "rate": rate, "port": FLOW_PORT,
                                         "payload_bytes": FLOW_PAYLOAD_BYTES})
            if error:
                result.differences.append(Difference(scenario, False, f"the {name} build's run failed: {error}"))
                break
            truths[name] = read_truth(where / "emulator" / "truth.cbcol")
        else:
            compare = compare_exact if rate is None else compare_schedule
            result.differences.append(compare(truths["base"], truths["candidate"], scenario))
    result.wall_s = round(time.monotonic() - started, 1)
    return result

"""What a transport protocol feels of a cell, measured the same way on any trace: a real phone
log's import or a synthetic preset (fidelity row REAL-1 compares them).

Per trace (capacity = what the UE gets alone in the cell, :func:`clawbed.traces.stats.capacities_mbps`):

- ``cv_<w>ms``: the coefficient of variation (std / mean) of capacity averaged over windows of
  10, 100 and 1000 ms: how much a sender's rate must move at each time scale;
- ``acf_<w>ms``: the lag-one autocorrelation of those window means: how long a rate holds;
- drops: runs of 100 ms windows below half the trace's median window capacity (a sender that
  filled the pipe sees its queue build): ``drops_per_min``, ``drop_ms_mean`` (length) and
  ``drop_depth`` (1 − the run's mean / the median);
- other users: runs of subframes with and without other users' RBs (``other_on_ms_mean``,
  ``other_off_ms_mean``), where the trace has other users at all;
- ``harq_burst_mean``: the mean run length of first-transmission HARQ failures among the
  subframes that carry a failure flag (1: independent failures);
- ``rsrq_step_db_p90``: the 90th percentile of the RSRQ's change across 100 ms, where the
  trace has RSRQ.

Windows with no capacity column (a trace shorter than a window) leave that figure out (NaN).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from clawbed.traces.schema import Trace
from clawbed.traces.stats import capacities_mbps

WINDOWS_MS = (10, 100, 1000)
#: A capacity drop: a 100 ms window below this share of the median 100 ms capacity.
DROP_SHARE = 0.5
DROP_WINDOW_MS = 100


def _windows(values: np.ndarray, window_ms: int) -> np.ndarray:
    n = len(values) // window_ms
    return values[: n * window_ms].reshape(n, window_ms).mean(axis=1) if n else np.array([])


def _lag1(series: np.ndarray) -> float:
    if len(series) < 3 or float(np.std(series)) == 0.0:
        return math.nan
    return float(np.corrcoef(series[:-1], series[1:])[0, 1])


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lengths of the runs of True and of False in ``mask``."""
    if len(mask) == 0:
        return np.array([]), np.array([])
    edges = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
    bounds = np.concatenate(([0], edges, [len(mask)]))
    lengths = np.diff(bounds)
    starts_true = bool(mask[0])
    true_runs = lengths[0::2] if starts_true else lengths[1::2]
    false_runs = lengths[1::2] if starts_true else lengths[0::2]
    return true_runs, false_runs


def dynamics(trace: Trace) -> dict[str, Any]:
    """The figures of the module's docstring for ``trace``."""
    alone, _full = capacities_mbps(trace)
    out: dict[str, Any] = {"seconds": trace.duration_ms / 1000, "capacity_mean_mbps": float(alone.mean())}
    for w in WINDOWS_MS:
        series = _windows(alone, w)
        mean = float(series.mean()) if len(series) else math.nan
        out[f"cv_{w}ms"] = float(series.std() / mean) if len(series) > 1 and mean > 0 else math.nan
        out[f"acf_{w}ms"] = _lag1(series)
    series = _windows(alone, DROP_WINDOW_MS)
    if len(series) > 1 and float(np.median(series)) > 0:
        median = float(np.median(series))
        low = series < DROP_SHARE * median
        runs, _ = _runs(low)
        minutes = len(series) * DROP_WINDOW_MS / 60_000
        out["drops_per_min"] = float(len(runs) / minutes)
        out["drop_ms_mean"] = float(runs.mean() * DROP_WINDOW_MS) if len(runs) else 0.0
        out["drop_depth"] = float(1 - series[low].mean() / median) if low.any() else 0.0
    else:
        out["drops_per_min"] = out["drop_ms_mean"] = out["drop_depth"] = math.nan
    other = trace.columns.get("other_rbs")
    if other is not None and np.any(other > 0):
        on, off = _runs(np.asarray(other) > 0)
        out["other_on_ms_mean"] = float(on.mean()) if len(on) else 0.0
        out["other_off_ms_mean"] = float(off.mean()) if len(off) else 0.0
    else:
        out["other_on_ms_mean"] = out["other_off_ms_mean"] = math.nan
    fail = trace.columns.get("harq_fail")
    if fail is not None and np.any(np.asarray(fail) > 0):
        bursts, _ = _runs(np.asarray(fail) > 0)
        out["harq_burst_mean"] = float(bursts.mean())
    else:
        out["harq_burst_mean"] = math.nan
    rsrq = trace.columns.get("rsrq_db")
    if rsrq is not None:
        values = np.asarray(rsrq, dtype=float)
        steps = _windows(values, DROP_WINDOW_MS)
        steps = np.abs(np.diff(steps[~np.isnan(steps)])) if len(steps) > 1 else np.array([])
        out["rsrq_step_db_p90"] = float(np.percentile(steps, 90)) if len(steps) else math.nan
    else:
        out["rsrq_step_db_p90"] = math.nan
    return out


#: The figures REAL-1 judges: variability a sender must follow (a preset must not be smoother
#: than every real cell at any of them).
JUDGED = ("cv_10ms", "cv_100ms", "cv_1000ms", "drops_per_min")

"""PNG of a trace (``clawbed trace plot``): MCS, other users' load and implied capacity.

Three panels share the time axis (s). Long spans are drawn from bins so that no panel
draws more than :data:`MAX_POINTS` points: an hour-long trace plots as fast as a minute.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import numpy as np  # noqa: E402

from clawbed.errors import InputError  # noqa: E402
from clawbed.traces.schema import Trace  # noqa: E402
from clawbed.traces.stats import BIN_MS, capacities_mbps  # noqa: E402

#: Points per line at most (about the pixels across a panel).
MAX_POINTS = 2000
#: Rolling-mean window of the load, ms: ~an RTT, the smoothing of CLAW's Fig. 10. Long spans
#: use at least ROLLING_BINS drawn bins, or the line would be as noisy as the bins.
LOAD_ROLLING_MS = 200
ROLLING_BINS = 10
FIGSIZE_IN = (12.0, 8.0)
DPI = 110


def _bins(values: np.ndarray, bin_ms: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, min, max) over consecutive bins of ``bin_ms`` samples (last bin may be short)."""
    n = len(values)
    whole = n // bin_ms
    parts = [values[: whole * bin_ms].reshape(whole, bin_ms)] if whole else []
    means = [p.mean(axis=1) for p in parts]
    mins = [p.min(axis=1) for p in parts]
    maxs = [p.max(axis=1) for p in parts]
    if n % bin_ms:
        tail = values[whole * bin_ms:]
        means.append(np.array([tail.mean()]))
        mins.append(np.array([tail.min()]))
        maxs.append(np.array([tail.max()]))
    return np.concatenate(means), np.concatenate(mins), np.concatenate(maxs)


def _rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over ``window`` samples (shorter at the start)."""
    c = np.cumsum(np.concatenate([[0.0], values.astype(np.float64)]))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def plot_trace(trace: Trace, out_png: str | Path, start_s: float = 0.0, seconds: float | None = None) -> None:
    """Write a PNG of ``trace`` from ``start_s`` for ``seconds`` (default: to the end).

    Panels: the UE's MCS (with its min–max band when binned); the other users' load in %
    of N_rb (per subframe, or per-bin mean and range, and a rolling mean); the implied
    capacity in Mbit/s over ≥ 100 ms bins, alone in the cell and with the full cell.
    """
    n = trace.duration_ms
    first = round(start_s * 1000)
    last = n if seconds is None else min(n, first + round(seconds * 1000))
    if not 0 <= first < n or last <= first:
        raise InputError(f"nothing to plot: the trace lasts {n / 1000:g} s, asked for "
                         f"{start_s:g} s + {'the rest' if seconds is None else f'{seconds:g} s'}")
    span = last - first
    sl = slice(first, last)
    mcs = trace["mcs"][sl].astype(np.float64)
    whole_load_pct = trace["other_rbs"].astype(np.float64) / trace.n_rb * 100.0
    load_pct = whole_load_pct[sl]
    alone, full = (c[sl] for c in capacities_mbps(trace))

    fine_ms = max(1, math.ceil(span / MAX_POINTS))
    cap_ms = max(BIN_MS, math.ceil(span / MAX_POINTS / BIN_MS) * BIN_MS)

    def edges(bin_ms: int, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bin start times (s) plus the span's end, and the values with the last repeated,
        so that a post-step line or fill covers the last bin too."""
        t = np.minimum(first + np.arange(len(values) + 1) * bin_ms, last) / 1000.0
        return t, np.append(values, values[-1])

    fig, (ax_mcs, ax_load, ax_cap) = plt.subplots(3, 1, sharex=True, figsize=FIGSIZE_IN,
                                                 constrained_layout=True)
    meta = trace.metadata
    preset = meta.get("provenance", {}).get("preset")
    title = f"{meta['cell']['bandwidth_mhz']} MHz (N_rb {trace.n_rb}), {trace.n_antennas} antenna(s)"
    fig.suptitle(f"{preset or meta.get('source', 'trace')}: {title}")

    m_mean, m_min, m_max = _bins(mcs, fine_ms)
    t, m_line = edges(fine_ms, m_mean)
    if fine_ms > 1:
        ax_mcs.fill_between(t, edges(fine_ms, m_min)[1], edges(fine_ms, m_max)[1], step="post",
                            color="tab:blue", alpha=0.2, linewidth=0, label=f"min–max per {fine_ms} ms")
    ax_mcs.step(t, m_line, where="post", color="tab:blue", linewidth=0.8,
                label="MCS" if fine_ms == 1 else f"mean per {fine_ms} ms")
    ax_mcs.set_ylabel("MCS")
    ax_mcs.set_ylim(-0.5, 28.5)
    ax_mcs.legend(loc="upper right", fontsize="small")

    # Per subframe the load is polarised (most RBs or none); a bin's mean shows how much of
    # the bin was busy, and empty bins stay visible as gaps.
    ax_load.fill_between(t, 0, edges(fine_ms, _bins(load_pct, fine_ms)[0])[1], step="post",
                         color="tab:orange", alpha=0.3, linewidth=0,
                         label="per subframe" if fine_ms == 1 else f"mean per {fine_ms} ms")
    # The rolling mean is taken over the whole trace so that it is right from the span's start.
    window_ms = max(LOAD_ROLLING_MS, ROLLING_BINS * fine_ms)
    rolling = _bins(_rolling_mean(whole_load_pct, window_ms)[sl], fine_ms)[0]
    window = f"{window_ms} ms" if window_ms < 10_000 else f"{window_ms / 1000:g} s"
    ax_load.step(t, edges(fine_ms, rolling)[1], where="post", color="tab:red", linewidth=1.2,
                 label=f"{window} rolling mean")
    ax_load.set_ylabel("other users' load, %")
    ax_load.set_ylim(0, 105)
    ax_load.legend(loc="upper right", fontsize="small")

    tc, f_line = edges(cap_ms, _bins(full, cap_ms)[0])
    a_line = edges(cap_ms, _bins(alone, cap_ms)[0])[1]
    ax_cap.step(tc, f_line, where="post", color="tab:gray", linewidth=0.9, label="full cell")
    ax_cap.step(tc, a_line, where="post", color="tab:green", linewidth=1.0, label="alone (RBs others leave)")
    ax_cap.set_ylabel(f"capacity, Mbit/s\n({cap_ms} ms bins)")
    ax_cap.set_ylim(bottom=0)
    ax_cap.legend(loc="upper right", fontsize="small")
    ax_cap.set_xlabel("time, s")
    ax_cap.set_xlim(first / 1000.0, last / 1000.0)
    for ax in (ax_mcs, ax_load, ax_cap):
        ax.grid(True, alpha=0.3)

    fig.savefig(out_png, dpi=DPI)
    plt.close(fig)

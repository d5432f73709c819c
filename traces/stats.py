"""Summary statistics of a trace (``clawbed trace info``).

Capacities are what the trace implies, not what a run achieved: TBS(MCS_k, RBs) per
subframe with the trace's layers, in Mbit/s. "Alone" is the UE with every RB the other
users leave (N_rb − other_rbs); "full cell" is the UE with all N_rb RBs. Per subframe
these are polarised (the other users take most RBs or none), so their percentiles, like
the load's, are taken over :data:`BIN_MS` bins — the scale of an RTT and of CLAW's window.

A trace imported from Mahimahi (``source`` ``mahimahi``) records one link's capacity, no
cell: its ``other_rbs`` are how the import trims each subframe's TBS down to the recorded
bits (and N_rb in a ms with no delivery opportunity), not other users. Its full-cell
capacity is the recorded one (the same as alone), and it has no other users' load: counting
those RBs as capacity made a constant 48 Mbit/s trace's "full cell" 49.1 Mbit/s, and a
driving trace's (mostly empty ms) several times its recorded rate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from clawbed.lte import capacity_bits
from clawbed.tables import TerminalTable
from clawbed.traces.schema import Trace

#: Bin over which capacity and load percentiles are taken, ms.
BIN_MS = 100
#: Other users "take the cell" in a subframe when they demand at least this share of N_rb.
MOST_RBS_FRACTION = 0.8
PERCENTILES = (5, 50, 95)
#: Trace sources whose ``other_rbs`` encode capacity the recording lacked, not other users.
LINK_ONLY_SOURCES = frozenset({"mahimahi"})


def other_rbs_are_users(trace: Trace) -> bool:
    """False for a trace of one link's capacity (a Mahimahi import), whose ``other_rbs`` are
    the import's trim of each subframe's TBS, not RBs other users took."""
    return trace.metadata.get("source") not in LINK_ONLY_SOURCES


def _bin_means(values: np.ndarray, bin_ms: int) -> np.ndarray:
    """Means over consecutive bins of ``bin_ms`` subframes (a shorter last bin dropped
    unless it is the only one)."""
    whole = len(values) // bin_ms
    if whole == 0:
        return np.array([values.mean()])
    return values[: whole * bin_ms].reshape(whole, bin_ms).mean(axis=1)


def _distribution(mean: float, samples: np.ndarray) -> dict[str, float]:
    """Mean and percentiles, rounded for display and JSON."""
    out = {"mean": round(float(mean), 3)}
    for q, v in zip(PERCENTILES, np.percentile(samples, PERCENTILES)):
        out[f"p{q}"] = round(float(v), 3)
    return out


def capacities_mbps(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(alone-in-cell, full-cell) capacity of each subframe, Mbit/s (= bits per ms / 1000).
    For a link-only trace (:func:`other_rbs_are_users` False) both are the recorded capacity."""
    n_rb = trace.n_rb
    mcs = trace["mcs"]
    layers = trace.get("layers")
    alone = capacity_bits(mcs, n_rb - trace["other_rbs"].astype(np.int64), n_rb, layers) / 1000.0
    if not other_rbs_are_users(trace):
        return alone, alone.copy()
    full = capacity_bits(mcs, np.full(len(mcs), n_rb), n_rb, layers)
    return alone, full / 1000.0


def summarize(trace: Trace) -> dict[str, Any]:
    """JSON-able summary: cell, duration, SFNs, capacity / load / MCS statistics.

    ``capacity_alone_mbps``, ``capacity_full_cell_mbps`` and ``other_load_pct`` give the
    mean over all subframes and percentiles over ``bin_ms`` bins; ``mcs`` percentiles are
    per subframe. ``subframes_other_ge_80pct`` / ``subframes_other_zero`` are fractions of
    subframes (their sum shows how polarised the load is). ``harq_fail_rate`` is the mean
    of ``harq_fail`` (or of ``bler``), None when the trace has neither. A link-only trace
    (``other_users`` False: a Mahimahi import) has its recorded capacity as the full cell's
    and None for the other users' load and the subframe fractions.
    """
    n_rb = trace.n_rb
    other = trace["other_rbs"].astype(np.int64)
    load_pct = other / n_rb * 100.0
    alone, full = capacities_mbps(trace)
    mcs = trace["mcs"].astype(np.float64)
    sfn, _ = trace.sfn_subframe()

    if "harq_fail" in trace.columns:
        harq: float | None = round(float(trace["harq_fail"].mean()), 4)
    elif "bler" in trace.columns:
        harq = round(float(trace["bler"].astype(np.float64).mean()), 4)
    else:
        harq = None
    layers = trace.get("layers")
    users = trace.get("other_users")
    cell = other_rbs_are_users(trace)
    return {
        "duration_s": trace.duration_ms / 1000.0,
        "n_rb": n_rb,
        "antennas": trace.n_antennas,
        "bandwidth_mhz": trace.metadata["cell"]["bandwidth_mhz"],
        "source": trace.metadata.get("source", ""),
        "preset": trace.metadata.get("provenance", {}).get("preset"),
        "sfn_start": int(sfn[0]),
        "sfn_end": int(sfn[-1]),
        "bin_ms": BIN_MS,
        "capacity_alone_mbps": _distribution(alone.mean(), _bin_means(alone, BIN_MS)),
        "capacity_full_cell_mbps": _distribution(full.mean(), _bin_means(full, BIN_MS)),
        "other_users": cell,
        "other_load_pct": _distribution(load_pct.mean(), _bin_means(load_pct, BIN_MS)) if cell else None,
        "mcs": _distribution(mcs.mean(), mcs),
        "subframes_other_ge_80pct": round(float(np.mean(other >= MOST_RBS_FRACTION * n_rb)), 4) if cell else None,
        "subframes_other_zero": round(float(np.mean(other == 0)), 4) if cell else None,
        "harq_fail_rate": harq,
        "two_layer_fraction": None if layers is None else round(float(np.mean(layers == 2)), 4),
        "mean_other_users": None if users is None else round(float(users.mean()), 3),
        # Imported traces (diag and DCI logs) record what the input covered.
        "coverage": trace.metadata.get("provenance", {}).get("coverage"),
    }


def render_summary(path: str | Path, summary: dict[str, Any]) -> None:
    """Print ``summary`` (from :func:`summarize`) as a rich table headed by the file."""
    console = Console()
    s = summary
    preset = f", preset {s['preset']}" if s.get("preset") else ""
    console.print(f"[bold]{path}[/bold]: {s['duration_s']:g} s, {s['bandwidth_mhz']} MHz "
                  f"(N_rb {s['n_rb']}), {s['antennas']} antenna(s), source {s['source']}{preset}; "
                  f"SFN {s['sfn_start']} → {s['sfn_end']}")
    table = TerminalTable(title=f"percentiles of capacity and load over {s['bin_ms']} ms bins, MCS per subframe")
    table.add_column("")
    for col in ("mean", *(f"p{q}" for q in PERCENTILES)):
        table.add_column(col, justify="right")
    for label, key in (("capacity alone in cell, Mbit/s", "capacity_alone_mbps"),
                       ("capacity of the full cell, Mbit/s", "capacity_full_cell_mbps"),
                       ("other users' load, %", "other_load_pct"),
                       ("MCS", "mcs")):
        d = s[key]
        if d is None:
            continue
        table.add_row(label, *(f"{d[c]:.1f}" for c in ("mean", *(f"p{q}" for q in PERCENTILES))))
    console.print(table)
    if s.get("other_users", True):
        lines = [f"subframes where other users take ≥ {MOST_RBS_FRACTION:.0%} of the RBs: "
                 f"{s['subframes_other_ge_80pct']:.1%}, none: {s['subframes_other_zero']:.1%}"]
    else:
        lines = [f"one link's capacity ({s['source']}), no cell: the full cell is the recorded capacity and "
                 f"there are no other users"]
    if s["harq_fail_rate"] is not None:
        lines.append(f"first-transmission HARQ failure rate: {s['harq_fail_rate']:.1%}")
    if s["two_layer_fraction"] is not None:
        lines.append(f"subframes with two layers: {s['two_layer_fraction']:.1%}")
    if s["mean_other_users"] is not None:
        lines.append(f"mean active other users: {s['mean_other_users']:.2f}")
    cov = s.get("coverage")
    if cov:
        lines.append(f"coverage: {cov.get('subframes_with_data', 0)} of {cov.get('subframes', 0)} "
                     f"subframes with data, UE scheduled in {cov.get('ue_scheduled_subframes', 0)}")
        if "gaps" in cov:
            longest = ", ".join(f"{n} ms at {t} ms" for t, n in cov["longest_gaps_ms"][:3])
            lines.append(f"gaps (≥ {cov['gap_threshold_ms']} ms without data): {cov['gaps']}, "
                         f"{cov['gap_ms_total']} ms in all" + (f"; longest: {longest}" if longest else ""))
        for key, label in (("versions", "versions decoded"), ("unknown_versions", "unknown versions"),
                           ("defects", "defects")):
            if cov.get(key):
                lines.append(f"{label}: " + ", ".join(f"{k} ×{v}" for k, v in cov[key].items()))
        if cov.get("other_rbs"):
            lines.append(f"other users' RBs: {cov['other_rbs']}")
        if cov.get("path") == "mac-fallback":
            lines.append("lossy path: no usable 0xB173, the UE's blocks from 0xB063; estimated: "
                         + ", ".join(cov.get("estimated_columns", [])))
    for line in lines:
        console.print(line)

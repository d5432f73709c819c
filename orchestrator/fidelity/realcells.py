"""REAL-1: the cell dynamics a transport protocol feels, real phone logs against the synthetic
presets (:mod:`clawbed.traces.dynamics` measures both the same way).

Each real log of the third-party data folder that imports (``shared:real-logs``; skipped,
with the reason, where the folder is absent) and each preset (``params.seconds`` of it at seed
1) gives capacity variability at 10/100/1000 ms (coefficient of variation, lag-one
autocorrelation), capacity drops (100 ms windows below half the median: rate, length, depth),
other users' on/off periods, HARQ failure bursts and RSRQ steps.

The criterion, and why: a preset must not be **smoother than every real cell** at any judged
figure (``traces.dynamics.JUDGED``): a smoother synthetic cell would hide exactly the rate
changes a PHY-informed sender is built to follow, so it would understate what CLAW can win.
Being rougher than the real logs is reported with its ratio, not failed: the real figures are
lower bounds of the real variability (a log's unscheduled subframes are filled from the
phone's measurements, 10–20 ms apart, by a per-log median, which is smooth: traces/
CHANNEL_MODEL.md), and three recordings of idle-to-lightly-loaded phones do not span the cells
the presets stand for (a busy cell, driving).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clawbed.orchestrator.fidelity.harness import RowContext, fmt
from clawbed.orchestrator.fidelity.results import SKIPPED, Check, Outcome
from clawbed.paths import shared_data
from clawbed.traces.dynamics import JUDGED, dynamics


def _real_traces(names: list[str]) -> tuple[dict[str, Any], list[str]]:
    """{log name: trace} of the listed logs that import; the reasons of those that do not."""
    from clawbed.errors import ClawbedError
    from clawbed.traces.inputs import as_trace
    from clawbed.traces.io import read_trace

    folder = shared_data("real-logs")
    traces: dict[str, Any] = {}
    problems: list[str] = []
    if folder is None:
        return traces, problems
    for name in names:
        path = folder / name
        if not path.is_file():
            problems.append(f"{name}: not in {folder}")
            continue
        try:
            traces[name] = read_trace(as_trace(path))
        except ClawbedError as e:
            problems.append(f"{name}: {str(e)[:160]}")
    return traces, problems


def judge(real: dict[str, dict[str, Any]], presets: dict[str, dict[str, Any]]) -> list[Check]:
    """One check per judged figure: every preset at least the smoothest real cell's value."""
    checks = []
    for key in JUDGED:
        values = [r[key] for r in real.values() if not math.isnan(r[key])]
        if not values:
            checks.append(Check(key, "no real log gives it", "≥ the smoothest real cell", None,
                                note="no real log has this figure"))
            continue
        floor, top = min(values), max(values)
        smoother = sorted(p for p, d in presets.items() if not math.isnan(d[key]) and d[key] < floor)
        rougher = sorted(p for p, d in presets.items() if not math.isnan(d[key]) and d[key] > top)
        spread = " / ".join(f"{p} {fmt(d[key], digits=2)}" for p, d in presets.items())
        cause = (f"smoother than every real cell: {', '.join(smoother)} (real {fmt(floor, digits=2)}–"
                 f"{fmt(top, digits=2)})") if smoother else ""
        note_rough = (f"rougher than every real cell: {', '.join(rougher)}; real figures are lower bounds"
                      if rougher else "")
        checks.append(Check(key, spread, f"each preset ≥ {fmt(floor, digits=2)} (real {fmt(floor, digits=2)}–"
                                         f"{fmt(top, digits=2)})", not smoother, cause=cause or note_rough))
    return checks


def real_cell_dynamics(ctx: RowContext) -> Outcome:
    from clawbed.traces.synth import synthesize

    p, out = ctx.params, ctx.outcome
    traces, problems = _real_traces(list(p["logs"]))
    if not traces:
        out.status = SKIPPED
        out.reason = ("no real log: the third-party recordings are not shipped (CLAWBED_SHARED, or ../shared/data "
                      "beside the repository)" + (f"; {'; '.join(problems)}" if problems else ""))
        return out
    real = {name: dynamics(trace) for name, trace in traces.items()}
    presets = {name: dynamics(synthesize(name, int(p["seconds"]) * 1000, 1)) for name in p["presets"]}
    for name, figures in {**real, **presets}.items():
        ctx.log(f"{name}: " + ", ".join(f"{k} {fmt(figures[k], digits=2)}" for k in JUDGED))
    out.checks.extend(judge(real, presets))
    out.metrics = {"real": real, "presets": presets, "import_problems": problems}
    out.testbed = "; ".join(f"{Path(n).stem[:24]}: CV100 {fmt(d['cv_100ms'], digits=2)}, drops "
                            f"{fmt(d['drops_per_min'], digits=1)}/min" for n, d in real.items()) + \
        " | presets CV100 " + "/".join(fmt(d["cv_100ms"], digits=2) for d in presets.values())
    if problems:
        out.reason = "not imported: " + "; ".join(problems)
    return out


EXPERIMENTS: dict[str, Callable[[RowContext], Outcome]] = {"real_cell_dynamics": real_cell_dynamics}

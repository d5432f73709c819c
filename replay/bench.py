"""Benchmark of a replay's per-load overhead: the wall time each load takes beyond its page
load time, and where it goes (``LoadRecord.overhead_ms``: the scheme's set-up — server side,
agents, clients — the TCP sampler's start, the seek, the loader beyond the PLT — process and
browser start, teardown — the scheme's teardown, the time series, the lateness measurement).

``python -m clawbed.replay.bench`` (root: namespaces) runs real replays of ``set-01`` on the
idle-cell sample with the h2 loader and with Chromium, claw and cubic interleaved, prints a
table and writes ``bench-results/replay.json`` with the date and the machine.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console

from clawbed.files import atomic_write
from clawbed.paths import REPO_ROOT
from clawbed.replay.records import LoadRecord
from clawbed.replay.run import Replay, ReplayConfig
from clawbed.replay.rundir import host_facts
from clawbed.tables import TerminalTable

RESULTS = REPO_ROOT / "bench-results" / "replay.json"
TRACE = REPO_ROOT / "traces" / "samples" / "idle-cell.cbt"
PHASES = ("scheme_setup", "sampler_start", "seek", "loader", "teardown", "series", "timing")


def measure(loader: str, runs: int, work: Path, schemes: tuple[str, ...] = ("claw", "cubic")) -> dict[str, Any]:
    """One replay of ``runs`` rounds: per phase the mean and range over the loads, ms, the PLT,
    the wall time per load (set-up of the cell and the web server excluded) and loads per hour."""
    config = ReplayConfig(trace=TRACE, page="set-01", schemes=list(schemes), runs=runs, loader=loader,
                          core_rtt_ms=50, name=f"bench-{loader}", output_root=work, load_timeout_s=60)
    first_load: list[float] = []

    def on_event(event: Any) -> None:
        if event.kind == "load-start" and not first_load:
            first_load.append(time.monotonic())

    replay = Replay(config, on_event=on_event)
    started = time.monotonic()
    records: list[LoadRecord] = replay.run()
    ended = time.monotonic()
    ok = [r for r in records if r.measured and r.overhead_ms]
    if not ok:
        raise click.ClickException(f"{loader}: no load succeeded ({records[0].error if records else 'no load'})")

    def stats(values: list[float]) -> dict[str, float]:
        a = np.asarray(values, float)
        return {"mean": round(float(a.mean()), 1), "min": round(float(a.min()), 1), "max": round(float(a.max()), 1)}

    per_load_s = (ended - first_load[0]) / len(records) if first_load else None
    return {"loader": loader, "loads": len(records), "loads_ok": len(ok), "schemes": list(schemes),
            "plt_ms": stats([r.plt_ms or 0.0 for r in ok]),
            "overhead_ms": {p: stats([r.overhead_ms.get(p, 0.0) for r in ok]) for p in (*PHASES, "total")},
            "late_reruns": replay.late_reruns,
            "wall_per_load_s": round(per_load_s, 3) if per_load_s else None,
            "setup_s": round(first_load[0] - started, 2) if first_load else None,
            "loads_per_hour": round(3600 / per_load_s) if per_load_s else None}


def render(results: dict[str, Any], console: Console) -> None:
    table = TerminalTable(title=f"per-load overhead beyond the PLT, ms (mean, min–max) — {results['date']}, "
                                f"{results['machine']['cpus']} CPUs, load {results['machine']['loadavg_1_5_15']}")
    table.add_column("phase")
    for run in results["runs"]:
        table.add_column(f"{run['loader']} ({run['loads_ok']}/{run['loads']} loads)", justify="right")

    def cell(s: dict[str, float]) -> str:
        return f"{s['mean']:,.0f} ({s['min']:,.0f}–{s['max']:,.0f})"

    for phase in (*PHASES, "total"):
        table.add_row(phase if phase != "total" else "total beyond PLT", *(cell(r["overhead_ms"][phase])
                                                                          for r in results["runs"]))
    table.add_row("PLT", *(cell(r["plt_ms"]) for r in results["runs"]))
    table.add_row("wall time per load, s", *(str(r["wall_per_load_s"]) for r in results["runs"]))
    table.add_row("loads per hour (one machine)", *(str(r["loads_per_hour"]) for r in results["runs"]))
    table.add_row("loads run again (emulator late)", *(str(r["late_reruns"]) for r in results["runs"]))
    console.print(table)


def render_change(previous: dict[str, Any], results: dict[str, Any], console: Console) -> None:
    """The last run's figures (the file this one replaces) beside this run's, per loader: the
    before/after of a change to the per-load path, on the same machine."""
    before = {r["loader"]: r for r in previous.get("runs", [])}
    table = TerminalTable(title=f"per-load overhead, mean ms: the previous run ({previous.get('date', '?')}, load "
                                f"{previous.get('machine', {}).get('loadavg_1_5_15', '?')}) → this run")
    table.add_column("phase")
    runs = [r for r in results["runs"] if r["loader"] in before]
    if not runs:
        return
    for run in runs:
        table.add_column(run["loader"], justify="right")
    for phase in (*PHASES, "total"):
        cells = []
        for run in runs:
            old = before[run["loader"]].get("overhead_ms", {}).get(phase, {}).get("mean")
            cells.append(f"{old:,.0f} → {run['overhead_ms'][phase]['mean']:,.0f}" if old is not None else "–")
        table.add_row(phase if phase != "total" else "total beyond PLT", *cells)
    table.add_row("loads per hour", *(f"{before[r['loader']].get('loads_per_hour')} → {r['loads_per_hour']}"
                                      for r in runs))
    console.print(table)


@click.command()
@click.option("--h2-runs", type=click.IntRange(min=1), default=4, show_default=True, help="rounds with the h2 loader")
@click.option("--browser-runs", type=click.IntRange(min=0), default=2, show_default=True,
              help="rounds with Chromium (0: none)")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS, show_default=True)
def main(h2_runs: int, browser_runs: int, output: Path) -> None:
    """Measure the per-load overhead of a replay and write bench-results/replay.json."""
    console = Console()
    if os.geteuid() != 0:
        console.print("replay bench: skipped (needs root: network namespaces)")
        return
    runs = []
    with tempfile.TemporaryDirectory(prefix="clawbed-replay-bench-") as tmp:
        for loader, n in (("h2", h2_runs), ("browser", browser_runs)):
            if n:
                console.print(f"[dim]measuring the per-load overhead with the {loader} loader ({n} rounds) …[/dim]")
                runs.append(measure(loader, n, Path(tmp)))
    results = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": {**host_facts(), "kernel": platform.release()},
               "page": "set-01", "trace": TRACE.name, "runs": runs}
    render(results, console)
    try:
        previous = json.loads(output.read_text())
    except (OSError, ValueError):
        previous = None
    if isinstance(previous, dict):
        render_change(previous, results, console)
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(output, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    console.print(f"results: {output}")


if __name__ == "__main__":
    main()

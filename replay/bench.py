"""Benchmark of a replay's per-load overhead: the wall time each load takes beyond its page
load time, and where it goes (``LoadRecord.overhead_ms``: the scheme's set-up — server side,
agents, clients — the TCP sampler's start, the seek, the loader beyond the PLT — process and
browser start, teardown — the scheme's teardown, the time series, the lateness measurement).

``python -m clawbed.replay.bench`` (root: namespaces) runs real replays of ``set-01`` on the
idle-cell sample with the h2 loader and with Chromium, claw and cubic interleaved, prints a
table and writes ``bench-results/replay.json`` with the date and the machine.

Two timing steps follow (docs/timing.md), written to ``bench-results/timing.json``:

* **first-attempt timing-clean share** of the default replay (``make replay``'s: busy cell,
  ``profile``, claw and cubic, Chromium), with the default placement and with
  ``--loader-off-cell-cpu``: the share of loads whose first attempt was on time, under each
  late rule (the other rule read from the same attempts' figures, ``lateness.timing_ok_by``);
* **lateness → PLT error**: the same trace, pages ``set-01`` (100 KB) and ``profile`` (1.3 MB),
  claw and cubic, h2 loader; one replay unstalled, a second unstalled (the noise), then one per
  stall of :data:`STALLS_MS` in which every load has the emulator stopped (SIGSTOP … SIGCONT,
  so the emulator's own truth records the lateness) for that long once, at a random moment of
  its first 5–80 % of the unstalled pair's PLT. Each load is paired with the unstalled load of
  the same round and scheme (same trace stretch: rounds are aligned); the table gives per page,
  scheme and stall the recorded lateness and the PLT error (stalled − unstalled), and the
  largest stall whose error stays within the noise: the evidence rule's bound.

The timing steps that run a suite's own scenarios — Fig 19's 45-UE all-CLAW cell (CPU,
lateness, first attempts, PLTs) and the first-attempt share over the paper suite's pages —
are ``python -m clawbed.orchestrator.bench`` (orchestrator/bench.py: the replay layer imports
no suite).
"""

from __future__ import annotations

import json
import os
import platform
import random
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console

from clawbed import doctor
from clawbed.files import atomic_write
from clawbed.paths import REPO_ROOT
from clawbed.replay.lateness import LATE_RULES, timing_ok_by
from clawbed.replay.records import LoadRecord
from clawbed.replay.run import Replay, ReplayConfig, ReplayEvent
from clawbed.replay.rundir import LATE_LOADS_JSONL, host_facts
from clawbed.tables import TerminalTable

RESULTS = REPO_ROOT / "bench-results" / "replay.json"
TRACE = REPO_ROOT / "traces" / "samples" / "idle-cell.cbt"
PHASES = ("scheme_setup", "sampler_start", "seek", "loader", "teardown", "series", "timing")
TIMING_RESULTS = REPO_ROOT / "bench-results" / "timing.json"
#: The default replay's trace (``make replay``).
BUSY_TRACE = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
#: Stalls injected, ms.
STALLS_MS = (1, 2, 5, 10, 20)
#: Pages of the stall step: small (100 KB, 8 objects) and the default (1.3 MB, 68 objects).
STALL_PAGES = ("set-01", "profile")
#: A stall starts within this part of the unstalled pair's PLT (from the loader's start).
STALL_WINDOW = (0.05, 0.8)


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


def first_attempts(replay: Replay, records: list[LoadRecord]) -> list[LoadRecord]:
    """Each load's first attempt: the kept record, or the first one set aside as late."""
    firsts = {r.load: r for r in records if r.late_reruns == 0}
    late = replay.run_dir.path / LATE_LOADS_JSONL
    if late.is_file():
        for number, line in enumerate(late.read_text().splitlines(), start=1):
            record = LoadRecord.from_json(json.loads(line), f"{late}:{number}")
            if record.late_reruns == 0:
                firsts[record.load] = record
    return [firsts[k] for k in sorted(firsts)]


def clean_share(runs: int, work: Path, loader_off_cell_cpu: bool, loader: str = "browser") -> dict[str, Any]:
    """The default replay (``make replay``'s settings, ``runs`` rounds): the share of loads
    whose first attempt was on time, by each rule."""
    config = ReplayConfig(trace=BUSY_TRACE, page="profile", schemes=["claw", "cubic"], runs=runs, loader=loader,
                          name=f"clean-{'split' if loader_off_cell_cpu else 'shared'}", output_root=work,
                          loader_off_cell_cpu=loader_off_cell_cpu)
    replay = Replay(config)
    records = replay.run()
    firsts = first_attempts(replay, records)
    measured = [r for r in firsts if r.subframe_late_max_ms is not None or r.delivery_err_max_ms is not None]
    share = {rule: round(100.0 * sum(1 for r in measured if timing_ok_by(r, rule)) / len(measured), 1)
             if measured else None for rule in LATE_RULES}
    # What the run really did (with 4 CPUs or more the reservation holds instead of the split).
    manifest = json.loads((replay.run_dir.path / "manifest.json").read_text())
    return {"placement": "loader off the cell CPU" if loader_off_cell_cpu else "default", "loader": loader,
            "cpus": manifest.get("cpus"),
            "loads": len(records), "first_attempts_measured": len(measured), "clean_share_pct": share,
            "late_reruns": replay.late_reruns, "rule_used": config.late_rule,
            "worst_slip_ms": [r.subframe_late_max_ms for r in measured],
            "stall_ms": [r.subframe_stall_ms for r in measured],
            "delivery_err_ms": [r.delivery_err_max_ms for r in measured]}


class Staller:
    """Stops the emulator (SIGSTOP) for ``stall_ms`` once during each load, at a moment drawn
    from the pair's unstalled PLT, then lets it go on (SIGCONT, whatever happens meanwhile)."""

    def __init__(self, stall_ms: float, baseline_plt_ms: dict[tuple[int, str], float], seed: int) -> None:
        self.stall_ms = stall_ms
        self.baseline = baseline_plt_ms
        self.random = random.Random(seed)
        self.replay: Replay | None = None
        self.runs_per_round = 1
        #: (load, moment after the loader's start, ms) of each stall.
        self.injected: list[tuple[int, float]] = []

    def on_event(self, event: ReplayEvent) -> None:
        if event.kind != "loader-start" or self.replay is None or event.load is None or event.scheme is None:
            return
        round_ = event.load // self.runs_per_round
        plt_ms = self.baseline.get((round_, event.scheme))
        if plt_ms is None or self.replay.emulator_pid is None:
            return
        at_ms = self.random.uniform(*STALL_WINDOW) * plt_ms
        self.injected.append((event.load, round(at_ms, 1)))
        threading.Thread(target=self._stall, args=(self.replay.emulator_pid, at_ms), daemon=True).start()

    def _stall(self, pid: int, at_ms: float) -> None:
        time.sleep(at_ms / 1000.0)
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        try:
            time.sleep(self.stall_ms / 1000.0)
        finally:
            os.kill(pid, signal.SIGCONT)


def _stall_replay(page: str, stall_ms: float, runs: int, work: Path, name: str,
                  baseline: dict[tuple[int, str], float] | None, schemes: tuple[str, ...]) -> list[LoadRecord]:
    config = ReplayConfig(trace=BUSY_TRACE, page=page, schemes=list(schemes), runs=runs, loader="h2", name=name,
                          output_root=work, rerun_late=False, load_timeout_s=60)
    staller = Staller(stall_ms, baseline or {}, seed=int(stall_ms * 1000) + len(page))
    staller.runs_per_round = len(schemes)
    replay = Replay(config, on_event=staller.on_event if stall_ms > 0 else None)
    staller.replay = replay
    return replay.run()


def stall_table(runs: int, work: Path, pages: tuple[str, ...] = STALL_PAGES,
                stalls_ms: tuple[float, ...] = STALLS_MS, schemes: tuple[str, ...] = ("claw", "cubic"),
                console: Console | None = None) -> dict[str, Any]:
    """PLT error per page, scheme and injected stall, each load paired with the unstalled load
    of the same round and scheme; the noise from a second unstalled replay."""
    rows: list[dict[str, Any]] = []
    for page in pages:
        if console is not None:
            console.print(f"[dim]stalls on {page}: unstalled twice, then {', '.join(f'{s:g}' for s in stalls_ms)} "
                          f"ms ({runs} rounds each) …[/dim]")
        base = {(r.round, r.scheme): r for r in _stall_replay(page, 0, runs, work, f"stall-{page}-0", None, schemes)
                if r.measured}
        baseline_plt = {k: r.plt_ms or 0.0 for k, r in base.items()}
        for stall_ms in (0.0, *stalls_ms):
            name = f"stall-{page}-{stall_ms:g}" + ("-again" if stall_ms == 0 else "")
            records = _stall_replay(page, stall_ms, runs, work, name, baseline_plt, schemes)
            for scheme in schemes:
                pairs = [(r, base[(r.round, r.scheme)]) for r in records
                         if r.scheme == scheme and r.measured and (r.round, r.scheme) in base]
                rows.append(pair_row(page, scheme, stall_ms, pairs))
    return {"rows": rows, "suggested": suggest_bound(rows)}


def pair_row(page: str, scheme: str, stall_ms: float, pairs: list[tuple[LoadRecord, LoadRecord]]) -> dict[str, Any]:
    """One row of the table: the PLT error of the pairs (stalled − unstalled) and the lateness
    the emulator recorded in the stalled loads."""
    row: dict[str, Any] = {"page": page, "scheme": scheme, "stall_ms": stall_ms, "pairs": len(pairs)}
    if not pairs:
        return row
    delta = np.array([(s.plt_ms or 0.0) - (b.plt_ms or 0.0) for s, b in pairs])
    rel = np.abs(delta) / np.array([b.plt_ms or 1.0 for _, b in pairs]) * 100.0
    recorded = [max(v for v in (s.subframe_late_max_ms, s.delivery_err_max_ms, 0.0) if v is not None)
                for s, _ in pairs]
    row.update(recorded_late_ms=round(float(np.median(recorded)), 2),
               plt_ms=round(float(np.median([b.plt_ms or 0.0 for _, b in pairs])), 1),
               delta_ms_median=round(float(np.median(delta)), 1),
               abs_err_pct_median=round(float(np.median(rel)), 2),
               abs_err_pct_p90=round(float(np.quantile(rel, 0.9)), 2),
               excess_ms_median=round(float(np.median(delta - stall_ms)), 1))
    return row


def _stalls_option(value: str) -> tuple[float, ...]:
    """``--stalls-ms``: positive numbers, comma-separated, in increasing order."""
    try:
        stalls = tuple(float(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: not a comma-separated list of numbers of ms") from None
    if not stalls or any(s <= 0 for s in stalls) or list(stalls) != sorted(set(stalls)):
        raise click.BadParameter(f"{value!r}: stalls must be positive and increasing")
    return stalls


def suggest_bound(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest stall whose median PLT error stays within the noise (the second unstalled
    replay's p90 error, per page and scheme) for every page and scheme; every smaller stall
    must stay within too."""
    noise = {(r["page"], r["scheme"]): r.get("abs_err_pct_p90") for r in rows if r["stall_ms"] == 0}
    stalls = sorted({r["stall_ms"] for r in rows if r["stall_ms"] > 0})
    bound = 0.0
    for stall in stalls:
        within = [r.get("abs_err_pct_median") is not None and noise.get((r["page"], r["scheme"])) is not None
                  and r["abs_err_pct_median"] <= noise[(r["page"], r["scheme"])]
                  for r in rows if r["stall_ms"] == stall]
        if not within or not all(within):
            break
        bound = stall
    return {"max_stall_ms": bound, "noise_p90_pct": {f"{p}/{s}": v for (p, s), v in noise.items()},
            "rule": "the largest injected stall whose median |PLT error| is within the unstalled noise (p90) "
                    "for every page and scheme, and every smaller one too"}


def doctor_line(summary: dict[str, Any]) -> str:
    """``clawbed doctor``'s verdict before the runs, in one line: what was not ok and the probe's
    wake-ups."""
    late = (f"; timer wake-ups late p99 {summary['wakeup_late_p99_ms']:g}, max {summary['wakeup_late_max_ms']:g} ms"
            if summary.get("wakeups") and summary.get("wakeup_late_max_ms") is not None else "")
    reasons = ", ".join(r.split(":")[0] for r in summary.get("reasons", [])) or "nothing"
    return f"machine before the runs: clawbed doctor {summary['verdict']} ({reasons} not ok){late}"


def render_timing(results: dict[str, Any], console: Console) -> None:
    if results.get("clean"):
        table = TerminalTable(title=f"first attempts timing-clean, default replay — {results['date']}")
        table.add_column("placement")
        table.add_column("loads", justify="right")
        for rule in LATE_RULES:
            table.add_column(f"{rule} %", justify="right")
        table.add_column("reruns", justify="right")
        for c in results["clean"]:
            table.add_row(c["placement"], str(c["first_attempts_measured"]),
                          *(str(c["clean_share_pct"].get(rule, "–")) for rule in LATE_RULES), str(c["late_reruns"]))
        console.print(table)
    if results.get("doctor"):
        console.print(doctor_line(results["doctor"]))
    stalls = results.get("stalls")
    if stalls:
        table = TerminalTable(title="lateness → PLT error (stalled − unstalled, same round and scheme)")
        for name in ("page", "scheme", "stall", "pairs", "late ms", "PLT ms", "Δ ms", "|err| %", "p90 %"):
            table.add_column(name, justify="left" if name in ("page", "scheme") else "right")
        for r in stalls["rows"]:
            stall = "noise" if r["stall_ms"] == 0 else f"{r['stall_ms']:g}"
            table.add_row(r["page"], r["scheme"], stall, str(r["pairs"]),
                          *(str(r.get(k, "–")) for k in ("recorded_late_ms", "plt_ms", "delta_ms_median",
                                                          "abs_err_pct_median", "abs_err_pct_p90")))
        console.print(table)
        console.print(f"largest stall within the noise: {stalls['suggested']['max_stall_ms']:g} ms "
                      f"(the evidence rule's bounds: replay/lateness.py EvidenceRule, docs/timing.md)")


@click.command()
@click.option("--h2-runs", type=click.IntRange(min=1), default=4, show_default=True, help="rounds with the h2 loader")
@click.option("--browser-runs", type=click.IntRange(min=0), default=2, show_default=True,
              help="rounds with Chromium (0: none)")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS, show_default=True)
@click.option("--clean-runs", type=click.IntRange(min=0), default=10, show_default=True,
              help="rounds of the default replay for the first-attempt timing-clean share, per placement "
                   "(0: none; 10 rounds are 20 loads, one of them 5 %)")
@click.option("--stall-runs", type=click.IntRange(min=0), default=4, show_default=True,
              help="rounds per page and stall for the lateness → PLT error table (0: none)")
@click.option("--stalls-ms", default=",".join(f"{s:g}" for s in STALLS_MS), show_default=True,
              callback=lambda _ctx, _param, value: _stalls_option(value),
              help="the injected stalls of the lateness → PLT error table, ms, comma-separated")
@click.option("--timing-output", type=click.Path(dir_okay=False, path_type=Path), default=TIMING_RESULTS,
              show_default=True)
def main(h2_runs: int, browser_runs: int, output: Path, clean_runs: int, stall_runs: int,
         stalls_ms: tuple[float, ...], timing_output: Path) -> None:
    """Measure the per-load overhead of a replay and write bench-results/replay.json; then the
    first-attempt timing-clean share and the lateness → PLT error table (bench-results/timing.json)."""
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
        timing: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M %Z"),
                                  "machine": {**host_facts(), "kernel": platform.release()}, "trace": BUSY_TRACE.name,
                                  # The machine as the runs found it (a share is worth what the machine was).
                                  "doctor": doctor.judge(doctor.collect()).summary()}
        if clean_runs:
            console.print(f"[dim]first-attempt timing-clean share of the default replay ({clean_runs} rounds, "
                          f"default placement and loader off the cell CPU) …[/dim]")
            timing["clean"] = [clean_share(clean_runs, Path(tmp), split) for split in (False, True)]
        if stall_runs:
            timing["stalls"] = stall_table(stall_runs, Path(tmp), stalls_ms=stalls_ms, console=console)
        if clean_runs or stall_runs:
            render_timing(timing, console)
            timing_output.parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(timing_output, "w") as f:
                json.dump(timing, f, indent=1)
                f.write("\n")
            console.print(f"timing results: {timing_output}")
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

"""Benchmarks that run a suite's own scenarios (``orchestrator/suites/``) the way the suite
runs them (:func:`clawbed.orchestrator.runner.replay_job`, the scenario as
``orchestrator/spec.py`` expands it), for a fixed budget of loads and without re-runs, so that
every load is a first attempt. ``python -m clawbed.orchestrator.bench`` (root: namespaces;
``make bench`` runs its default part) has two parts, ``--only cell,pages``:

* **cell** — Fig 19's all-CLAW cell (``paper.yaml``, condition ``all-claw``: 45 users in one
  round-robin cell, 44 other UEs each loading set-06 about once per 30 s over its own CLAW
  instance and compiled client, beside the replay's UE), the suite's first ``--cell-runs``
  rounds of claw and cubic on the replay's UE. It reports the emulator's CPU and the 44
  clients' (each client's process tree: its launcher and the compiled client), in % of one
  core from ``/proc/PID/stat`` over the loads' span; the subframe lateness p50 / p99 / max over
  every load's subframes (the ground truth's ``wake_lateness_us``, counted as
  ``replay/lateness.py`` counts it: an idle cell's subframe only beyond its batch); the share of
  first attempts timing-clean under each late rule; and the PLTs.
* **pages** — the first-attempt timing-clean share over a suite's pages (issue 26's "for the
  paper suite's pages"): for each page, the suite's first scenario that loads it, claw and
  cubic, ``--pages-runs`` rounds; per page and overall.

The cell writes ``bench-results/cell.json``, the pages ``bench-results/timing-pages.json``,
each with the date and the machine; both print a table that fits 80 columns. They sit here, not
in ``replay/bench.py`` beside the replay's other timing steps, because a suite's scenarios are
the orchestrator's (the replay layer imports nothing above it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console

from clawbed.emulator.truth import TruthFormatError, read_truth
from clawbed.errors import ClawbedError, InputError
from clawbed.files import atomic_write
from clawbed.netns import Ledger, ResourceError
from clawbed.orchestrator.runner import ReplayJob, new_run_id, replay_job
from clawbed.orchestrator.spec import LoadedSpec, Scenario, SpecError, load_spec
from clawbed.paths import REPO_ROOT
from clawbed.replay.lateness import LATE_RULES, effective_subframe_lateness_ms, timing_ok_by
from clawbed.replay.records import LoadRecord
from clawbed.replay.rundir import EMULATOR_DIR, LEDGER, host_facts
from clawbed.tables import TerminalTable

SUITES_DIR = REPO_ROOT / "orchestrator" / "suites"
CELL_RESULTS = REPO_ROOT / "bench-results" / "cell.json"
PAGES_RESULTS = REPO_ROOT / "bench-results" / "timing-pages.json"
#: The cell's rounds of claw and cubic (6 loads, about 2 min with the set-up), and the pages'
#: rounds per page.
CELL_RUNS = 3
PAGES_RUNS = 1
#: The suite and scenario of the cell step: Fig 19 all-CLAW (a condition name, label or id).
CELL_SUITE = "paper"
CELL_SCENARIO = "all-claw"
#: The suite whose pages the pages step measures (paper.yaml's pages, h2 loader, 30 s traces).
PAGES_SUITE = "paper-quick"
#: The replay UE's schemes in both steps (those of them the scenario runs).
SCHEMES = ("claw", "cubic")
#: The cell step's acceptance (issue 23): subframe lateness p99 below this, ms.
TARGET_P99_MS = 1.0
#: How often the CPU sampler reads /proc while the cell runs, s (a load's end is read exactly).
SAMPLE_PERIOD_S = 1.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")
#: The emulator's ledger name (emulator/process.py) and a CLAW client's (``<scheme>-client-ue<N>``).
_EMULATOR_NAME = "clawbed-emu"
_CLIENT_NAME = re.compile(r"-client-ue(\d+)$")


# -- the suite and its scenario ------------------------------------------------------------------

def suite_path(name: str) -> Path:
    """A suite named in ``orchestrator/suites/`` (``paper``) or a spec file's path."""
    if name.endswith((".yaml", ".yml")) or "/" in name:
        return Path(name)
    return SUITES_DIR / f"{name}.yaml"


def load_suite(name: str, flag: str) -> LoadedSpec:
    """The validated suite ``name``; an :class:`InputError` naming ``flag`` when there is none."""
    path = suite_path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.yaml")))
        raise InputError(f"{flag} {name}: no such suite ({path}); one of {known}, or a spec file's path")
    try:
        return load_spec(path)
    except SpecError as e:
        raise InputError(f"{flag} {name}: {e}") from None


def find_scenario(spec: LoadedSpec, wanted: str, flag: str) -> Scenario:
    """The one scenario of ``spec`` whose condition name or label is ``wanted``, or whose id
    starts with it."""
    scenarios = spec.scenarios()
    hits = [s for s in scenarios if wanted in (s.condition_name, s.label) or s.id.startswith(wanted)]
    if not hits:
        conditions = ", ".join(dict.fromkeys(s.condition_name for s in scenarios))
        raise InputError(f"{flag} {wanted!r}: no scenario of {spec.path.name} has that condition name, label or id "
                         f"(its conditions: {conditions})")
    if len(hits) > 1:
        raise InputError(f"{flag} {wanted!r}: {len(hits)} scenarios of {spec.path.name} match "
                         f"({', '.join(s.label for s in hits[:6])}{', …' if len(hits) > 6 else ''}); give a label")
    return hits[0]


def replay_schemes(scenario: Scenario, flag: str) -> tuple[str, ...]:
    """Of :data:`SCHEMES`, those the scenario runs."""
    schemes = tuple(s for s in SCHEMES if s in scenario.schemes)
    if not schemes:
        raise InputError(f"{flag}: scenario {scenario.label} runs {', '.join(scenario.schemes)}, none of "
                         f"{', '.join(SCHEMES)}")
    return schemes


def check_runs(scenario: Scenario, runs: int, flag: str) -> None:
    """The budget's rounds are the suite's first ones: no more than it runs (the rounds spread
    over the trace by the suite's repetitions, so a round beyond them has no stretch)."""
    if runs > scenario.repetitions:
        raise InputError(f"{flag} {runs}: {scenario.label} runs {scenario.repetitions} round(s) in its suite; "
                         f"at most that many")


def suite_pages(spec: LoadedSpec, only: Iterable[str] = (), flag: str = "--pages-only") -> list[Scenario]:
    """Each page of the suite with the suite's first scenario (in run order) that loads it;
    only the pages ``only`` names when it names any."""
    first: dict[str, Scenario] = {}
    for sc in spec.scenarios():
        first.setdefault(sc.page, sc)
    wanted = list(only)
    unknown = [p for p in wanted if p not in first]
    if unknown:
        raise InputError(f"{flag} {', '.join(unknown)}: not a page of {spec.path.name} (its pages: "
                         f"{', '.join(first)})")
    return [first[p] for p in wanted] if wanted else list(first.values())


def run_scenario(scenario: Scenario, runs: int, schemes: tuple[str, ...], run_dir: Path,
                 on_load: Callable[[LoadRecord], None] | None = None) -> list[LoadRecord]:
    """The scenario's first ``runs`` rounds of ``schemes``, as the suite runs them, without
    re-runs: each record is a load's first attempt. A failure after some loads raises with
    the loads done kept in ``run_dir``."""
    plan = tuple((r, s) for r in range(runs) for s in schemes)
    job = ReplayJob(scenario, plan, run_dir, new_run_id(), rerun_late=False)
    records: list[LoadRecord] = []

    def got(record: LoadRecord) -> None:
        records.append(record)
        if on_load is not None:
            on_load(record)

    try:
        replay_job(job, got)
    except ClawbedError as e:
        raise ScenarioFailed(str(e), records) from e
    return records


class ScenarioFailed(ClawbedError):
    """A bench replay that ended early; ``records`` holds the loads it finished."""

    def __init__(self, message: str, records: list[LoadRecord]) -> None:
        super().__init__(message)
        self.records = records


# -- CPU from /proc ------------------------------------------------------------------------------

def parse_stat(text: str) -> tuple[int, int, int]:
    """(parent PID, user + system clock ticks, start time in ticks) from a ``/proc/PID/stat``."""
    # The command name (field 2) is in parentheses and may hold spaces: count after it.
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19])


def read_processes(proc: Path = Path("/proc")) -> dict[int, tuple[int, int, int]]:
    """Every process's :func:`parse_stat`, by PID (those that end meanwhile left out)."""
    out: dict[int, tuple[int, int, int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            out[int(entry.name)] = parse_stat((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
    return out


def tree_ticks(root: int, processes: dict[int, tuple[int, int, int]]) -> int:
    """CPU ticks of ``root`` and its descendants (a client's launcher and its compiled child)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in processes.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += processes[pid][1] if pid in processes else 0
        todo += children.get(pid, [])
    return total


def ledger_roles(entries: Iterable[dict[str, Any]]) -> dict[str, tuple[int, int | None]]:
    """The run's processes to measure, by role, from its ledger: ``emulator`` and ``ue<N>``
    (the CLAW client of other UE N ≥ 1; the replay's own UE 0 gets a client per load) →
    (PID, start ticks)."""
    roles: dict[str, tuple[int, int | None]] = {}
    for e in entries:
        if e.get("kind") != "process" or "pid" not in e:
            continue
        start = e.get("start_ticks")
        match = _CLIENT_NAME.search(str(e["name"]))
        if e["name"] == _EMULATOR_NAME:
            roles["emulator"] = (int(e["pid"]), start)
        elif match is not None and int(match.group(1)) >= 1:
            roles[f"ue{int(match.group(1))}"] = (int(e["pid"]), start)
    return roles


def machine_ticks(text: str) -> tuple[int, int, int]:
    """(busy, total, steal) ticks of all CPUs from ``/proc/stat``'s text."""
    values = [int(v) for v in text.split("\n", 1)[0].split()[1:]]
    total = sum(values[:8])  # guest and guest_nice are inside user and nice already
    idle = values[3] + values[4]  # idle and iowait
    return total - idle, total, values[7]


@dataclass(frozen=True)
class CpuSample:
    """CPU ticks so far of each role's process tree, and of the machine, at ``unix_s``."""

    unix_s: float
    ticks: dict[str, int]
    machine: tuple[int, int, int] | None = None


class CpuSampler:
    """Reads the run's ledger and ``/proc`` every :data:`SAMPLE_PERIOD_S` in a thread of its
    own while a replay runs (a process's ticks vanish with it, so its last reading counts)."""

    def __init__(self, ledger_path: Path, period_s: float = SAMPLE_PERIOD_S, proc: Path = Path("/proc")) -> None:
        self.ledger_path = ledger_path
        self.period_s = period_s
        self.proc = proc
        self.samples: list[CpuSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-cpu-sampler", daemon=True)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def sample(self) -> CpuSample | None:
        """One reading now (None before the ledger names the emulator)."""
        if not self.ledger_path.is_file():  # the replay has not made its run directory yet
            return None
        try:
            roles = ledger_roles(Ledger(self.ledger_path).entries())
        except (OSError, ResourceError):
            return None
        if "emulator" not in roles:
            return None
        processes = read_processes(self.proc)
        ticks = {role: tree_ticks(pid, processes) for role, (pid, start) in roles.items()
                 if pid in processes and (start is None or processes[pid][2] == start)}
        try:
            machine: tuple[int, int, int] | None = machine_ticks((self.proc / "stat").read_text())
        except (OSError, ValueError, IndexError):
            machine = None
        sample = CpuSample(time.time(), ticks, machine)
        with self._lock:
            self.samples.append(sample)
        return sample

    def span(self, t0_unix_s: float, t1_unix_s: float) -> tuple[CpuSample, CpuSample] | None:
        """The samples that bound [t0, t1]: the last one at or before t0 (else the first), and
        the last one at or before t1 (else the last)."""
        with self._lock:
            samples = list(self.samples)
        return bound_samples(samples, t0_unix_s, t1_unix_s)


def bound_samples(samples: list[CpuSample], t0: float, t1: float) -> tuple[CpuSample, CpuSample] | None:
    if len(samples) < 2:
        return None
    before = [s for s in samples if s.unix_s <= t0]
    start = before[-1] if before else samples[0]
    until = [s for s in samples if s.unix_s <= t1 and s.unix_s > start.unix_s]
    end = until[-1] if until else samples[-1]
    return (start, end) if end.unix_s > start.unix_s else None


def cpu_between(a: CpuSample, b: CpuSample, clk_tck: int = _CLK_TCK) -> dict[str, Any]:
    """% of one core of the emulator and of each client between two samples (roles in both),
    the clients' total and spread, and the machine's busy and steal shares (% of all CPUs)."""
    wall_s = b.unix_s - a.unix_s

    def pct(role: str) -> float:
        return 100.0 * (b.ticks[role] - a.ticks[role]) / clk_tck / wall_s

    roles = [r for r in b.ticks if r in a.ticks]
    clients = {r: round(pct(r), 2) for r in sorted(roles, key=lambda r: (len(r), r)) if r.startswith("ue")}
    values = list(clients.values())
    out: dict[str, Any] = {
        "span_s": round(wall_s, 1),
        "emulator_pct": round(pct("emulator"), 1) if "emulator" in roles else None,
        "clients": len(clients),
        "clients_total_pct": round(sum(values), 1) if values else None,
        "client_pct": ({"mean": round(float(np.mean(values)), 2), "min": round(min(values), 2),
                        "max": round(max(values), 2)} if values else None),
        "per_client_pct": clients}
    if a.machine is not None and b.machine is not None and b.machine[1] > a.machine[1]:
        total = b.machine[1] - a.machine[1]
        out["machine_busy_pct"] = round(100.0 * (b.machine[0] - a.machine[0]) / total, 1)
        out["steal_pct"] = round(100.0 * (b.machine[2] - a.machine[2]) / total, 2)
    return out


# -- lateness over the loads' subframes -----------------------------------------------------------

#: Per-UE truth columns that make a subframe busy (replay/lateness.py's LoadTiming keeps the same).
BUSY_FIELDS = ("queue_bytes", "demand_rbs")


def span_lateness_ms(t_ms: np.ndarray, wake_lateness_us: np.ndarray, busy: np.ndarray,
                     spans_ms: Iterable[tuple[float, float]]) -> np.ndarray:
    """The effective lateness, ms, of every subframe inside one of ``spans_ms`` (emulated ms,
    ends included), as a load's timing counts it."""
    t = np.asarray(t_ms, dtype=np.float64)
    inside = np.zeros(len(t), dtype=bool)
    for t0, t1 in spans_ms:
        inside |= (t >= t0) & (t <= t1)
    late = effective_subframe_lateness_ms(np.asarray(wake_lateness_us, dtype=np.float64)[inside],
                                          np.asarray(busy, dtype=bool)[inside])
    return late[np.isfinite(late)]


def lateness_summary(late_ms: np.ndarray, busy_share_pct: float | None = None) -> dict[str, Any]:
    """p50, p99 and max, ms, and how many subframes."""
    if len(late_ms) == 0:
        return {"subframes": 0, "p50": None, "p99": None, "max": None}
    out: dict[str, Any] = {"subframes": int(len(late_ms)),
                           "p50": round(float(np.percentile(late_ms, 50)), 3),
                           "p99": round(float(np.percentile(late_ms, 99)), 3),
                           "max": round(float(late_ms.max()), 3)}
    if busy_share_pct is not None:
        out["busy_share_pct"] = busy_share_pct
    return out


def truth_lateness(truth_path: Path, n_ues: int, spans_unix_s: Iterable[tuple[float, float]]) -> dict[str, Any]:
    """:func:`lateness_summary` over the subframes of ``truth.cbcol`` within the loads' spans
    (Unix s), with the share of them during which the cell held data."""
    names = ["t_ms", "wake_lateness_us", *(f"ues[{i}].{f}" for i in range(n_ues) for f in BUSY_FIELDS)]
    truth = read_truth(truth_path, names)
    if truth.origin_unix_ns is None or "wake_lateness_us" not in truth.columns:
        raise TruthFormatError(f"{truth_path}: no origin_unix_ns in its header or no wake_lateness_us column")
    origin_s = truth.origin_unix_ns / 1e9
    busy = np.zeros(truth.rows, dtype=bool)
    for name, values in truth.columns.items():
        if name.startswith("ues["):
            busy |= np.nan_to_num(values.astype(np.float64)) > 0
    spans_ms = [((a - origin_s) * 1000.0, (b - origin_s) * 1000.0) for a, b in spans_unix_s]
    t = truth["t_ms"].astype(np.float64)
    late = span_lateness_ms(t, truth["wake_lateness_us"], busy, spans_ms)
    inside = np.zeros(truth.rows, dtype=bool)
    for t0, t1 in spans_ms:
        inside |= (t >= t0) & (t <= t1)
    share = round(100.0 * float(busy[inside].mean()), 1) if inside.any() else None
    return lateness_summary(late, share)


# -- the loads' figures ----------------------------------------------------------------------------

def clean_share(records: list[LoadRecord]) -> tuple[int, dict[str, float | None]]:
    """(first attempts measured, % timing-clean under each late rule)."""
    measured = [r for r in records if r.subframe_late_max_ms is not None or r.delivery_err_max_ms is not None]
    share = {rule: round(100.0 * sum(1 for r in measured if timing_ok_by(r, rule)) / len(measured), 1)
             if measured else None for rule in LATE_RULES}
    return len(measured), share


def plt_by_scheme(records: list[LoadRecord], schemes: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per scheme: loads, loads measured, and the PLT's mean, median, min and max, ms."""
    out: dict[str, dict[str, Any]] = {}
    for scheme in schemes:
        mine = [r for r in records if r.scheme == scheme]
        plts = np.array([r.plt_ms for r in mine if r.measured and r.plt_ms is not None], dtype=np.float64)
        row: dict[str, Any] = {"loads": len(mine), "ok": int(len(plts))}
        if len(plts):
            row.update(mean=round(float(plts.mean()), 1), median=round(float(np.median(plts)), 1),
                       min=round(float(plts.min()), 1), max=round(float(plts.max()), 1))
        out[scheme] = row
    return out


def load_spans(records: list[LoadRecord]) -> list[tuple[float, float]]:
    return [(r.t_start_unix_s, r.t_end_unix_s) for r in records
            if r.t_start_unix_s is not None and r.t_end_unix_s is not None]


@dataclass
class CellRun:
    """What the cell step measured: its loads, CPU samples and the run directory."""

    scenario: Scenario
    schemes: tuple[str, ...]
    runs: int
    records: list[LoadRecord]
    run_dir: Path
    wall_s: float
    cpu: dict[str, Any] | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)


def cell_result(run: CellRun, suite: LoadedSpec) -> dict[str, Any]:
    """The cell step's figures (JSON-ready) from a finished (or cut short) run: lateness from
    the run's ground truth, the clean share, the PLTs."""
    sc = run.scenario
    n_ues = 1 + len(sc.condition.other_ues)
    result: dict[str, Any] = {
        "suite": suite.path.name, "scenario": sc.label, "scenario_id": sc.id, "ues": n_ues,
        "other_ues": sorted({f"{o.kind} {o.page} over {o.scheme}, off {o.off_ms:g} ms" if o.off_ms
                             else f"{o.kind} {o.page} over {o.scheme}" for o in sc.condition.other_ues}),
        "scheduler": sc.condition.scheduler, "loader": sc.loader, "schemes": list(run.schemes),
        "rounds": run.runs, "loads": len(run.records), "wall_s": round(run.wall_s, 1),
        "cpu": run.cpu, "target_p99_ms": TARGET_P99_MS}
    spans = load_spans(run.records)
    try:
        result["lateness_ms"] = truth_lateness(run.run_dir / EMULATOR_DIR / "truth.cbcol", n_ues, spans)
    except (TruthFormatError, OSError) as e:
        result["lateness_ms"] = None
        run.notes.append(f"lateness not measured: {e}")
    p99 = (result["lateness_ms"] or {}).get("p99")
    result["p99_below_target"] = p99 < TARGET_P99_MS if p99 is not None else None
    result["first_attempts"], result["clean_share_pct"] = clean_share(run.records)
    result["plt_ms"] = plt_by_scheme(run.records, run.schemes)
    result["errors"] = [f"load {r.load} ({r.scheme}): {r.error}" for r in run.records if r.error]
    if run.error:
        result["error"] = run.error
    result["notes"] = run.notes
    return result


def measure_cell(suite: LoadedSpec, scenario: Scenario, runs: int, work: Path,
                 console: Console | None = None) -> dict[str, Any]:
    """Run the cell step (see the module's docstring) and return its figures."""
    schemes = replay_schemes(scenario, "--cell-scenario")
    run_dir = work / f"cell-{scenario.id}"
    sampler = CpuSampler(run_dir / LEDGER)
    last: list[CpuSample] = []

    def on_load(record: LoadRecord) -> None:
        sample = sampler.sample()  # the load's end, read at once (the processes are still there)
        if sample is not None:
            last.append(sample)

    if console is not None:
        console.print(f"[dim]{scenario.label} of {suite.path.name}: {1 + len(scenario.condition.other_ues)} UEs, "
                      f"{runs} round(s) of {', '.join(schemes)}, {scenario.loader} loader, no re-runs …[/dim]")
    started = time.monotonic()
    sampler.start()
    error = None
    try:
        records = run_scenario(scenario, runs, schemes, run_dir, on_load)
    except ScenarioFailed as e:
        records, error = e.records, str(e)
    finally:
        sampler.stop()
    run = CellRun(scenario, schemes, runs, records, run_dir, time.monotonic() - started, error=error)
    spans = load_spans(records)
    bounds = sampler.span(min(a for a, _ in spans), max(b for _, b in spans)) if spans else None
    if bounds is not None and last:
        bounds = (bounds[0], last[-1])
    run.cpu = cpu_between(*bounds) if bounds is not None else None
    if run.cpu is None:
        run.notes.append("CPU not measured: fewer than two readings over the loads")
    return cell_result(run, suite)


def _fmt(value: Any, digits: int = 1) -> str:
    """A figure for a table: ``–`` when not measured."""
    if value is None:
        return "–"
    return f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def render_cell(result: dict[str, Any], console: Console, date: str = "") -> None:
    """The cell step's short table (fits 80 columns) and its verdict on the target."""
    table = TerminalTable(title=f"{result['ues']}-UE cell: {result['scenario']} ({result['suite']}), "
                                f"{result['loads']} loads{', ' + date if date else ''}")
    table.add_column("what")
    table.add_column("figure", justify="right")
    cpu = result.get("cpu") or {}
    table.add_row("emulator CPU, % of a core", _fmt(cpu.get("emulator_pct")))
    spread = cpu.get("client_pct")
    table.add_row(f"{cpu.get('clients', 0)} CLAW clients, % of a core: total", _fmt(cpu.get("clients_total_pct")))
    if spread:
        table.add_row("  per client: mean (min–max)",
                      f"{spread['mean']:.2f} ({spread['min']:.2f}–{spread['max']:.2f})")
    if cpu.get("machine_busy_pct") is not None:
        table.add_row("machine busy / steal, % of all CPUs", f"{cpu['machine_busy_pct']:.1f} / {cpu['steal_pct']:.2f}")
    late = result.get("lateness_ms") or {}
    table.add_row("subframe lateness p50 / p99 / max, ms", " / ".join(_fmt(late.get(k), 3) for k in ("p50", "p99", "max")))
    table.add_row("  subframes (busy %)", f"{late.get('subframes', 0):,} ({_fmt(late.get('busy_share_pct'))})")
    share = result.get("clean_share_pct") or {}
    table.add_row(f"first attempts timing-clean ({result.get('first_attempts', 0)})",
                  ", ".join(f"{rule} {_fmt(share.get(rule))} %" for rule in LATE_RULES))
    for scheme, p in (result.get("plt_ms") or {}).items():
        figure = (f"{p['mean']:,.0f} / {p['median']:,.0f} ({p['min']:,.0f}–{p['max']:,.0f})"
                  if p.get("ok") else "–")
        table.add_row(f"PLT {scheme}, ms ({p['ok']}/{p['loads']}): mean / median", figure)
    table.add_row("wall time of the step, s", _fmt(result.get("wall_s"), 0))
    console.print(table)
    p99 = late.get("p99")
    if p99 is not None:
        verdict = "below" if p99 < result.get("target_p99_ms", TARGET_P99_MS) else "NOT below"
        console.print(f"lateness p99 {p99:.3f} ms: {verdict} the {result.get('target_p99_ms', TARGET_P99_MS):g} ms "
                      f"target")
    for line in (*result.get("errors", []), *([result["error"]] if result.get("error") else []),
                 *result.get("notes", [])):
        console.print(f"[yellow]{line}[/yellow]")


# -- first attempts over a suite's pages -----------------------------------------------------------

def page_row(scenario: Scenario, records: list[LoadRecord], error: str | None = None) -> dict[str, Any]:
    """One page's first attempts: how many, the share timing-clean under each rule, the
    median worst slip and PLT."""
    measured, share = clean_share(records)
    slips = [r.subframe_late_max_ms for r in records if r.subframe_late_max_ms is not None]
    plts = [r.plt_ms for r in records if r.measured and r.plt_ms is not None]
    row: dict[str, Any] = {"page": scenario.page, "scenario": scenario.label, "loads": len(records),
                           "measured": measured, "clean_share_pct": share,
                           "clean": {rule: sum(1 for r in records if timing_ok_by(r, rule)) for rule in LATE_RULES},
                           "worst_slip_ms_median": round(float(np.median(slips)), 2) if slips else None,
                           "plt_ms_median": round(float(np.median(plts)), 1) if plts else None,
                           # Each attempt's figures, so that what failed a rule can be read off.
                           "first_attempts": [{"scheme": r.scheme, "plt_ms": r.plt_ms,
                                               "subframe_late_max_ms": r.subframe_late_max_ms,
                                               "subframe_stall_ms": r.subframe_stall_ms,
                                               "delivery_err_max_ms": r.delivery_err_max_ms,
                                               "timing_ok": {rule: timing_ok_by(r, rule) for rule in LATE_RULES}}
                                              for r in records]}
    if error:
        row["error"] = error
    return row


def overall_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The pages' first attempts pooled: each load counts once, whatever its page."""
    measured = sum(r["measured"] for r in rows)
    return {"loads": sum(r["loads"] for r in rows), "measured": measured,
            "clean_share_pct": {rule: round(100.0 * sum(r["clean"][rule] for r in rows) / measured, 1)
                                if measured else None for rule in LATE_RULES}}


def measure_pages(suite: LoadedSpec, scenarios: list[Scenario], runs: int, work: Path,
                  console: Console | None = None) -> dict[str, Any]:
    """Run the pages step (see the module's docstring) and return its figures."""
    rows = []
    for sc in scenarios:
        schemes = replay_schemes(sc, "--pages")
        if console is not None:
            console.print(f"[dim]first attempts on {sc.label} ({runs} round(s) of {', '.join(schemes)}, "
                          f"{sc.loader} loader) …[/dim]")
        try:
            records, error = run_scenario(sc, runs, schemes, work / f"pages-{sc.id}"), None
        except ScenarioFailed as e:
            records, error = e.records, str(e)
        rows.append(page_row(sc, records, error))
    return {"suite": suite.path.name, "rounds_per_page": runs, "schemes": list(SCHEMES),
            "loader": scenarios[0].loader if scenarios else None, "pages": rows, "overall": overall_row(rows)}


def render_pages(result: dict[str, Any], console: Console, date: str = "") -> None:
    """Per page and overall, the share of first attempts timing-clean (fits 80 columns)."""
    table = TerminalTable(title=f"first attempts timing-clean, {result['suite']}'s pages ({result['loader']} loader, "
                                f"{result['rounds_per_page']} round(s) a page){', ' + date if date else ''}")
    table.add_column("page")
    table.add_column("loads", justify="right")
    for rule in LATE_RULES:
        table.add_column(f"{rule} %", justify="right")
    table.add_column("worst slip ms", justify="right")
    table.add_column("PLT ms", justify="right")
    for r in result["pages"]:
        table.add_row(r["page"], str(r["measured"]), *(_fmt(r["clean_share_pct"].get(rule)) for rule in LATE_RULES),
                      _fmt(r["worst_slip_ms_median"], 2), _fmt(r["plt_ms_median"], 0))
    o = result["overall"]
    table.add_row("all pages", str(o["measured"]), *(_fmt(o["clean_share_pct"].get(rule)) for rule in LATE_RULES),
                  "", "")
    console.print(table)
    console.print("worst slip and PLT: medians over the page's first attempts")
    for r in result["pages"]:
        if r.get("error"):
            console.print(f"[yellow]{r['page']}: {r['error']}[/yellow]")


def with_loader(scenario: Scenario, loader: str | None) -> Scenario:
    """The scenario with another loader (the bench's override), its id kept: the suite's own."""
    return scenario if loader is None else dataclasses.replace(scenario, loader=loader)


# -- the command -------------------------------------------------------------------------------

#: The parts (``--only``), in the order they run.
PARTS = ("cell", "pages")
#: What ``make bench`` runs.
DEFAULT_PARTS = "cell"


def parse_parts(ctx: click.Context | None, param: click.Parameter | None, value: str) -> tuple[str, ...]:
    """``--only``'s comma-separated parts, each one of :data:`PARTS`."""
    names = [p.strip() for p in value.split(",") if p.strip()]
    unknown = [n for n in names if n not in PARTS]
    if unknown or not names:
        raise click.BadParameter(f"{', '.join(unknown) or 'no part'}: the parts are {', '.join(PARTS)} "
                                 f"(comma-separated)")
    return tuple(dict.fromkeys(names))


def _write(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")


def _stamp() -> dict[str, Any]:
    return {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": {**host_facts(), "kernel": platform.release()}}


@click.command()
@click.option("--only", "parts", default=DEFAULT_PARTS, show_default=True, callback=parse_parts,
              help=f"the parts to run, comma-separated: {', '.join(PARTS)}")
@click.option("--cell-suite", default=CELL_SUITE, show_default=True,
              help="cell: the suite (a name in orchestrator/suites/ or a spec file)")
@click.option("--cell-scenario", default=CELL_SCENARIO, show_default=True,
              help="cell: the suite's scenario (a condition name, label or id)")
@click.option("--cell-runs", type=click.IntRange(min=1), default=CELL_RUNS, show_default=True,
              help="cell: rounds of claw and cubic (the suite's first rounds)")
@click.option("--cell-loader", type=click.Choice(["browser", "h2"]), default=None,
              help="cell: the loader  [default: the suite's]")
@click.option("--cell-output", type=click.Path(dir_okay=False, path_type=Path), default=CELL_RESULTS,
              show_default=True)
@click.option("--pages", "pages_suite", default=PAGES_SUITE, show_default=True,
              help="pages: the suite whose pages are loaded (a name in orchestrator/suites/ or a spec file)")
@click.option("--pages-runs", type=click.IntRange(min=1), default=PAGES_RUNS, show_default=True,
              help="pages: rounds of claw and cubic per page")
@click.option("--pages-only", default="", help="pages: only these of the suite's pages, comma-separated")
@click.option("--pages-output", type=click.Path(dir_okay=False, path_type=Path), default=PAGES_RESULTS,
              show_default=True)
def main(parts: tuple[str, ...], cell_suite: str, cell_scenario: str, cell_runs: int, cell_loader: str | None,
         cell_output: Path, pages_suite: str, pages_runs: int, pages_only: str, pages_output: Path) -> None:
    """Run a suite's scenarios for a fixed budget: Fig 19's 45-UE all-CLAW cell (CPU, lateness,
    first attempts, PLTs; bench-results/cell.json) and, with --only pages, the first-attempt
    timing-clean share over a suite's pages (bench-results/timing-pages.json)."""
    console = Console()
    # The scenarios are checked before anything runs (and without root).
    try:
        if "cell" in parts:
            cell_spec = load_suite(cell_suite, "--cell-suite")
            cell = with_loader(find_scenario(cell_spec, cell_scenario, "--cell-scenario"), cell_loader)
            replay_schemes(cell, "--cell-scenario")
            check_runs(cell, cell_runs, "--cell-runs")
        if "pages" in parts:
            pages_spec = load_suite(pages_suite, "--pages")
            page_scenarios = suite_pages(pages_spec, [p.strip() for p in pages_only.split(",") if p.strip()])
            for sc in page_scenarios:
                replay_schemes(sc, "--pages")
                check_runs(sc, pages_runs, "--pages-runs")
    except InputError as e:
        raise click.UsageError(str(e)) from None
    if os.geteuid() != 0:
        console.print("suite bench: skipped (needs root: network namespaces)")
        return
    with tempfile.TemporaryDirectory(prefix="clawbed-suite-bench-") as tmp:
        if "cell" in parts:
            cell_results = {**_stamp(), **measure_cell(cell_spec, cell, cell_runs, Path(tmp), console)}
            render_cell(cell_results, console, cell_results["date"])
            _write(cell_output, cell_results)
            console.print(f"cell results: {cell_output}")
        if "pages" in parts:
            pages_results = {**_stamp(), **measure_pages(pages_spec, page_scenarios, pages_runs, Path(tmp), console)}
            render_pages(pages_results, console, pages_results["date"])
            _write(pages_output, pages_results)
            console.print(f"pages results: {pages_output}")


if __name__ == "__main__":
    main()

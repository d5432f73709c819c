"""Runs as first-class things: ``clawbed runs`` lists every replay and suite sweep the result
store knows (name, date, trace, page, schemes, loads, status, median PLT per scheme) and
``clawbed runs show NAME`` prints one's PLT table and where its report is.

A replay is recorded in the store like a suite's loads: suite ``replay`` (:data:`REPLAY_SUITE`),
sweep and scenario id the run's name, one row per load written as the load ends
(:class:`ReplayRecorder`), so ``clawbed results query replay`` and the listing read one place.
The replay package sits below the orchestrator and does not import it: the CLI layer
(``clawbed/cli.py``) hands ``clawbed replay`` the recorder. A store that cannot be written is a
warning, not a lost run (the run directory has every load), and a run directory the store does
not know, or knows less of than its files (made before, or while the store was locked), is
imported from its ``manifest.json`` and ``results.jsonl`` when the runs are listed.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from clawbed.errors import InputError
from clawbed.orchestrator.store import LoadRow, Store
from clawbed.replay.records import LoadRecord
from clawbed.replay.report import REPORT_HTML, plt_stats, stats_table
from clawbed.replay.rundir import MANIFEST, RESULTS_JSONL, read_results
from clawbed.tables import Column, Listing, format_option, styled

#: The store's suite name of every replay (each one a sweep of it).
REPLAY_SUITE = "replay"
#: The store a replay records into: its runs folder's (``--runs-dir``, else ``<runs>``).
STORE_NAME = "results.sqlite"
#: How long a replay waits for a store another process holds, s, before warning and going on.
REPLAY_BUSY_TIMEOUT_S = 5.0
STATUS_STYLE = {"complete": "green", "failed": "red", "interrupted": "yellow", "running": "cyan"}


def replay_settings(config: Mapping[str, Any], run_dir: Path) -> dict[str, Any]:
    """What the store keeps of a replay's config (a manifest's ``config``): the listing's trace,
    page and schemes, and the loader, loads per scheme, seed and run directory."""
    return {"trace": Path(str(config["trace"])).name, "page": config["page"], "schemes": list(config["schemes"]),
            "loader": config.get("loader"), "runs": config.get("runs"), "seed": config.get("seed"),
            "run_dir": str(run_dir)}


def _label(settings: dict[str, Any]) -> str:
    return f"{settings['page']} on {settings['trace']}"


class ReplayRecorder:
    """Records one replay into the store as it goes: the run when it starts, each load as it
    ends, the status at the end. Every write that fails (the store locked past
    :data:`REPLAY_BUSY_TIMEOUT_S`, read-only, full) is one warning and the recorder stops
    writing; the run goes on, and ``clawbed runs`` imports its directory later."""

    def __init__(self, store_path: Path, name: str, settings: dict[str, Any], warn: Callable[[str], None]) -> None:
        self.store_path = store_path
        self.name = name
        self.settings = settings
        self._warn = warn
        self._store: Store | None = None
        self._broken = False
        self._write("open the run's record", self._open)

    @classmethod
    def for_run(cls, run: Any, warn: Callable[[str], None]) -> ReplayRecorder:
        """The recorder of a :class:`clawbed.replay.run.Replay` (into its runs folder's store)."""
        config = {k: getattr(run.config, k) for k in ("trace", "page", "schemes", "loader", "runs", "seed")}
        return cls(run.config.output_root / STORE_NAME, run.name, replay_settings(config, run.run_dir.path), warn)

    def _open(self) -> None:
        self._store = Store(self.store_path, busy_timeout_s=REPLAY_BUSY_TIMEOUT_S)
        self._store.ensure_scenario(REPLAY_SUITE, self.name, self.name, _label(self.settings), self.settings)
        self._store.set_status(REPLAY_SUITE, self.name, self.name, "running", run_dir=self.settings["run_dir"])

    def _write(self, what: str, action: Callable[[], object]) -> None:
        if self._broken:
            return
        try:
            action()
        except (sqlite3.Error, OSError, InputError) as e:
            self._broken = True
            self._warn(f"the result store {self.store_path} could not be written ({what}: {e}); the run goes on and "
                       f"keeps every load in its directory (`clawbed runs` records it later)")

    def load_done(self, record: LoadRecord) -> None:
        """Record one finished load (its own transaction; nothing else waits on it)."""
        def write() -> None:
            assert self._store is not None
            self._store.record_load(LoadRow.from_record(
                record, suite=REPLAY_SUITE, sweep=self.name, scenario_id=self.name, label=_label(self.settings),
                run_dir=self.settings["run_dir"], recorded_unix_s=time.time()))
        self._write(f"load {record.load}", write)

    def finish(self, status: str, error: str | None = None) -> None:
        """The run's end: ``complete``, ``failed`` or ``interrupted``; the store closed."""
        def write() -> None:
            assert self._store is not None
            self._store.set_status(REPLAY_SUITE, self.name, self.name, status, error=error)
        self._write("the run's status", write)
        if self._store is not None:
            self._store.close()


# -- importing run directories --------------------------------------------------------------------

def _manifest(run_dir: Path) -> dict[str, Any] | None:
    """A replay's manifest, or None when ``run_dir`` is not a replay's directory (or it is unreadable)."""
    try:
        data = json.loads((run_dir / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(config, dict) or not {"trace", "page", "schemes"} <= config.keys():
        return None
    return data


def import_run_dirs(store: Store, folder: Path, warn: Callable[[str], None]) -> int:
    """Record the replays of ``folder`` that the store does not know, or knows fewer loads or
    another status of, from their ``manifest.json`` and ``results.jsonl``; the number
    recorded. A directory that cannot be read is a warning naming it, and skipped."""
    if not folder.is_dir():
        return 0
    known = {r["sweep"]: r for r in store.scenarios(suite=REPLAY_SUITE)}
    counts: dict[str, int] = {}
    for row in store.loads(suite=REPLAY_SUITE):
        counts[row.sweep] = counts.get(row.sweep, 0) + 1
    imported = 0
    for run_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        manifest = _manifest(run_dir)
        if manifest is None:
            continue
        name = run_dir.name
        status = manifest.get("status", "running")
        done = manifest.get("loads_done")
        have = known.get(name)
        if have is not None and have["status"] == status and (done is None or counts.get(name, 0) >= done):
            continue
        try:
            records = read_results(run_dir) if (run_dir / RESULTS_JSONL).is_file() else []
        except InputError as e:
            warn(f"{run_dir} not recorded: {e}")
            continue
        settings = replay_settings(manifest["config"], run_dir)
        store.ensure_scenario(REPLAY_SUITE, name, name, _label(settings), settings)
        recorded = manifest.get("finished_unix_s") or manifest.get("started_unix_s") or time.time()
        store.import_rows([LoadRow.from_record(r, suite=REPLAY_SUITE, sweep=name, scenario_id=name,
                                               label=_label(settings), run_dir=str(run_dir), recorded_unix_s=recorded)
                           for r in records])
        store.set_status(REPLAY_SUITE, name, name, status if status in ("complete", "failed", "interrupted")
                         else "running", run_dir=str(run_dir))
        if have is None and manifest.get("started_unix_s"):
            store.set_created(REPLAY_SUITE, name, name, float(manifest["started_unix_s"]))
        imported += 1
    return imported


# -- the listing ----------------------------------------------------------------------------------

def _one_or_count(values: list[str], noun: str) -> str:
    distinct = list(dict.fromkeys(v for v in values if v))
    return distinct[0] if len(distinct) == 1 else f"{len(distinct)} {noun}s" if distinct else "–"


def _medians(rows: list[LoadRow]) -> dict[str, float | None]:
    """Median PLT per scheme (ms) over the measured loads, schemes in order of first load."""
    plts: dict[str, list[float]] = {}
    for r in sorted(rows, key=lambda r: (r.t_start_unix_s or 0.0, r.load_index or 0)):
        plts.setdefault(r.scheme, [])
        if r.ok and r.plt_ms is not None:
            plts[r.scheme].append(r.plt_ms)
    return {s: round(statistics.median(v), 1) if v else None for s, v in plts.items()}


def _status(statuses: list[str]) -> str:
    """One word for a run: a replay's status; a sweep's most telling scenario status."""
    for status in ("running", "failed", "interrupted", "pending"):
        if status in statuses:
            return status
    return "complete" if statuses else "–"


def run_rows(store: Store) -> list[dict[str, Any]]:
    """One dict per replay and per suite sweep in the store, oldest first."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for sc in store.scenarios():
        groups.setdefault((sc["suite"], sc["sweep"]), []).append(sc)
    loads: dict[tuple[str, str], list[LoadRow]] = {}
    for row in store.loads():
        loads.setdefault((row.suite, row.sweep), []).append(row)
    out = []
    for (suite, sweep), scenarios in groups.items():
        mine = loads.get((suite, sweep), [])
        replay = suite == REPLAY_SUITE
        settings = [sc["settings"] for sc in scenarios]
        medians = _medians(mine)
        schemes = list(dict.fromkeys([*medians, *(s for st in settings for s in st.get("schemes", []))]))
        run_dirs = [d for sc in scenarios for d in sc["run_dirs"]]
        out.append({
            "name": sweep if replay else f"{suite}/{sweep}", "kind": "replay" if replay else "suite",
            "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(min(sc["created_unix_s"] for sc in scenarios))),
            "started_unix_s": min(sc["created_unix_s"] for sc in scenarios),
            "trace": _one_or_count([str(st.get("trace", "")) for st in settings], "trace"),
            "page": _one_or_count([str(st.get("page", "")) for st in settings], "page"),
            "schemes": schemes, "scenarios": len(scenarios),
            "loads": len(mine), "loads_ok": sum(1 for r in mine if r.ok),
            "status": _status([sc["status"] for sc in scenarios]), "median_plt_ms": medians,
            "run_dir": run_dirs[-1] if replay and run_dirs else (str(Path(run_dirs[-1]).parent) if run_dirs else ""),
        })
    out.sort(key=lambda r: r["started_unix_s"])
    return out


def _plt_cell(medians: dict[str, float | None]) -> str:
    return "\n".join(f"{s} {'–' if v is None else f'{v:,.0f}'}" for s, v in medians.items()) or "–"


def _trace_name(trace: str) -> str:
    return trace[:-4] if trace.endswith(".cbt") else trace


def runs_listing(rows: list[dict[str, Any]]) -> Listing:
    """The runs as a listing: in a table name, page on trace, loads, status and median PLT per
    scheme (the date, then page and trace, leave a narrow terminal first); every field in csv and json."""
    columns = (Column("name", fit="keep"), Column("kind", in_table=False), Column("started", "date", drop=2),
               Column("what", "page on trace", fit="wrap", min_width=12, drop=1, in_data=False), Column("trace", in_table=False),
               Column("page", in_table=False), Column("schemes", in_table=False),
               Column("scenarios", in_table=False), Column("loads", in_table=False),
               Column("ok_of_loads", "loads", in_data=False, justify="right"),
               Column("status", style=styled(STATUS_STYLE)),
               Column("median_plt_ms", "median PLT ms", fit="wrap", min_width=12, show=_plt_cell),
               Column("loads_ok", in_table=False), Column("run_dir", in_table=False))
    return Listing(f"{len(rows)} run(s): replays and suite sweeps", columns,
                   [(r["name"], r["kind"], r["started"], f"{r['page']} on {_trace_name(r['trace'])}", r["trace"],
                     r["page"], r["schemes"], r["scenarios"], r["loads"],
                     f"{r['loads_ok']}/{r['loads']}" if r["loads_ok"] != r["loads"] else str(r["loads"]), r["status"],
                     r["median_plt_ms"], r["loads_ok"], r["run_dir"]) for r in rows],
                   caption="loads: ok/all when some failed; clawbed runs show NAME: a run's table and report")


def _warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def _open_store(store_path: Path | None, runs_folder: Path) -> Store:
    return Store(store_path or runs_folder / STORE_NAME)


_runs_dir_option = click.option("--runs-dir", "runs_folder", type=click.Path(path_type=Path, file_okay=False),
                                 default=None, help="the runs folder (default: $CLAWBED_RUNS or <repo>/runs)")
_store_option = click.option("--store", "store_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
                             help="the result store (default: <runs folder>/results.sqlite)")


@click.group("runs", invoke_without_command=True)
@click.option("--last", type=click.IntRange(min=1), default=None, help="only the N most recent runs")
@format_option
@_runs_dir_option
@_store_option
@click.pass_context
def runs(ctx: click.Context, last: int | None, fmt: str | None, runs_folder: Path | None,
         store_path: Path | None) -> None:
    """Past replays and suite sweeps, oldest first: name, date, page and trace, loads, status and
    median PLT per scheme. Replays in the runs folder that the store does not know yet are
    recorded in it first."""
    if ctx.invoked_subcommand is not None:
        return
    from clawbed.paths import runs_dir

    folder = (runs_folder or runs_dir()).resolve()
    with _open_store(store_path, folder) as store:
        imported = import_run_dirs(store, folder, _warn)
        rows = run_rows(store)
    if imported:
        click.echo(f"recorded {imported} run director{'y' if imported == 1 else 'ies'} of {folder} in the store",
                   err=True)
    runs_listing(rows[-last:] if last else rows).render(fmt)


@runs.command("show")
@click.argument("name")
@format_option
@_runs_dir_option
@_store_option
def show(name: str, fmt: str | None, runs_folder: Path | None, store_path: Path | None) -> None:
    """One run's PLT table and where its report is. NAME: a replay's name, or a suite's
    SUITE/SWEEP (SUITE alone: its latest sweep)."""
    from clawbed.paths import runs_dir

    folder = (runs_folder or runs_dir()).resolve()
    with _open_store(store_path, folder) as store:
        import_run_dirs(store, folder, _warn)
        rows = {r["name"]: r for r in run_rows(store)}
        suite, _, sweep = name.partition("/")
        if name not in rows and not sweep:
            sweeps = [r["name"] for r in rows.values() if r["kind"] == "suite" and r["name"].startswith(f"{name}/")]
            name = sweeps[-1] if sweeps else name
        if name not in rows:
            raise InputError(f"NAME {name!r}: no such run in {store.path} (runs: "
                             f"{', '.join(rows) or 'none'}; a suite as SUITE/SWEEP)")
        run = rows[name]
        suite, _, sweep = (REPLAY_SUITE, "", name) if run["kind"] == "replay" else name.partition("/")
        loads = store.loads(suite=suite, sweep=sweep)
    console = Console()
    if run["kind"] == "replay":
        run_dir = Path(run["run_dir"])
        records = read_results(run_dir) if (run_dir / RESULTS_JSONL).is_file() else [
            LoadRecord(load=r.load_index or 0, round=r.repetition, scheme=r.scheme, ok=r.ok, plt_ms=r.plt_ms)
            for r in loads]
        stats = plt_stats(records)
        listing = Listing(f"PLT per scheme — {name} ({run['page']} on {run['trace']}, {run['status']})", (
            Column("scheme"), Column("loads"), Column("ok"), Column("mean_ms", "mean"), Column("median_ms", "median"),
            Column("p95_ms", "p95"), Column("worst_ms", "worst"), Column("median_reduction_pct", "vs cubic %")),
            [(s.scheme, s.loads, s.ok, s.mean_ms, s.median_ms, s.p95_ms, s.worst_ms,
              None if s.median_reduction_pct is None else round(s.median_reduction_pct, 1)) for s in stats])
        if (fmt or ("table" if console.is_terminal else "csv")) == "table":
            console.print(stats_table(stats, title=listing.title))
        else:
            listing.render(fmt)
        report = run_dir / REPORT_HTML
        click.echo(f"report: {report}" if report.is_file() else
                   f"report: none in {run_dir} (the run directory is gone, or the run ended before writing it)",
                   err=True)
        return
    per: dict[tuple[str, str], list[LoadRow]] = {}
    for r in loads:
        per.setdefault((r.label, r.scheme), []).append(r)
    listing = Listing(f"PLT per scenario and scheme — {name} ({run['status']})", (
        Column("scenario", fit="wrap", min_width=16), Column("scheme"), Column("loads", justify="right"),
        Column("ok", justify="right"), Column("median_ms", "median ms", justify="right"),
        Column("run_dir", in_table=False)),
        [(label, scheme, len(rs), sum(r.ok for r in rs), _medians(rs)[scheme], rs[-1].run_dir)
         for (label, scheme), rs in sorted(per.items())])
    listing.render(fmt, console)
    click.echo(f"run directories under {run['run_dir'] or '–'} (each with its report.html); the paper's numbers "
               f"beside these: clawbed suite report SPEC --sweep {sweep}", err=True)

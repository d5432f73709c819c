"""The result store: one SQLite file (default ``runs/results.sqlite``) with a row per page
load and a row per scenario, written in transactions as loads finish, so a sweep killed at
any point loses nothing it measured and never records a load twice.

Tables::

    scenarios  (suite, sweep, scenario_id) → label, settings (JSON), status, error, run dirs,
               first/last update (Unix s)
    loads      (suite, sweep, scenario_id, scheme, repetition) UNIQUE → label, ok, plt_ms,
               bytes_total, protocol, error, run_dir, load index in its run, start/end
               (Unix s), recorded (Unix s), trace_ms, timing integrity (timing_ok,
               late_reruns, worst subframe lateness and delivery error, steal %), the
               ground truth's airtime split (queued at the base station, held back by the
               server, nothing to send; ms)

A *sweep* names one campaign of a suite in the store (default ``main``): a regression check
runs its own sweep so that it measures afresh instead of reusing earlier results. A replay
(``clawbed replay``) is recorded as suite ``replay``, sweep and scenario its run's name
(:mod:`clawbed.orchestrator.runs`), so one query covers replays and suites.

When an InfluxDB URL is given (``--influx URL`` or ``$CLAWBED_INFLUX_URL``), each load is also
written as a point of measurement ``orchestrator_load`` through
:class:`clawbed.dashboards.metrics.MetricsWriter` (spooled when the server is down).
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawbed.dashboards.metrics import MetricsWriter, Point
from clawbed.errors import InputError
from clawbed.paths import runs_dir
from clawbed.replay.airtime import Airtime
from clawbed.replay.records import LoadRecord

DEFAULT_SWEEP = "main"
INFLUX_ENV = "CLAWBED_INFLUX_URL"
INFLUX_MEASUREMENT = "orchestrator_load"
#: How long a writer waits for another process's transaction on the file, s.
BUSY_TIMEOUT_S = 30.0
#: A scenario's (or a replay's) status; ``interrupted``: a replay stopped by Ctrl-C, its finished loads kept.
STATUSES = ("pending", "running", "complete", "failed", "interrupted")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS scenarios (
    suite TEXT NOT NULL, sweep TEXT NOT NULL, scenario_id TEXT NOT NULL,
    label TEXT NOT NULL, settings TEXT NOT NULL, status TEXT NOT NULL, error TEXT,
    run_dirs TEXT NOT NULL DEFAULT '[]', owner_pid INTEGER, created_unix_s REAL NOT NULL, updated_unix_s REAL NOT NULL,
    PRIMARY KEY (suite, sweep, scenario_id));
CREATE TABLE IF NOT EXISTS loads (
    suite TEXT NOT NULL, sweep TEXT NOT NULL, scenario_id TEXT NOT NULL, label TEXT NOT NULL,
    scheme TEXT NOT NULL, repetition INTEGER NOT NULL, ok INTEGER NOT NULL, plt_ms REAL,
    bytes_total INTEGER, protocol TEXT, error TEXT, run_dir TEXT, load_index INTEGER,
    t_start_unix_s REAL, t_end_unix_s REAL, recorded_unix_s REAL NOT NULL,
    trace_ms INTEGER, timing_ok INTEGER, late_reruns INTEGER NOT NULL DEFAULT 0, subframe_late_max_ms REAL,
    delivery_err_max_ms REAL, steal_pct REAL, cpu_wait_pct REAL,
    airtime_queued_ms INTEGER, airtime_window_ms INTEGER, airtime_app_ms INTEGER,
    UNIQUE (suite, sweep, scenario_id, scheme, repetition));
CREATE INDEX IF NOT EXISTS loads_by_scenario ON loads (suite, sweep, scenario_id);
"""
LOAD_COLUMNS = ("suite", "sweep", "scenario_id", "label", "scheme", "repetition", "ok", "plt_ms", "bytes_total",
                "protocol", "error", "run_dir", "load_index", "t_start_unix_s", "t_end_unix_s", "recorded_unix_s",
                "trace_ms", "timing_ok", "late_reruns", "subframe_late_max_ms", "delivery_err_max_ms", "steal_pct",
                "cpu_wait_pct", "airtime_queued_ms", "airtime_window_ms", "airtime_app_ms")
#: Columns a later version added to ``loads``, with their SQL types: a store made before them
#: gets them on opening (NULL in its old rows).
_ADDED_LOAD_COLUMNS = (("trace_ms", "INTEGER"), ("timing_ok", "INTEGER"),
                       ("late_reruns", "INTEGER NOT NULL DEFAULT 0"), ("subframe_late_max_ms", "REAL"),
                       ("delivery_err_max_ms", "REAL"), ("steal_pct", "REAL"), ("cpu_wait_pct", "REAL"),
                       ("airtime_queued_ms", "INTEGER"), ("airtime_window_ms", "INTEGER"),
                       ("airtime_app_ms", "INTEGER"))


def default_store_path() -> Path:
    return runs_dir() / "results.sqlite"


@dataclass(frozen=True)
class LoadRow:
    """One recorded page load (times in Unix s, PLT in ms, bytes of body)."""

    suite: str
    sweep: str
    scenario_id: str
    label: str
    scheme: str
    repetition: int
    ok: bool
    plt_ms: float | None
    bytes_total: int | None
    protocol: str | None
    error: str | None
    run_dir: str | None
    load_index: int | None
    t_start_unix_s: float | None
    t_end_unix_s: float | None
    recorded_unix_s: float
    #: Trace time the load started at (the round's; loads of one repetition share it), ms.
    trace_ms: int | None = None
    #: The emulator kept time during the load (None: not measured; False: it fell behind by
    #: more than 1 ms, ``clawbed.replay.records.LATE_LIMIT_MS``), how many attempts of the load
    #: were discarded for that, and the worst lateness seen (ms) and steal (% of CPU time).
    timing_ok: bool | None = None
    late_reruns: int = 0
    subframe_late_max_ms: float | None = None
    delivery_err_max_ms: float | None = None
    steal_pct: float | None = None
    #: % of the load's time some task waited for a CPU (``LoadRecord.cpu_wait_pct``).
    cpu_wait_pct: float | None = None
    #: Where the load's data phase went by the ground truth (``clawbed.replay.airtime``), ms:
    #: data queued at the base station, the server holding data back, nothing to send. Kept
    #: in the store so a report needs no run directory (None: not computed).
    airtime_queued_ms: int | None = None
    airtime_window_ms: int | None = None
    airtime_app_ms: int | None = None

    @classmethod
    def from_record(cls, record: LoadRecord, *, suite: str, sweep: str, scenario_id: str, label: str,
                    run_dir: str | None, recorded_unix_s: float, airtime: Airtime | None = None) -> LoadRow:
        """The row of a replay's load record (with its airtime split, when computed)."""
        return cls(suite=suite, sweep=sweep, scenario_id=scenario_id, label=label, scheme=record.scheme,
                   repetition=record.round, ok=record.ok, plt_ms=record.plt_ms, bytes_total=record.bytes_total,
                   protocol=record.protocol, error=record.error, run_dir=run_dir, load_index=record.load,
                   t_start_unix_s=record.t_start_unix_s, t_end_unix_s=record.t_end_unix_s,
                   recorded_unix_s=recorded_unix_s, trace_ms=record.trace_ms, timing_ok=record.timing_ok,
                   late_reruns=record.late_reruns, subframe_late_max_ms=record.subframe_late_max_ms,
                   delivery_err_max_ms=record.delivery_err_max_ms, steal_pct=record.steal_pct,
                   cpu_wait_pct=record.cpu_wait_pct,
                   airtime_queued_ms=airtime.queued_ms if airtime else None,
                   airtime_window_ms=airtime.window_ms if airtime else None,
                   airtime_app_ms=airtime.app_ms if airtime else None)

    def airtime(self) -> Airtime | None:
        """The stored airtime split, or None when it was not computed."""
        if None in (self.plt_ms, self.airtime_queued_ms, self.airtime_window_ms, self.airtime_app_ms):
            return None
        return Airtime(self.scheme, float(self.plt_ms or 0.0), int(self.airtime_queued_ms or 0),
                       int(self.airtime_window_ms or 0), int(self.airtime_app_ms or 0))

    def as_dict(self) -> dict[str, Any]:
        return {c: getattr(self, c) for c in LOAD_COLUMNS}


class Store:
    """The SQLite result store at ``path`` (created with its tables on first use)."""

    def __init__(self, path: Path | None = None, influx_url: str | None = None,
                 busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = (path or default_store_path()).resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode; every write below is its own explicit transaction. A replay recording
        # its loads waits less (busy_timeout_s) than a sweep: a locked store costs it a warning.
        self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        # WAL: readers (`clawbed results query`) never block the sweep's writes; synchronous
        # FULL: a committed load survives a power cut, not only a killed process.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        have = {r["name"] for r in self._db.execute("PRAGMA table_info(loads)")}
        for name, sql_type in _ADDED_LOAD_COLUMNS:
            if name not in have:
                self._db.execute(f"ALTER TABLE loads ADD COLUMN {name} {sql_type}")
        url = influx_url if influx_url is not None else os.environ.get(INFLUX_ENV)
        self._metrics = (MetricsWriter(url, spool_dir=self.path.parent / "influx-spool", batch_points=1)
                         if url else None)

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------

    def _transaction(self) -> _Tx:
        return _Tx(self._db)

    def ensure_scenario(self, suite: str, sweep: str, scenario_id: str, label: str,
                        settings: Mapping[str, Any]) -> None:
        """Register a scenario as pending unless it is known already."""
        now = time.time()
        with self._transaction():
            self._db.execute(
                "INSERT OR IGNORE INTO scenarios (suite, sweep, scenario_id, label, settings, status, created_unix_s,"
                " updated_unix_s) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)",
                (suite, sweep, scenario_id, label, json.dumps(settings, sort_keys=True), now, now))

    def set_status(self, suite: str, sweep: str, scenario_id: str, status: str, *, error: str | None = None,
                   run_dir: str | None = None, owner_pid: int | None = None) -> None:
        """Set a scenario's status (and its error), appending ``run_dir`` to its run
        directories; ``owner_pid``: the process running it (while ``running``)."""
        if status not in STATUSES:
            raise ValueError(f"status {status!r}: one of {', '.join(STATUSES)}")
        with self._transaction():
            row = self._db.execute("SELECT run_dirs FROM scenarios WHERE suite=? AND sweep=? AND scenario_id=?",
                                   (suite, sweep, scenario_id)).fetchone()
            if row is None:
                raise InputError(f"scenario {scenario_id} of suite {suite} (sweep {sweep}) is not in {self.path}")
            dirs = json.loads(row["run_dirs"])
            if run_dir is not None and run_dir not in dirs:
                dirs.append(run_dir)
            self._db.execute("UPDATE scenarios SET status=?, error=?, run_dirs=?, owner_pid=?, updated_unix_s=? "
                             "WHERE suite=? AND sweep=? AND scenario_id=?",
                             (status, error, json.dumps(dirs), owner_pid, time.time(), suite, sweep, scenario_id))

    def set_created(self, suite: str, sweep: str, scenario_id: str, created_unix_s: float) -> None:
        """Date a scenario by when it really started (a run recorded after the fact), Unix s."""
        with self._transaction():
            self._db.execute("UPDATE scenarios SET created_unix_s=? WHERE suite=? AND sweep=? AND scenario_id=?",
                             (created_unix_s, suite, sweep, scenario_id))

    def record_load(self, row: LoadRow) -> bool:
        """Record one finished load in its own transaction; False (and nothing written) when
        that (scenario, scheme, repetition) is already recorded."""
        with self._transaction():
            added = self._insert(row)
        if added and self._metrics is not None:
            self._metrics.add(Point(INFLUX_MEASUREMENT,
                                    {"suite": row.suite, "sweep": row.sweep, "scenario": row.scenario_id,
                                     "label": row.label, "scheme": row.scheme},
                                    {k: v for k, v in (("plt_ms", row.plt_ms), ("bytes_total", row.bytes_total),
                                                       ("ok", row.ok), ("repetition", row.repetition),
                                                       ("timing_ok", row.timing_ok), ("late_reruns", row.late_reruns),
                                                       ("subframe_late_max_ms", row.subframe_late_max_ms),
                                                       ("delivery_err_max_ms", row.delivery_err_max_ms),
                                                       ("steal_pct", row.steal_pct),
                                                       ("cpu_wait_pct", row.cpu_wait_pct))
                                     if v is not None},
                                    int((row.t_end_unix_s or row.recorded_unix_s) * 1e9)))
            self._metrics.send()
        return added

    def import_rows(self, rows: list[LoadRow]) -> int:
        """Record loads measured elsewhere (:func:`read_csv_rows`), all in one transaction;
        the number added (a load already recorded is kept as it is)."""
        added = 0
        with self._transaction():
            for row in rows:
                added += self._insert(row)
        return added

    def _insert(self, row: LoadRow) -> bool:
        """Insert one load inside the caller's transaction; False when it is recorded already."""
        cur = self._db.execute(
            f"INSERT OR IGNORE INTO loads ({', '.join(LOAD_COLUMNS)}) VALUES ({', '.join('?' * len(LOAD_COLUMNS))})",
            tuple(int(v) if isinstance(v, bool) else v for v in (getattr(row, c) for c in LOAD_COLUMNS)))
        return cur.rowcount == 1

    # -- reading -----------------------------------------------------------------------------

    def done_loads(self, suite: str, sweep: str, scenario_id: str) -> set[tuple[str, int]]:
        """(scheme, repetition) of every load recorded for a scenario."""
        rows = self._db.execute("SELECT scheme, repetition FROM loads WHERE suite=? AND sweep=? AND scenario_id=?",
                                (suite, sweep, scenario_id))
        return {(r["scheme"], r["repetition"]) for r in rows}

    def loads(self, *, suite: str | None = None, sweep: str | None = None,
              scenario: str | None = None) -> list[LoadRow]:
        """Recorded loads, filtered; ``scenario`` matches an id prefix or a label substring."""
        where, args = [], []
        if suite is not None:
            where.append("suite = ?")
            args.append(suite)
        if sweep is not None:
            where.append("sweep = ?")
            args.append(sweep)
        if scenario is not None:
            where.append("(scenario_id LIKE ? OR label LIKE ?)")
            args += [scenario + "%", f"%{scenario}%"]
        sql = f"SELECT {', '.join(LOAD_COLUMNS)} FROM loads"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY suite, sweep, label, scheme, repetition"
        return [LoadRow(**{**dict(r), "ok": bool(r["ok"]),
                           "timing_ok": None if r["timing_ok"] is None else bool(r["timing_ok"]),
                           "late_reruns": r["late_reruns"] or 0})
                for r in self._db.execute(sql, args)]

    def scenarios(self, *, suite: str | None = None, sweep: str | None = None) -> list[dict[str, Any]]:
        """Per-scenario rows (status, label, settings, run dirs)."""
        sql, args = "SELECT * FROM scenarios", []
        if suite is not None:
            sql += " WHERE suite = ?" + (" AND sweep = ?" if sweep is not None else "")
            args = [suite] + ([sweep] if sweep is not None else [])
        rows = []
        for r in self._db.execute(sql + " ORDER BY suite, sweep, label", args):
            d = dict(r)
            d["settings"] = json.loads(d["settings"])
            d["run_dirs"] = json.loads(d["run_dirs"])
            rows.append(d)
        return rows

    def sweeps(self, suite: str) -> list[str]:
        """A suite's sweeps, most recently updated last."""
        rows = self._db.execute("SELECT sweep, MAX(updated_unix_s) AS t FROM scenarios WHERE suite=? "
                                "GROUP BY sweep ORDER BY t", (suite,))
        return [r["sweep"] for r in rows]


class _Tx:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error): the write lock is taken at the
    start, so two sweeps writing one file serialise instead of failing mid-transaction."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")


def iter_csv_rows(rows: list[LoadRow]) -> Iterator[list[Any]]:
    """The header then one list per load (for ``--format csv``; :func:`read_csv_rows` reads it back)."""
    yield list(LOAD_COLUMNS)
    for r in rows:
        yield [getattr(r, c) for c in LOAD_COLUMNS]


_TEXT = {"suite", "sweep", "scenario_id", "label", "scheme", "protocol", "error", "run_dir"}
_INTS = {"repetition", "bytes_total", "load_index", "trace_ms", "late_reruns", "airtime_queued_ms",
         "airtime_window_ms", "airtime_app_ms"}
_BOOLS = {"ok", "timing_ok"}
#: What an exported row must have; the rest may be missing (a store older than the column) or empty.
_REQUIRED = ("suite", "sweep", "scenario_id", "label", "scheme", "repetition", "ok", "recorded_unix_s")
_ADDED_NAMES = {name for name, _ in _ADDED_LOAD_COLUMNS}


def _cell(name: str, text: str) -> Any:
    """One CSV field as its column's type (ValueError with the reason)."""
    if text == "":
        if name in _REQUIRED:
            raise ValueError("is empty")
        return 0 if name == "late_reruns" else None
    if name in _TEXT:
        return text
    if name in _BOOLS:
        if text.lower() in ("true", "1"):
            return True
        if text.lower() in ("false", "0"):
            return False
        raise ValueError(f"{text!r} is not True or False")
    if name in _INTS:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if value != value:  # NaN: nothing measured, as the store keeps it
        return None
    return value


def read_csv_rows(path: Path) -> list[LoadRow]:
    """The loads of a CSV written by ``clawbed results query --format csv`` (another
    machine's store, or a sweep kept in the repository), every field checked: an error names
    the file, line and column."""
    try:
        handle = path.open(newline="")
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise InputError(f"{path}: empty (expected a header line with {', '.join(_REQUIRED)}, …)")
        unknown = [c for c in header if c not in LOAD_COLUMNS]
        if unknown:
            raise InputError(f"{path}:1: unknown column(s) {', '.join(unknown)} (a result store has "
                             f"{', '.join(LOAD_COLUMNS)})")
        missing = [c for c in LOAD_COLUMNS if c not in header and c not in _ADDED_NAMES]
        if missing:
            raise InputError(f"{path}:1: missing column(s) {', '.join(missing)}")
        rows = []
        for line_no, fields in enumerate(reader, start=2):
            if not fields:
                continue
            if len(fields) != len(header):
                raise InputError(f"{path}:{line_no}: {len(fields)} field(s), the header has {len(header)}")
            values: dict[str, Any] = {}
            for name, text in zip(header, fields):
                try:
                    values[name] = _cell(name, text)
                except ValueError as e:
                    raise InputError(f"{path}:{line_no}: column {name}: {e}") from None
            if values["repetition"] < 0:
                raise InputError(f"{path}:{line_no}: column repetition: {values['repetition']} is negative")
            rows.append(LoadRow(**values))
    return rows

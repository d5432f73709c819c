"""A row's outcome, and the result store's ``fidelity_rows`` table.

The table lives in the same SQLite file as the suites' loads (``runs/results.sqlite``); it is
created here on first use, so the suites' store needs no change::

    fidelity_rows (run, row_id) UNIQUE → profile, status, paper, testbed, criterion, reason,
                  run_dir, kernel, sysctls (JSON: server and UE ends), metrics (JSON),
                  checks (JSON), started/ended (Unix s)
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clawbed.orchestrator.store import BUSY_TIMEOUT_S, default_store_path

PASS, FAIL, NOT_EMULATED, ERROR, SKIPPED, NOT_RUN = "pass", "fail", "not-emulated", "error", "skipped", "not run"
STATUSES = (PASS, FAIL, NOT_EMULATED, ERROR, SKIPPED)
TABLE = "fidelity_rows"
COLUMNS = ("run", "row_id", "profile", "status", "paper", "testbed", "criterion", "reason", "run_dir", "kernel",
           "sysctls", "metrics", "checks", "started_unix_s", "ended_unix_s")
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    run TEXT NOT NULL, row_id TEXT NOT NULL, profile TEXT NOT NULL, status TEXT NOT NULL,
    paper TEXT, testbed TEXT, criterion TEXT, reason TEXT, run_dir TEXT, kernel TEXT,
    sysctls TEXT, metrics TEXT, checks TEXT, started_unix_s REAL, ended_unix_s REAL,
    UNIQUE (run, row_id));
"""


@dataclass
class Check:
    """One part of a row's criterion: what was measured against what target. ``ok`` None: the
    part could not be evaluated (its reason in ``note``). ``cause``: what the ground truth or
    the kernel's own counters show behind the measured value (kept whatever the verdict; in the
    row's reason when the part failed)."""

    name: str
    value: str
    target: str
    ok: bool | None
    note: str = ""
    cause: str = ""


@dataclass
class Outcome:
    """What a row's experiment found."""

    status: str = ERROR
    #: The testbed's value, one line (the headline numbers).
    testbed: str = ""
    reason: str = ""
    checks: list[Check] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    #: ``{"server": {...}, "ue": {...}, "source": ...}``: the TCP sysctls of both ends.
    sysctls: dict[str, Any] = field(default_factory=dict)
    kernel: str = ""
    #: Where the figure's plotly JSON was written (relative to the row's directory).
    figure: str | None = None

    def judge(self) -> Outcome:
        """Status from the checks: fail if any failed, pass if every evaluated one passed;
        partly evaluated rows say which parts were not, in the reason."""
        evaluated = [c for c in self.checks if c.ok is not None]
        for c in evaluated:
            c.note = ""  # a note says why a part could not be evaluated
        if not evaluated:
            if self.status not in (NOT_EMULATED, SKIPPED):
                self.status = ERROR
                self.reason = self.reason or "no part of the criterion could be evaluated"
            return self
        self.status = FAIL if any(c.ok is False for c in evaluated) else PASS
        open_parts = [f"{c.name}: {c.note}" for c in self.checks if c.ok is None]
        failed = [f"{c.name} ({c.cause})" if c.cause else c.name for c in evaluated if c.ok is False]
        parts = []
        if failed:
            parts.append("failed: " + "; ".join(failed))
        if open_parts:
            parts.append("not evaluated: " + "; ".join(open_parts))
        self.reason = " | ".join([p for p in (self.reason, *parts) if p])
        return self


def _connect(path: Path | None) -> sqlite3.Connection:
    path = (path or default_store_path()).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(_SCHEMA)
    return db


def record_row(store_path: Path | None, *, run: str, row_id: str, profile: str, paper: str, criterion: str,
               outcome: Outcome, run_dir: str, started: float, ended: float | None = None) -> None:
    """Write (or replace) one row's result of fidelity run ``run``."""
    db = _connect(store_path)
    try:
        db.execute(f"INSERT OR REPLACE INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                   (run, row_id, profile, outcome.status, paper, outcome.testbed, criterion, outcome.reason, run_dir,
                    outcome.kernel, json.dumps(outcome.sysctls, sort_keys=True),
                    json.dumps(outcome.metrics, sort_keys=True, default=str),
                    json.dumps([asdict(c) for c in outcome.checks]), started, ended or time.time()))
    finally:
        db.close()


def read_rows(store_path: Path | None, run: str | None = None) -> dict[str, dict[str, Any]]:
    """Per row ID, its latest result (of fidelity run ``run`` only, when given)."""
    path = (store_path or default_store_path()).resolve()
    if not path.is_file():
        return {}
    db = _connect(path)
    try:
        sql, args = f"SELECT * FROM {TABLE}", []
        if run is not None:
            sql += " WHERE run = ?"
            args.append(run)
        latest: dict[str, dict[str, Any]] = {}
        for r in db.execute(sql + " ORDER BY ended_unix_s", args):
            d = dict(r)
            for key in ("sysctls", "metrics", "checks"):
                d[key] = json.loads(d[key]) if d[key] else ({} if key != "checks" else [])
            latest[d["row_id"]] = d
        return latest
    finally:
        db.close()


def runs(store_path: Path | None) -> list[str]:
    """Fidelity runs in the store, oldest first."""
    path = (store_path or default_store_path()).resolve()
    if not path.is_file():
        return []
    db = _connect(path)
    try:
        return [r["run"] for r in db.execute(f"SELECT run, MAX(ended_unix_s) AS t FROM {TABLE} GROUP BY run ORDER BY t")]
    finally:
        db.close()

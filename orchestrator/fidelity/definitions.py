"""The rows of the fidelity table as data: one YAML file per row in ``rows/``.

A row file::

    id: LTE-1                          # the table's ID
    title: RTT grows with bytes in flight
    source: LTE13 §4.3 Figs 10-13
    paper: "RTT > 100 ms at 100 KB, > 150 ms at 200 KB in flight (8 Mbit/s)"   # the paper's value
    criterion: "median RTT per in-flight bin ≈ max(base, in-flight / C) ± 15 % ..."
    experiment: rtt_vs_inflight        # the function of bulk.EXPERIMENTS / pageloads.EXPERIMENTS
    needs: []                          # mechanisms (mechanisms.MECHANISMS) without which it cannot run
    optional: []                       # mechanisms it uses when present (the report says when absent)
    params: {...}                      # the full profile's parameters
    quick: {...}                       # what --quick changes (merged over params, one level deep)
    full_minutes: 3                    # the full profile's run time on the reference machine (estimate)

The table's IDs are read from ``docs/fidelity-table.md`` by :func:`table_ids`; the runner and
the report list every one of them, so a row without a file shows as such, never silently missing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clawbed.errors import InputError
from clawbed.paths import REPO_ROOT

ROWS_DIR = Path(__file__).resolve().parent / "rows"
TABLE_PATH = REPO_ROOT / "docs" / "fidelity-table.md"
#: A row ID of the table: letters, a dash, a number (``LTE-1``, ``CLAW-10``, ``SPDY-5``).
ID_PATTERN = r"[A-Z]+-\d+"


class RowDef(BaseModel):
    """One row's experiment, as its YAML file says."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=rf"^{ID_PATTERN}$")
    title: str = Field(min_length=1)
    source: str = Field(min_length=1)
    paper: str = Field(min_length=1)
    criterion: str = Field(min_length=1)
    experiment: str = Field(min_length=1)
    needs: list[str] = []
    optional: list[str] = []
    params: dict[str, Any] = {}
    quick: dict[str, Any] = {}
    #: Rough run time of the full profile, minutes (documented in docs/fidelity.md's table).
    full_minutes: float = Field(1.0, ge=0)
    #: Rough run time of the quick profile, minutes.
    quick_minutes: float = Field(0.5, ge=0)
    #: Not in the quick profile (too long for ``make fidelity``): the quick run reports it as
    #: skipped with this reason, the full profile runs it.
    quick_skip: str | None = None

    def parameters(self, quick: bool) -> dict[str, Any]:
        """The profile's parameters: ``params`` with ``quick`` merged over it (one level deep)."""
        if not quick:
            return dict(self.params)
        merged = dict(self.params)
        for key, value in self.quick.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return merged


def table_ids(path: Path = TABLE_PATH) -> list[str]:
    """The row IDs of the fidelity table, in its order (the first cell of each table row)."""
    ids = []
    for line in path.read_text().splitlines():
        m = re.match(rf"^\|\s*({ID_PATTERN})\s*\|", line)
        if m and m.group(1) not in ids:
            ids.append(m.group(1))
    return ids


def load_row(path: Path) -> RowDef:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise InputError(f"{path}: {e}") from None
    try:
        row = RowDef.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in e.errors())
        raise InputError(f"{path.name}: {problems}") from None
    if path.stem != row.id:
        raise InputError(f"{path.name}: the file of row {row.id} must be named {row.id}.yaml")
    return row


def load_rows(rows_dir: Path = ROWS_DIR) -> dict[str, RowDef]:
    """Every row file, by ID, in the table's order (files of IDs the table lacks come last)."""
    rows = {r.id: r for r in (load_row(p) for p in sorted(rows_dir.glob("*.yaml")))}
    order = table_ids() if TABLE_PATH.is_file() else []
    return {**{i: rows[i] for i in order if i in rows}, **{i: r for i, r in rows.items() if i not in order}}


def select_rows(spec: str | None) -> list[str]:
    """The IDs of ``--rows A,B`` (every table ID when None); an unknown one is an error."""
    ids = table_ids()
    if not spec:
        return ids
    wanted = [s.strip().upper() for s in spec.split(",") if s.strip()]
    unknown = [w for w in wanted if w not in ids]
    if unknown:
        raise InputError(f"--rows: {', '.join(unknown)} not in the fidelity table (IDs: {', '.join(ids)})")
    return wanted

"""``clawbed fidelity run``, ``report`` and ``show`` (``clawbed/cli.py`` loads this group)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from clawbed.errors import InputError
from clawbed.orchestrator.fidelity.definitions import select_rows
from clawbed.tables import format_option

_store_option = click.option("--store", "store_path", type=click.Path(path_type=Path), default=None,
                             help="the SQLite result store (default: <runs>/results.sqlite)")


@click.group()
def fidelity() -> None:
    """The fidelity suite: the rows of docs/fidelity-table.md (the papers' 27, and real cells) as experiments."""


@fidelity.command("run")
@click.option("--rows", "rows_spec", default=None, metavar="ID,ID", help="only these rows (e.g. LTE-1,BB-2); default all 27")
@click.option("--quick", is_flag=True, help="the quick profile (shorter flows, fewer loads; `make fidelity`)")
@click.option("--name", default=None, help="the run's name (default fidelity-<profile>-<time>)")
@click.option("--runs-dir", "output_root", type=click.Path(path_type=Path), default=None,
              help="folder of the fidelity runs (default: <runs>/fidelity)")
@_store_option
def run(rows_spec: str | None, quick: bool, name: str | None, output_root: Path | None, store_path: Path | None) -> None:
    """Run the rows (each through the real kernel TCP, emulator, nginx and Chromium) into the store."""
    from clawbed.orchestrator.fidelity.report import report_rows, write_html
    from clawbed.orchestrator.fidelity.runner import run_rows

    ids = select_rows(rows_spec)
    t0 = time.time()
    name, run_dir, outcomes = run_rows(ids, quick=quick, store_path=store_path, name=name, output_root=output_root)
    rows = [r for r in report_rows(store_path, run=name) if r["row_id"] in ids]
    _print(rows, f"fidelity run {name} ({'quick' if quick else 'full'}): {len(ids)} row(s) in {time.time() - t0:,.0f} s")
    page = write_html(rows, run_dir / "report.html")
    click.echo(f"run directory {run_dir}; report {page}", err=True)


@fidelity.command("report")
@click.option("--run", "run_name", default=None, help="only this fidelity run (default: each row's latest result)")
@click.option("-o", "--output", "--html", "html_path", type=click.Path(path_type=Path), default=None,
              help="write the HTML report here (default: <runs>/fidelity/report.html; --html is the older name)")
@format_option
@_store_option
def report(run_name: str | None, html_path: Path | None, fmt: str | None, store_path: Path | None) -> None:
    """One line per row of the table: ID, status, the testbed's figure and the reason (shortened
    to fit the terminal: `clawbed fidelity show ROW` prints a row whole); csv, json and markdown
    add the paper's value, the criterion, the run directory, the kernel and the sysctls."""
    from clawbed.orchestrator.fidelity.report import write_html
    from clawbed.paths import runs_dir

    rows = _rows(run_name, store_path)
    _print(rows, f"fidelity report ({run_name or 'latest result per row'}): {len(rows)} rows", fmt)
    page = write_html(rows, html_path or runs_dir() / "fidelity" / "report.html")
    click.echo(f"HTML report: {page}", err=True)


@fidelity.command("show")
@click.argument("row_id", metavar="ROW")
@click.option("--run", "run_name", default=None, help="this fidelity run's result (default: the row's latest)")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default=None,
              help="table (the default on a terminal) or json (the default when piped: the row as one object)")
@_store_option
def show(row_id: str, run_name: str | None, fmt: str | None, store_path: Path | None) -> None:
    """Everything of one row (e.g. LTE-1): paper, criterion, the testbed's figure, the whole
    reason, run directory, kernel and sysctls, and each check with its target and cause."""
    import json

    from clawbed.orchestrator.fidelity.report import find_row, row_tables

    row = find_row(_rows(run_name, store_path), row_id)
    if (fmt or ("table" if sys.stdout.isatty() else "json")) == "json":
        click.echo(json.dumps(row, default=str))
        return
    console = Console()
    for table in row_tables(row):
        console.print(table)
        console.print()


def _rows(run_name: str | None, store_path: Path | None) -> list[dict[str, Any]]:
    """Every row of the table with its result (of ``run_name``, or each row's latest)."""
    from clawbed.orchestrator.fidelity.report import report_rows
    from clawbed.orchestrator.fidelity.results import runs

    if run_name is not None and run_name not in runs(store_path):
        raise InputError(f"--run {run_name}: no such fidelity run in the store (runs: {', '.join(runs(store_path)) or 'none'})")
    return report_rows(store_path, run=run_name)


def _print(rows: list[dict[str, Any]], title: str, fmt: str | None = None) -> None:
    """The rows as a listing on standard output (:func:`report_listing`), the count per status on
    standard error."""
    from clawbed.orchestrator.fidelity.report import report_listing

    report_listing(rows, title).render(fmt)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    click.echo(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), err=True)

"""``clawbed fidelity run`` and ``clawbed fidelity report`` (``clawbed/cli.py`` loads this group)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from clawbed.errors import InputError
from clawbed.orchestrator.fidelity.definitions import select_rows
from clawbed.tables import TerminalTable

_store_option = click.option("--store", "store_path", type=click.Path(path_type=Path), default=None,
                             help="the SQLite result store (default: <runs>/results.sqlite)")


def _console() -> Console:
    return Console() if sys.stdout.isatty() else Console(width=240)


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
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None,
              help="write the HTML report here (default: <runs>/fidelity/report.html)")
@_store_option
def report(run_name: str | None, html_path: Path | None, store_path: Path | None) -> None:
    """One line per row of the table: paper, testbed, criterion, status with its reason, run directory."""
    from clawbed.orchestrator.fidelity.report import report_rows, write_html
    from clawbed.orchestrator.fidelity.results import runs
    from clawbed.paths import runs_dir

    if run_name is not None and run_name not in runs(store_path):
        raise InputError(f"--run {run_name}: no such fidelity run in the store (runs: {', '.join(runs(store_path)) or 'none'})")
    rows = report_rows(store_path, run=run_name)
    _print(rows, f"fidelity report ({run_name or 'latest result per row'}): {len(rows)} rows")
    page = write_html(rows, html_path or runs_dir() / "fidelity" / "report.html")
    click.echo(f"HTML report: {page}", err=True)


def _print(rows: list[dict[str, Any]], title: str) -> None:
    from clawbed.orchestrator.fidelity.report import COLUMNS, sysctl_summary, text_lines

    table = TerminalTable(title=title)
    for col in (*COLUMNS, "kernel / sysctls"):
        table.add_column(col, overflow="fold")
    for r, line in zip(rows, text_lines(rows)):
        table.add_row(*line, (f"{r['kernel'].split(' ')[1] if r['kernel'] else ''} {sysctl_summary(r['sysctls'])}"
                              if r["sysctls"] else ""))
    _console().print(table)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    click.echo(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), err=True)

"""Every table the CLI prints fits an 80-column terminal or wraps: nothing is cut to "…"."""

from __future__ import annotations

import re

from rich.console import Console

from clawbed.paths import REPO_ROOT
from clawbed.replay.report import SchemeStats, stats_table
from clawbed.tables import TerminalTable

WIDTH = 80


def rendered(table: TerminalTable) -> list[str]:
    console = Console(width=WIDTH, record=True, color_system=None)
    with console.capture() as capture:
        console.print(table)
    return capture.get().splitlines()


def assert_fits(lines: list[str]) -> None:
    assert all(len(line) <= WIDTH for line in lines), max(lines, key=len)
    assert not any("…" in line for line in lines), "\n".join(lines)


def test_plt_table_fits_80_columns_with_every_header_whole() -> None:
    stats = [SchemeStats("cubic", 20, 20, 12_345.0, 11_999.0, 30_000.0, 31_234.0, None, None),
             SchemeStats("claw", 20, 19, 8_001.0, 7_654.0, 20_000.0, 25_000.0, 35.2, 36.2)]
    lines = rendered(stats_table(stats, title="PLT per scheme — replay-20261125-141133"))
    assert_fits(lines)
    text = "\n".join(lines)
    for header in ("scheme", "loads ok", "mean", "median", "p95", "worst", "reduction", "vs cubic"):
        assert header in text


def test_a_table_wider_than_the_terminal_wraps_instead_of_cutting() -> None:
    table = TerminalTable(title="wide")
    for i in range(9):
        table.add_column(f"a rather long header number {i}")
    table.add_row(*[f"value-{i}-" + "x" * 12 for i in range(9)])
    assert_fits(rendered(table))


def test_no_module_builds_a_table_that_could_cut_its_text() -> None:
    """The CLI's tables are TerminalTable (folding columns), never a bare rich Table."""
    offenders = []
    for path in REPO_ROOT.glob("*/**/*.py"):
        if ".venv" in path.parts or "tests" in path.parts or path.name == "tables.py":
            continue
        text = path.read_text(errors="replace")
        if re.search(r"from rich\.table import Table\b|rich\.table\.Table\(", text):
            offenders.append(str(path.relative_to(REPO_ROOT)))
    assert not offenders

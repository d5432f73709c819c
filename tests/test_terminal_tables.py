"""Every table the CLI prints fits an 80-column terminal or wraps: nothing is cut to "…"."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import termios
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console

from clawbed.orchestrator.fidelity.report import report_rows
from clawbed.orchestrator.fidelity.results import Check, Outcome, record_row
from clawbed.paths import REPO_ROOT
from clawbed.replay.report import SchemeStats, stats_table
from clawbed.tables import Column, Listing, TerminalTable, shorten

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


# -- listings: one layout for the terminal, machine-readable when piped -----------------------------

def test_a_listing_keeps_ids_whole_cuts_at_words_and_drops_columns_it_names() -> None:
    columns = (Column("id"), Column("status"), Column("figure", fit="cut", min_width=12),
               Column("detail", fit="wrap", min_width=16), Column("extra", fit="cut", min_width=20, drop=1),
               Column("hidden", in_table=False))
    text = "the queue at the base station drained slower than the trace's capacity"
    listing = Listing("t", columns, [("LTE-1", "not-emulated", text, text, text, "only in csv")])
    lines = [line.rstrip() for line in _print_lines(listing.table(WIDTH))]
    assert all(len(line) <= WIDTH for line in lines)  # a cut cell ends in "…" on purpose
    row = next(line for line in lines if line.lstrip().startswith("LTE-1"))
    assert "not-emulated" in row and "the queue at the" in row
    cut = re.search(r"the queue at the[^…]*…", row)
    assert cut is not None and cut.group(0)[:-1].rstrip() and not cut.group(0)[:-1].endswith(" ")
    assert "extra" not in lines[2] and "not shown at 80 columns: extra" in " ".join(lines)
    assert not one_word_lines(lines)
    assert shorten("abc def ghi", 8) == "abc def…" and shorten("abcdefghij", 5) == "abcd…"
    assert shorten("short", 80) == "short"
    assert listing.dicts() == [{"id": "LTE-1", "status": "not-emulated", "figure": text, "detail": text,
                                "extra": text, "hidden": "only in csv"}]
    assert next(csv.reader(io.StringIO(listing.csv_text()))) == ["id", "status", "figure", "detail", "extra", "hidden"]


def _print_lines(table: TerminalTable) -> list[str]:
    return rendered(table)


def _lone_words(line: str) -> set[int]:
    """Offsets of the words that stand alone in their cell: two spaces (or an edge) either side."""
    return {m.start() for m in re.finditer(r"(?:(?<=\s\s)|^)\S+(?=\s\s|\s*$)", line)}


def one_word_lines(lines: list[str], row_start: Callable[[str], bool] = lambda line: False) -> list[str]:
    """Lines of a table where a cell goes on as one word alone under one word alone: a cell folded
    into one-word lines (a paragraph's last word alone is not that). ``row_start``: a line that
    begins a row (its cells are not the line above's)."""
    rule = next((i for i, line in enumerate(lines) if line.strip().startswith("─")), -1)
    broken = []
    for above, line in zip(lines[rule + 1:], lines[rule + 2:]):
        if line.strip() and not row_start(line) and _lone_words(above) & _lone_words(line):
            broken.append(f"{above.rstrip()} / {line.rstrip()}")
    return broken


def in_terminal(argv: list[str], columns: int = WIDTH, rows: int = 50) -> tuple[str, str]:
    """(what ``argv`` wrote to a real terminal ``columns`` wide, its standard error): a pty with
    that window size, as in a tmux pane."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"NO_COLOR": "1", "TERM": "xterm"}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode())
    return text.replace("\r\n", "\n"), err.decode()


LONG_REASON = ("failed: bins within ±15 % (the queue at the base station drained slower than the capacity the "
               "trace gives: the ground truth's delivered bytes lag) | not evaluated: promotion: no idle interval")


def fidelity_store(path: Path) -> None:
    """Two rows with long figures, reasons and checks, as a real run writes them."""
    outcome = Outcome(status="fail", testbed="RTT = max(base, in-flight/C) within ±15 % in 81 % of bins; base 62 ms",
                      reason=LONG_REASON, kernel="Linux 6.18.44",
                      checks=[Check("bins within ±15 %", "81 %", "≥ 90 %", False,
                                    cause="the base station's queue drained slower than the trace's capacity"),
                              Check("promotion delay", "", "435 ms ± 20 %", None, note="no idle interval long enough")],
                      sysctls={"server": {"tcp_frto": 2, "tcp_recovery": 1, "tcp_slow_start_after_idle": 0,
                                          "tcp_no_metrics_save": 1, "tcp_rmem": "4096 131072 6291456"}})
    record_row(path, run="fidelity-quick-t", row_id="LTE-1", profile="quick", paper="RTT grows with bytes in flight",
               criterion="≥ 90 % of bins within ±15 % of max(base, in-flight/C)", outcome=outcome,
               run_dir="/runs/fidelity/fidelity-quick-t/LTE-1", started=1.0, ended=2.0)
    record_row(path, run="fidelity-quick-t", row_id="LTE-3", profile="quick", paper="promotion 435 ms",
               criterion="±20 %", outcome=Outcome(status="pass", testbed="promotion median 449 ms (LTE13: 435 ms)"),
               run_dir="/runs/fidelity/fidelity-quick-t/LTE-3", started=1.0, ended=2.0)


def test_fidelity_report_in_an_80_column_terminal_is_one_line_per_row(clawbed_cli: Path, tmp_path: Path) -> None:
    store = tmp_path / "results.sqlite"
    fidelity_store(store)
    out, err = in_terminal([str(clawbed_cli), "fidelity", "report", "--store", str(store), "-o", str(tmp_path / "r.html")])
    lines = out.splitlines()
    assert all(len(line) <= WIDTH for line in lines), max(lines, key=len)
    ids = [r["row_id"] for r in report_rows(store)]
    for row_id in ids:  # every row of the table, each on one line of its own
        assert sum(1 for line in lines if line.split()[:1] == [row_id]) == 1, row_id
    body = [line for line in lines if line.split()[:1] and line.split()[0] in ids]
    assert len(body) == len(ids) and not one_word_lines(lines, lambda line: line.split()[:1] in ([i] for i in ids))
    lte1 = next(line for line in body if line.split()[0] == "LTE-1")
    assert "fail" in lte1 and "RTT = max(base" in lte1 and "failed: bins" in lte1 and lte1.rstrip().endswith("…")
    assert "fidelity show ROW" in out and (tmp_path / "r.html").is_file() and "HTML report:" in err

    whole, _ = in_terminal([str(clawbed_cli), "fidelity", "show", "lte-1", "--store", str(store)])
    lines = whole.splitlines()
    assert all(len(line) <= WIDTH for line in lines) and "check 2 of 2" in [line.strip() for line in lines]
    assert not one_word_lines(lines, lambda line: not line.startswith(" "))  # a field's name starts a row
    flat = " ".join(" ".join(line.split()) for line in lines)
    for part in ("drained slower than the capacity the trace gives", "no idle interval long enough", "Linux 6.18.44",
                 "≥ 90 % of bins within ±15 %", "frto=2"):
        assert part in flat, part


def test_listings_piped_are_csv_and_every_format_carries_every_field(clawbed_cli: Path, tmp_path: Path) -> None:
    store = tmp_path / "results.sqlite"
    fidelity_store(store)
    base = [str(clawbed_cli), "fidelity", "report", "--store", str(store), "-o", str(tmp_path / "r.html")]
    piped = subprocess.run(base, capture_output=True, text=True, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(piped)))
    lte1 = next(r for r in rows if r["row_id"] == "LTE-1")
    assert lte1["reason"] == LONG_REASON and lte1["paper"] == "RTT grows with bytes in flight"
    assert lte1["run_dir"].endswith("LTE-1") and "frto=2" in lte1["sysctls"]
    as_json = subprocess.run([*base, "--format", "json"], capture_output=True, text=True, check=True).stdout
    objects = [json.loads(line) for line in as_json.splitlines()]
    assert len(objects) == len(rows) and next(o for o in objects if o["row_id"] == "LTE-1")["reason"] == LONG_REASON
    markdown = subprocess.run([*base, "--format", "markdown"], capture_output=True, text=True, check=True).stdout
    assert "| row | status | testbed | reason | paper |" in markdown and LONG_REASON.replace("|", "\\|") in markdown
    shown = subprocess.run([str(clawbed_cli), "fidelity", "show", "LTE-1", "--store", str(store)], capture_output=True,
                           text=True, check=True).stdout
    assert json.loads(shown)["checks"][0]["name"] == "bins within ±15 %"
    bad = subprocess.run([str(clawbed_cli), "fidelity", "show", "LTE-99", "--store", str(store)], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "ROW 'LTE-99': no such row" in bad.stderr and "LTE-1, " in bad.stderr


def _help_texts(command: click.Command, path: tuple[str, ...] = ("clawbed",)) -> dict[str, str]:
    ctx = click.Context(command, info_name=path[-1])
    texts = {" ".join(path): command.get_help(ctx)}
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                texts |= _help_texts(sub, (*path, name))
    return texts


def test_no_help_text_shows_a_doubled_percent_sign() -> None:
    """Click prints help as written: a "%%" would show as two signs (it was --wired-loss's)."""
    from clawbed.cli import cli

    texts = _help_texts(cli)
    assert len(texts) > 40 and "clawbed replay" in texts and "clawbed runs show" in texts
    assert "wired link, % (needs" in " ".join(texts["clawbed replay"].split())
    assert not [name for name, text in texts.items() if "%%" in text]


def test_a_wrapping_column_splits_no_word_and_a_too_wide_kept_one_folds_within_80() -> None:
    schemes = Listing("s", (Column("id"), Column("label"), Column("schemes", fit="wrap", min_width=12),
                            Column("reps")),
                      [("98dfb527a0f2", "synth:idle-cell/image-2mb/wireline/s1", "claw, cubic, claw-nodetect", 20)])
    lines = rendered(schemes.table(WIDTH))
    assert any(line.split()[-1:] == ["claw-nodetect"] for line in lines), lines
    wide = Listing("w", (Column("id"), Column("label"), Column("reps")), [("4f9aa38c539b", "x" * 90, 20)])
    lines = rendered(wide.table(WIDTH))
    assert all(len(line) <= WIDTH for line in lines) and "".join(lines).count("x") == 90

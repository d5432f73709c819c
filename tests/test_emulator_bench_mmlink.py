"""``make bench`` beside Mahimahi: mm-link found through $MM_LINK and run live (here a stand-in
script with mm-link's command line), or, without one, the reference figures printed with where
and when they were measured instead of a comparison column."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import click
import pytest
from rich.console import Console

from clawbed.emulator import bench

FAKE_MM_LINK = """#!/bin/sh
# mm-link UPLINK DOWNLINK [--downlink-log=FILE] -- COMMAND...: a stand-in that runs COMMAND with
# MAHIMAHI_BASE set and writes a delivery log of one packet per ms.
log=""
shift 2
while [ "$1" != "--" ]; do case "$1" in --downlink-log=*) log="${1#--downlink-log=}";; esac; shift; done
shift
if [ -n "$log" ]; then echo "# base timestamp: 0" > "$log"; for t in 1 2 3 4 6; do echo "$t - 1500" >> "$log"; done; fi
MAHIMAHI_BASE=127.0.0.1 exec "$@"
"""


def _fake(tmp_path: Path) -> Path:
    path = tmp_path / "mm-link"
    path.write_text(FAKE_MM_LINK)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_mm_link_from_the_environment_or_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake(tmp_path)
    monkeypatch.setenv("MM_LINK", str(fake))
    assert bench.mm_link_binary() == fake
    monkeypatch.setenv("MM_LINK", str(tmp_path / "absent"))
    with pytest.raises(click.UsageError, match="MM_LINK"):
        bench.mm_link_binary()
    monkeypatch.delenv("MM_LINK")
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    assert bench.mm_link_binary() == fake


def test_mm_link_runs_live_and_its_log_is_read(tmp_path: Path) -> None:
    fake = _fake(tmp_path)
    idle = bench.mm_link_idle(fake, tmp_path, 1.0)
    assert idle["cpu_percent"] >= 0
    # The 12 Mbit/s step's command needs iperf3 both ends; its log parsing alone, through a
    # command that does nothing.
    out, _ = bench._mm_link(fake, bench.constant_mahimahi_trace(tmp_path / "t.down", packets_per_ms=1), "true", 1.0,
                            f"--downlink-log={tmp_path / 'log'}")
    assert (tmp_path / "log").read_text().count(" - ") == 5


def test_without_mm_link_the_references_say_where_and_when() -> None:
    results = {"runs": {"idle": [{"cpu_percent": 0.9, "cpu_percent_by_thread": {"cb-cell": 0.4}}]},
               "idle": {"cpu_percent": 0.9, "cpu_percent_by_thread": {"cb-cell": 0.4}},
               "load_average_before": 1.0, "load_average_after": 1.0, "cpus": 2, "cpu_steal_percent": {},
               "mm_link": None, "references": bench.REFERENCES}
    text = io.StringIO()
    bench.render(results, Console(file=text, width=250))
    printed = text.getvalue()
    assert "mm-link, same machine" not in printed and "not a comparison" in printed
    assert all(ref["where"] and ref["when"] for ref in bench.REFERENCES)
    assert "issue 14" in printed and "2026-11" in printed
    results["runs"]["mm_idle"] = [{"cpu_percent": 4.2}]
    results["mm_link"] = "/usr/bin/mm-link"
    text = io.StringIO()
    bench.render(results, Console(file=text, width=250))
    assert "mm-link, same machine, now" in text.getvalue() and "4.2 % of a core" in text.getvalue()
